"""``python -m dlperf``: the dlperf command, from a source tree as from an install."""

import sys

from dlperf.cli import main

sys.exit(main())
