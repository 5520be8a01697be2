"""``dlperf validate``: predict every step and parallel configuration the store has
measured on this machine and print the errors. Parsing and printing only
(``dlperf.kinds.calibrate.validate``).

    dlperf validate                                # the kernel-calibrated model alone
    dlperf validate --leave-one-network-out        # plus factors fitted on other networks
    dlperf validate --held-out-shapes              # each network's own shapes not timed
    dlperf validate --published                    # the catalogue against GPU times
"""

from __future__ import annotations

import argparse
import json
from collections import Counter
from typing import TYPE_CHECKING

from dlperf.cli import args
from dlperf.cli.progress import out
from dlperf.core import speed_probe, units
from dlperf.core.errors import UsageError

if TYPE_CHECKING:
    from dlperf.kinds.calibrate.validate import Case


def add(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "validate", help="the model's error on every configuration measured here",
        description="Predict every step and parallel configuration stored for this machine "
        "from its kernel calibration (dlperf calibrate) and print the error per network, "
        "framework, threads, batch size and strategy, and the worst cases. The calibration "
        "never saw a network; --leave-one-network-out adds per-framework factors fitted on "
        "the other networks' measurements, never the predicted one's.")
    how = p.add_mutually_exclusive_group()
    how.add_argument("--leave-one-network-out", action="store_true",
                     help="correct each network by factors fitted on the other networks")
    how.add_argument("--leave-one-family-out", action="store_true",
                     help="stricter: fitted on other families (fcn5 without fcn8 too)")
    how.add_argument("--held-out-shapes", action="store_true",
                     help="each network predicted with its own layer shapes held out of a "
                     "calibration scoped to it (dlperf calibrate --networks): how far to "
                     "trust a network whose layers the calibration did not time")
    how.add_argument("--catalogue", metavar="DEVICE", help="predict the measured steps from "
                     "this catalogue entry alone (a GPU's: the reference GPU's curves scaled "
                     "to its datasheet; a CPU's: datasheet and public efficiency factors; no "
                     "calibration of this machine), e.g. h100-sxm for the measurements of an "
                     "H100")
    how.add_argument("--memory", action="store_true", help="the memory model instead: each "
                     "measured step's and parallel run's peak memory (resident on a CPU, the "
                     "allocator's on a GPU) beside the predicted peak and its breakdown")
    how.add_argument("--published", action="store_true", help="predict the published GPU "
                     "measurements shipped with dlperf, and the steps dlperf measured on a "
                     "lent GPU that is not the reference, from their catalogue entries alone, "
                     "beside the efficiency-factor roofline and a plain roofline, and the "
                     "memory model against the GPU peaks dlperf measured (no store needed)")
    p.add_argument("--machine", help="with --catalogue: whose measurements (a machine id as "
                   "the report shows it, or 'all'; default this machine)")
    args.add_run_flags(p, network=args.Take(many=True, help="comma-separated (default: all "
                                            "measured)"),
                       framework=args.Take(many=True, help="comma-separated (default: all "
                                           "measured)"))
    p.add_argument("--kinds", default="step,parallel", help="step, parallel (default both), "
                   "dataflow (the steps on an input pipeline: stall share and the smallest "
                   "stall-free loader-worker count)")
    p.add_argument("--worst", type=args.nonneg_int, default=5, help="worst cases to explain "
                   "(default 5)")
    args.add_json(p, help="every case and summary as JSON")
    args.add_db(p, reads_only=True)
    p.set_defaults(func=cmd_validate)


def cmd_validate(a: argparse.Namespace) -> int:
    from dlperf import api
    from dlperf.kinds.calibrate import validate
    from dlperf.report.exporters import print_table
    from dlperf.report.tables import Table

    if a.published:
        return _published(a.json)
    if a.memory:
        return _memory(a)
    kinds = args.str_list(a.kinds) or ["step", "parallel"]
    bad = [k for k in kinds if k not in ("step", "parallel", "dataflow")]
    if bad:
        raise UsageError(f"--kinds: unknown kind '{bad[0]}' (known: step, parallel, "
                         "dataflow)")
    if "dataflow" in kinds:
        if a.catalogue or a.leave_one_network_out or a.leave_one_family_out or \
                a.held_out_shapes:
            raise UsageError("--kinds dataflow validates the input-pipeline model against "
                             "this machine's kernels alone")
        from dlperf.cli.validate_dataflow import validate_dataflow

        rc = validate_dataflow(a)
        kinds = [k for k in kinds if k != "dataflow"]
        if not kinds:
            return rc
    mode = ("lono" if a.leave_one_network_out else "lofo" if a.leave_one_family_out
            else "catalogue" if a.catalogue else "untimed" if a.held_out_shapes
            else "kernels")
    cases, skipped = api.validation(mode, kinds=kinds, catalogue=a.catalogue,
                                    machine=a.machine, networks=a.networks or (),
                                    frameworks=a.frameworks or (), db=a.db)
    if not cases:
        raise UsageError("no measured configuration here that the model can predict (measure "
                         "some: dlperf sweep, dlperf parallel)"
                         + (f"; left out: {skipped[0][1]}" if skipped else ""))
    if a.json:
        print(json.dumps(_json(cases, mode), indent=1))
        return 0
    corrected = mode in ("lono", "lofo")
    probed = any(c.drift for c in cases)
    rows = []
    for c in sorted(cases, key=lambda c: (c.key("network"), c.key("framework"), c.row.spec.threads,
                                          c.row.spec.batch_size, c.key("strategy"))):
        mark = ("#" if not c.timed and mode != "untimed" else "") + ("?" if c.missed else "")
        r = [validate.case_label(c.row.spec) + mark, units.seconds(c.measured_s),
             units.seconds(c.prediction.time_s), f"{c.prediction.time_s / c.measured_s - 1:+.0%}"]
        if corrected:
            r += [units.seconds(c.predicted_s), f"{c.error:+.0%}"]
        if probed:
            r.append(speed_probe.cell(c.drift))
        rows.append(r)
    headers = ["configuration", "measured", a.catalogue or "kernels", "error"]
    if corrected:
        headers += [mode.upper(), "error"]
    caption = _caption(mode)
    if mode != "untimed" and (n := sum(not c.timed for c in cases)):
        caption += (f"; # the calibration did not time this network's layer shapes ({n} "
                    "configuration" + ("s" if n != 1 else "") + "): a skeleton of the grid "
                    "stood in, an error of the kind 'dlperf validate --held-out-shapes' "
                    "measures")
    if missed := validate.missed_legend(cases):
        caption += f"; {missed}"
    if probed:
        headers.append("speed probe")
        caption += f"; {speed_probe.legend()}"
    print_table(Table(title="Predicted against measured (this machine)", headers=headers,
                      rows=rows, caption=caption), out)
    for group in validate.GROUPS:
        summ = validate.summarize(cases, group)
        if len(summ) < 2 and group != "network":
            continue
        print_table(Table(title=f"Error by {group}", headers=[group, "n", "median |error|",
                                                              "p90 |error|", "median error"],
                          rows=[[s.value, str(s.n), units.percent(s.median_abs),
                                 units.percent(s.p90_abs), f"{s.median_signed:+.1%}"]
                                for s in summ]), out)
    for line in validate.parallel_target_lines(cases):
        out.print(line, markup=False)
    (total,) = validate.summarize(cases)
    out.print(f"[bold]all {total.n} configurations[/] ({mode}): median |error| "
              f"{units.percent(total.median_abs)}, p90 {units.percent(total.p90_abs)}")
    for line in (validate.drift_line(cases), validate.at_speed_line(cases)):
        if line is not None:
            out.print(line, markup=False)
    if a.worst:
        out.print("[bold]worst cases[/]")
        for c in validate.worst(cases, a.worst):
            out.print(f"  {validate.case_label(c.row.spec)}: {validate.explain(c)}", markup=False)
    if skipped:
        why = Counter(reason for _, reason in skipped)
        out.print("left out: " + "; ".join(f"{n} ({r})" for r, n in why.most_common()),
                  markup=False)
    return 0


def _memory(a: argparse.Namespace) -> int:
    """The memory model against every step measured here."""
    from dlperf import api
    from dlperf.kinds.calibrate import validate
    from dlperf.report.exporters import print_table
    from dlperf.report.tables import Table

    cases, skipped = api.memory_validation(db=a.db, networks=a.networks or (),
                                           frameworks=a.frameworks or ())
    if not cases:
        raise UsageError("no measured step here whose peak memory the model can predict "
                         "(measure some: dlperf sweep; calibrate: dlperf calibrate)"
                         + (f"; left out: {skipped[0][1]}" if skipped else ""))
    if a.json:
        print(json.dumps({"cases": [
            {"label": validate.case_label(c.row.spec), "network": c.row.spec.network,
             "framework": c.key("framework"), "batch_size": c.row.spec.batch_size,
             "precision": c.row.spec.precision, "measured_bytes": c.measured_bytes,
             "predicted_bytes": c.predicted.total, "error": c.error,
             "memory": c.predicted.model_dump(), "file_drift_bytes": c.file_drift,
             "own_pages_error": c.own_pages_error} for c in cases],
            "summary": {g or "all": [s.__dict__ for s in validate.summarize(cases, g)]
                        for g in (None, "network", "framework", "device")}}, indent=1))
        return 0
    rows = [[validate.case_label(c.row.spec), units.nbytes(c.measured_bytes),
             units.nbytes(c.predicted.total), f"{c.error:+.0%}" + ("~" if c.drifted else ""),
             units.nbytes(c.predicted.baseline),
             units.nbytes(c.predicted.weights + c.predicted.gradients + c.predicted.optimizer),
             units.nbytes(c.predicted.activations + c.predicted.transient)]
            for c in sorted(cases, key=lambda c: (c.key("network"), c.key("framework"),
                                                   c.row.spec.batch_size))]
    print_table(Table(title="Peak memory, predicted against measured (this machine)",
                      headers=["configuration", "measured", "predicted", "error",
                               "baseline", "weights+grads", "activations"], rows=rows,
                      caption="measured: the peak resident memory of the worker (CPU; of a "
                              "parallel run's fullest process) or the allocator's peak "
                              "(GPU); predicted: dlperf.perfmodel.memory, "
                              "its baseline from the calibration (never from the step); "
                              f"~: its process held its libraries' files' pages more than "
                              f"{validate.FILE_DRIFT:.0%} of its peak apart from the "
                              "calibration's (the page cache's state)"), out)
    # a CPU's resident peak and a GPU's allocator peak are apart where a store has both
    devices = ("device",) if len({c.row.spec.device for c in cases}) > 1 else ()
    for group in ("network", "framework", *devices):
        print_table(Table(title=f"Error by {group}", headers=[group, "n", "median |error|",
                                                              "p90 |error|", "median error"],
                          rows=[[s.value, str(s.n), units.percent(s.median_abs),
                                 units.percent(s.p90_abs), f"{s.median_signed:+.1%}"]
                                for s in validate.summarize(cases, group)]), out)
    (total,) = validate.summarize(cases)
    out.print(f"[bold]all {total.n} runs[/] (memory): median |error| "
              f"{units.percent(total.median_abs)}, p90 {units.percent(total.p90_abs)}")
    if line := validate.file_pages_line(cases):
        out.print(line, markup=False)
    if skipped:
        why = Counter(reason for _, reason in skipped)
        out.print("left out: " + "; ".join(f"{n} ({r})" for r, n in why.most_common()),
                  markup=False)
    return 0


def _published(as_json: bool) -> int:
    """``report.published``'s three models against ``reference.published_gpu``, and then
    against ``reference.measured_gpu`` (steps dlperf measured on a lent GPU)."""
    from dlperf.perfmodel.scaled import reference
    from dlperf.reference import measured_gpu, published_gpu

    ref = reference()
    measured = measured_gpu()
    # the shipped steps ran on another GPU than the shipped curves'; a user's own
    # reference (DLPERF_REFERENCE_FITS) may be that GPU, and then they check no scaling
    own = ref is not None and any(r.device == ref.device for r in measured.rows)
    sets = (("The catalogue against published training times (ResNet-50)", "published",
             "published measurements", published_gpu()),
            ("The catalogue against steps dlperf measured on a lent GPU"
             + (" (the reference curves' own GPU)" if own else
                " (not the reference curves' GPU)"), "measured", "steps measured there",
             measured))
    docs = [_published_set(*s, as_json) for s in sets]
    memory = _published_memory(as_json)
    if as_json:
        print(json.dumps({**docs[0], "measured": docs[1], "memory": memory}, indent=1))
        return 0
    if ref is not None:
        out.print(f"reference curves: {ref.device}, {ref.source}", markup=False)
    return 0


def _published_memory(as_json: bool) -> dict:
    """The memory model against the allocator peaks dlperf measured on a lent GPU: its
    table (none with ``as_json``) and JSON document."""
    import statistics

    from dlperf.reference import measured_gpu_memory
    from dlperf.report.exporters import print_table
    from dlperf.report.published_memory import gpu_memory_error, peak_cases
    from dlperf.report.tables import Table

    cases, err = peak_cases(), gpu_memory_error()
    held = [abs(c.error) for c in cases if c.row.session == "held-out"]
    summary = {"median_abs": err.median, "p90_abs": err.p90, "n": err.n,
               "held_out_median_abs": statistics.median(held) if held else None}
    doc = {"citation": list(measured_gpu_memory()[0]), "summary": summary, "cases": [
        {"gpu": c.row.gpu, "framework": c.row.framework, "network": c.row.network,
         "size": c.row.size, "precision": c.row.precision, "batch_size": c.row.batch_size,
         "measured_bytes": c.row.device_peak_bytes, "predicted_bytes": c.predicted.total,
         "error": c.error, "session": c.row.session, "memory": c.predicted.model_dump()}
        for c in cases]}
    if as_json:
        return doc
    rows = [[c.row.gpu, c.row.framework,
             c.row.network + (f"[{c.row.size}]" if c.row.size != "full" else ""),
             c.row.precision, str(c.row.batch_size), units.nbytes(c.row.device_peak_bytes),
             units.nbytes(c.predicted.total), f"{c.error:+.0%}", c.row.session]
            for c in cases]
    print_table(Table(title="The memory model against the allocator peaks dlperf measured "
                            "on a lent GPU", headers=["measured on", "framework", "network",
                                                      "precision", "batch", "measured",
                                                      "predicted", "error", "session"],
                      rows=rows, caption="one step's peak of the framework's allocator; "
                      "predicted: dlperf.perfmodel.memory on the device, never fitted on "
                      "these rows ('first': seen before its GPU rule was written)"), out)
    out.print(f"memory: median |error| {units.percent(err.median)}, p90 "
              f"{units.percent(err.p90)} over {err.n} steps"
              + (f"; the {len(held)} held out: {units.percent(summary['held_out_median_abs'])}"
                 if held else ""), markup=False)
    return doc


def _published_set(title: str, column: str, noun: str, data, as_json: bool) -> dict:
    """One set of GPU steps against the three models: its table and summary lines (none
    with ``as_json``), and its JSON document."""
    import statistics

    from dlperf.kinds.calibrate.validate import p90
    from dlperf.report.exporters import print_table
    from dlperf.report.published import published_cases
    from dlperf.report.tables import Table

    cases = published_cases(data)

    def summary(errors: list[float]) -> dict[str, float]:
        mags = [abs(e) for e in errors]
        return {"median_abs": statistics.median(mags), "p90_abs": p90(mags),
                "median_signed": statistics.median(errors)}

    model = summary([c.error for c in cases])
    factors = summary([c.factors_error for c in cases])
    roof = summary([c.roofline_error for c in cases])
    doc = {"citation": list(data.citation), "cases": [
        {"gpu": c.row.gpu, "device": c.row.device, "gpus": c.row.gpus,
         "precision": c.row.precision, "network": c.row.network, "size": c.row.size,
         "batch_size": c.row.batch_size, "published_s": c.row.time_s,
         "predicted_s": c.model_s, "error": c.error, "factors_s": c.factors_s,
         "factors_error": c.factors_error, "roofline_s": c.roofline_s,
         "roofline_error": c.roofline_error, "note": c.row.note} for c in cases],
        "summary": {"catalogue": model, "factors": factors, "roofline": roof}}
    if as_json:
        return doc
    rows = [[c.row.gpu, c.row.device,
             c.row.network + (f"[{c.row.size}]" if c.row.size not in (None, "full") else ""),
             c.row.precision, str(c.row.batch_size),
             units.seconds(c.row.time_s), units.seconds(c.model_s), f"{c.error:+.0%}",
             units.seconds(c.factors_s), f"{c.factors_error:+.0%}",
             units.seconds(c.roofline_s), f"{c.roofline_error:+.0%}"] for c in cases]
    print_table(Table(title=title,
                      headers=[f"{column} on", "entry", "network", "precision", "batch",
                               column, "predicted", "error", "factors", "error",
                               "roofline", "error"], rows=rows,
                      caption="per mini-batch, never fitted on these rows; predicted: as "
                              "dlperf predict (the reference GPU's calibrated kernels scaled "
                              "to the entry's peaks); factors: the datasheet's peaks times "
                              "public efficiency factors; roofline: the peaks at full "
                              "efficiency"), out)
    for name, s in (("predicted", model), ("efficiency factors", factors),
                    ("plain roofline", roof)):
        out.print(f"[bold]{name}[/]: median |error| {units.percent(s['median_abs'])}, p90 "
                  f"{units.percent(s['p90_abs'])}, median error {s['median_signed']:+.1%} "
                  f"({len(cases)} {noun})")
    out.print("source: " + " ".join(data.citation[:3]), markup=False)
    out.print("")
    return doc


def _caption(mode: str) -> str:
    if mode == "catalogue":
        return ("the catalogue entry's prediction alone (a GPU: the reference GPU's kernel "
                "curves scaled to its datasheet; a CPU: its datasheet and the public "
                "efficiency factors; no calibration of this machine), against the measured "
                "steps")
    if mode == "kernels":
        return "kernels: the model from this machine's kernel calibration alone (no network fitted)"
    if mode == "untimed":
        return ("kernels: the kernel calibration alone, each network's own layer shapes held "
                "out of it (a skeleton of the grid and the other networks' shapes stand in), "
                "as a network the calibration did not time is predicted")
    held = "network" if mode == "lono" else "family"
    return (f"kernels: the kernel calibration alone; {mode.upper()}: times per-framework factors "
            f"fitted on the other {held}s' measurements (never this one's), in the form (none, "
            f"one factor, one per term) that predicts each of those from the rest best")


def _json(cases: list[Case], mode: str) -> dict:
    from dlperf.kinds.calibrate import validate

    return {
        "mode": mode,
        "cases": [{"label": validate.case_label(c.row.spec), "kind": c.row.spec.kind,
                   "network": c.row.spec.network, "framework": c.key("framework"),
                   "threads": c.row.spec.threads, "batch_size": c.row.spec.batch_size,
                   "strategy": c.key("strategy"), "measured_s": c.measured_s,
                   "kernels_s": c.prediction.time_s, "predicted_s": c.predicted_s,
                   "error": c.error, "factors": c.factors.model_dump() if c.factors else None,
                   "speed_drift": ({"part": c.drift[0], "change": c.drift[1],
                                    "flagged": c.drifted} if c.drift else None),
                   "at_measured_speed_error": c.at_measured_speed_error,
                   "shapes_timed": c.timed, "grid_missed": list(c.missed.kinds if c.missed else ()),
                   "breakdown": c.prediction.breakdown.model_dump()} for c in cases],
        "summary": {g or "all": [s.__dict__ for s in validate.summarize(cases, g)]
                    for g in (None, *validate.GROUPS)},
        "parallel_targets": [{**t.__dict__, "met": t.met}
                             for t in validate.parallel_targets(cases)],
    }

