"""``python -m dlperf.cli``: the same as the ``dlperf`` command."""

import sys

from dlperf.cli import main

sys.exit(main())
