"""Upgrades of a results store written by an earlier dlperf. Every row is kept.

``STEPS[v]`` turns a store of schema version ``v`` into one of version ``v + 1``, inside
the transaction that opens the store, so a store is either fully upgraded or untouched.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Callable

from pydantic import ValidationError

from dlperf.core.spec import RunSpec

#: The warning an old GPU row gains: before version 2, dlperf left the precision to the
#: framework's defaults, which turn TF32 on for some operations (cuDNN convolutions in
#: PyTorch; matrix products in TensorFlow and JAX on Ampere and later GPUs).
GPU_PRECISION_WARNING = (
    "measured before dlperf set the precision explicitly: the framework's default "
    "precision applied (TF32 may have been on for some operations); re-measure for fp32"
)


def v1_to_v2(db: sqlite3.Connection) -> None:
    """Version 2 puts the measurement settings and the precision into ``config_id`` and
    ``run_id``: recompute both for every row from the RunSpec stored in its JSON (a spec
    without a precision was an fp32 run, the only one dlperf had). A row whose spec no
    longer validates keeps its old ids, which no new spec can produce."""
    rows = db.execute("SELECT id, device, result FROM results").fetchall()
    for row_id, device, text in rows:
        data = json.loads(text)
        try:
            spec = RunSpec.model_validate(data["spec"])
        except (KeyError, ValidationError):
            continue
        if device == "gpu" and data.get("status") == "ok":
            data["warnings"] = [*data.get("warnings", []), GPU_PRECISION_WARNING]
            text = json.dumps(data)
        db.execute("UPDATE results SET run_id=?, config_id=?, result=? WHERE id=?",
                   (spec.run_id, spec.config_id, text, row_id))


def v2_to_v3(db: sqlite3.Connection) -> None:
    """Version 3 types each kind's options (``dlperf.kinds``): a spec's identity counts the
    options that differ from their defaults, so the ids of train, parallel and peak runs
    are recomputed from each row's stored spec (step runs, which have no options, keep
    theirs). The JSON itself is not rewritten: an untyped ``extra`` is read into the
    typed outcome whenever the row is read."""
    rows = db.execute("SELECT id, result FROM results WHERE kind != 'step'").fetchall()
    for row_id, text in rows:
        try:
            spec = RunSpec.model_validate(json.loads(text)["spec"])
        except (KeyError, ValidationError):
            continue
        db.execute("UPDATE results SET run_id=?, config_id=? WHERE id=?",
                   (spec.run_id, spec.config_id, row_id))


STEPS: dict[int, Callable[[sqlite3.Connection], None]] = {1: v1_to_v2, 2: v2_to_v3}
