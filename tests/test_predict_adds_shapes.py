"""Where a whole grid's curves miss a network's own layers (JAX's convolutions on a CPU past
one thread: YNNPACK gives each thread whole tiles of 64 channels; TensorFlow's products
there: their speed at two threads follows the shape), ``dlperf predict`` times the
network's shapes first, as it does a pipeline's micro-batches."""

from __future__ import annotations

import argparse

from dlperf import api
from dlperf.cli import predict
from dlperf.core.store import Store
from dlperf.perfmodel.fit import grid_misses_convolutions, grid_misses_products
from tests import calibration_fixtures as made_up


def _asked(db, monkeypatch, network: str, framework: str, threads: int) -> list:
    """The scopes ``dlperf predict`` of ``network`` adds to a whole-grid calibration."""
    calls = []
    monkeypatch.setattr(api, "calibrate", lambda *a, **kw: calls.append(kw["scope"]))
    predict._add_shapes(argparse.Namespace(
        network=network, framework=framework, threads=threads, device="cpu",
        precision="fp32", db=db, size=None, param=None, batch_size=None,
        strategy="single", devices=1, micro_batches=None))
    return calls


def _whole_grids(db, *frameworks: str) -> None:
    """Each framework's whole grid at one and two threads, on the made-up machine."""
    with Store(db) as store:
        for fw in frameworks:
            made_up.calibrated(store, frameworks=(fw,), threads=(1, 2), allreduce=False)


def test_a_jax_convolution_network_past_one_thread_is_timed_at_its_own_shapes(
        db, monkeypatch, capsys):
    _whole_grids(db, "jax", "torch")
    assert _asked(db, monkeypatch, "alexnet", "jax", 2) == [[("alexnet", 16)]]
    assert "whose curves miss jax's convolutions at 2 threads" in capsys.readouterr().err
    # one thread, another framework, a network without convolutions: the grid stands
    assert _asked(db, monkeypatch, "alexnet", "jax", 1) == []
    assert _asked(db, monkeypatch, "alexnet", "torch", 2) == []
    assert _asked(db, monkeypatch, "fcn5", "jax", 2) == []
    assert grid_misses_convolutions("jax", "cpu", 2)
    assert not grid_misses_convolutions("jax", "gpu", 2)


def test_a_tensorflow_network_past_one_thread_is_timed_at_its_own_shapes(
        db, monkeypatch, capsys):
    _whole_grids(db, "tensorflow", "torch")
    assert _asked(db, monkeypatch, "fcn5", "tensorflow", 2) == [[("fcn5", 64)]]
    assert "whose curves miss tensorflow's products at 2 threads" in capsys.readouterr().err
    # AlexNet's products as well; at one thread, or in PyTorch, the grid stands
    assert _asked(db, monkeypatch, "alexnet", "tensorflow", 2) == [[("alexnet", 16)]]
    assert _asked(db, monkeypatch, "fcn5", "tensorflow", 1) == []
    assert _asked(db, monkeypatch, "fcn5", "torch", 2) == []
    assert grid_misses_products("tensorflow", "cpu", 2)
    assert not grid_misses_products("tensorflow", "gpu", 2)
    assert not grid_misses_products("jax", "cpu", 2)


def test_a_prediction_from_a_grid_known_to_miss_says_so_until_the_shapes_are_timed(db):
    """Where nothing adds the shapes first (``dlperf advise``, a store read as it is), the
    prediction says that the grid's curves miss them and what times them."""
    from dlperf.kinds.calibrate.validate import predict_here

    with Store(db) as store:
        made_up.calibrated(store, frameworks=("tensorflow",), threads=(1, 2), allreduce=False)
        two, _ = predict_here(store, "fcn5", framework="tensorflow", threads=2)
        one, _ = predict_here(store, "fcn5", framework="tensorflow", threads=1)
    said = [n for n in two.notes if "whole grid's curves miss" in n]
    assert said == ["shapes: the whole grid's curves miss tensorflow's products at 2 threads "
                    "(docs/prediction.md), and this calibration did not time fcn5's own at "
                    "batch 64; 'dlperf calibrate --frameworks tensorflow --threads 2 "
                    "--networks fcn5 --batch-size 64' times them ('dlperf predict' does so "
                    "first)"]
    assert not [n for n in one.notes if "whole grid's curves miss" in n]
    with Store(db) as store:  # the network's own shapes timed: the note goes
        made_up.calibrated(store, frameworks=("tensorflow",), threads=(2,), allreduce=False,
                           scope=(("fcn5", 64),))
        again, _ = predict_here(store, "fcn5", framework="tensorflow", threads=2)
    assert not [n for n in again.notes if "whole grid's curves miss" in n]


def test_the_table_and_validate_mark_a_cell_the_whole_grid_misses(db, capsys):
    """The DLBench table and ``dlperf validate`` read the store as it is: a cell predicted
    from whole-grid curves known to miss its layers (TensorFlow's FCN-5 at two threads)
    is marked '?' with the command that times its shapes; its one-thread cell and
    PyTorch's are not, and once those shapes are timed the mark goes."""
    import json

    from dlperf.cli import main
    from tests.report_fixtures import result

    def marks() -> tuple[dict, list[str], dict, str]:
        dl = next(s for s in api.report(db=db, out=db.parent / "rep").sections
                  if s.name == "dlbench").tables[0]
        pred = {(r[1], c): r[dl.headers.index(c) + 1] for r in dl.rows
                for c in ("1 thread", "2 threads")}
        assert main(["validate", "--json", "--db", str(db)]) == 0
        doc = {(c["framework"], c["threads"]): c["grid_missed"]
               for c in json.loads(capsys.readouterr().out)["cases"]}
        assert main(["validate", "--db", str(db)]) == 0
        return pred, dl.footnotes, doc, capsys.readouterr().out

    _whole_grids(db, "tensorflow", "torch")
    with Store(db) as store:
        for fw in ("tensorflow", "torch"):
            for threads in (1, 2):
                store.add(result("fcn5", threads, 0.5, framework=fw))
    pred, notes, doc, text = marks()
    tf = next(fw for fw, _ in pred if fw.startswith("tensorflow"))
    assert pred[(tf, "2 threads")].endswith("?")
    assert not any(pred[k].endswith("?") for k in pred if k != (tf, "2 threads"))
    command = ("'dlperf calibrate --frameworks tensorflow --threads 2 --networks fcn5 "
               "--batch-size 64'")
    assert [n for n in notes if n.startswith("?")] == [
        f"? predicted from the whole grid's curves, which miss the products there (1 cell, "
        f"docs/prediction.md): {command} times their own shapes"]
    assert doc == {("tensorflow", 1): [], ("tensorflow", 2): ["products"],
                   ("torch", 1): [], ("torch", 2): []}
    assert "fcn5 tensorflow/graph cpu x2 b64?" in text and "x1 b64?" not in text
    assert command in " ".join(text.split())
    with Store(db) as store:  # the network's own shapes timed: the marks go
        made_up.calibrated(store, frameworks=("tensorflow",), threads=(2,), allreduce=False,
                           scope=(("fcn5", 64),))
    pred, notes, doc, text = marks()
    assert not any(v.endswith("?") for v in pred.values())
    assert not [n for n in notes if n.startswith("?")] and not any(doc.values())
    assert "b64?" not in text and "which miss the" not in text
