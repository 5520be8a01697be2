"""The step kind's tables: DLBench's layout (rows: network x framework; columns: thread
counts, then GPUs; one column group per machine), with the model's prediction beside each
cell where a predictor is given, and the detail of every measured configuration."""

from __future__ import annotations

from dlperf import workloads
from dlperf.core import cpu_peak, speed_probe, units
from dlperf.core.aggregate import ConfigResult
from dlperf.perfmodel.machine_fits import beyond_cores_text
from dlperf.report.tables import Predictor, Provenance, Table, machine_label, sort_rows


def _column(row: ConfigResult) -> str:
    return f"{row.spec.threads}" if row.spec.device == "cpu" else "GPU"


def time_cell(r: ConfigResult | None, notes: list[str], where: str,
              fmt=lambda s: f"{s:.4g}") -> tuple[str, float | None]:
    """A table cell of time per mini-batch and its value: blank when not run, the median
    when measured, and for a failure '-[n]' with its reason appended to ``notes``."""
    if r is None:
        return "", None
    if r.measured:
        return fmt(r.median_s), r.median_s
    notes.append(f"{where}: {r.failure}")
    return f"-[{len(notes)}]", None


def dlbench_table(rows: list[ConfigResult], *, batch: str = "default",
                  machines: dict[str, str] | None = None,
                  predictor: Predictor | None = None) -> Table:
    """DLBench's Table 4 layout: rows network x framework (x precision and settings),
    columns CPU thread counts then GPU; each cell the median time per mini-batch in seconds
    at the network's DLBench default batch size. A configuration that failed shows '-'
    with a footnote. Rows of several machines are laid out as DLBench laid out its
    desktop, server and GPU columns: one column group per machine (``machines`` names
    them; the first machine seen comes first). With a ``predictor``, every cell gains a
    'pred.' column beside it: the model's time for that configuration."""
    chosen = [
        r for r in rows
        if r.spec.kind == "step"
        and (batch != "default" or r.spec.batch_size == workloads.get(r.spec.network).default_batch)
    ]
    threads = sorted({r.spec.threads for r in chosen if r.spec.device == "cpu"})
    has_gpu = any(r.spec.device == "gpu" for r in chosen)
    cols = [str(t) for t in threads] + (["GPU"] if has_gpu else [])
    mids = list(dict.fromkeys(r.machine_id for r in chosen))
    grouped_layout = len(mids) > 1
    prov = Provenance(chosen, machines, machine_column=False)
    # (framework, threads) -> the quality line of a disturbed calibration the predictor
    # stands on (``kinds.calibrate.validate.predictor``): its cells are marked '!'
    disturbed: dict[tuple[str, int], str] = getattr(predictor, "disturbed", {}) or {}
    shaky: list[str] = []
    # a cell measured while the machine ran at another speed than calibrated: marked '~'
    drift = getattr(predictor, "drift", None)
    drifted = 0
    # a cell past the cores, predicted with the cores' calibration: marked '^'
    beyond = getattr(predictor, "beyond_cores", None)
    past_cores: dict[tuple[int, int], int] = {}
    # a cell whose network's layer shapes the calibration did not time: marked '#'
    timed = getattr(predictor, "timed", None)
    untimed: dict[tuple[str, str | None], int] = {}
    # a cell predicted from whole-grid curves known to miss its layers: marked '?', per
    # command that times its own shapes, the kinds missed and the count of cells
    missed_by = getattr(predictor, "missed", None)
    grid_missed: dict[str, tuple[list[str], int]] = {}
    leaf = []
    for c in cols:
        name = "GPU" if c == "GPU" else f"{c} thread{'s' if c != '1' else ''}"
        leaf += [name] + (["pred."] if predictor else [])
    head = ["network", "framework", "batch", *prov.headers]
    headers = head + leaf * len(mids)
    groups = ([("", len(head))] + [(machine_group(m, machines), len(leaf)) for m in mids]
              if grouped_layout else [])
    grouped: dict[tuple, dict[tuple[str | None, str], ConfigResult]] = {}
    for r in sort_rows(chosen):
        # one table row per everything but the column and the machine: a cell never holds
        # two measurements
        key = (r.spec.network, r.spec.size, r.framework_label, r.spec.batch_size,
               r.spec.measurement)
        grouped.setdefault(key, {})[(r.machine_id, _column(r))] = r
    out_rows, values, notes = [], [], []
    for (net, size, fw, b, *_), cells in grouped.items():
        name = net if size in ("full", "") else f"{net} [{size}]"
        provenance = prov.cells(next(iter(cells.values())))
        line, vals = [name, fw, str(b), *provenance], [name, fw, b, *provenance]
        for m in mids:
            where_m = f" on {machine_label(m)}" if grouped_layout else ""
            for c in cols:
                cell = cells.get((m, c))
                text, value = time_cell(
                    cell, notes, f"{name} {fw} {c if c == 'GPU' else c + ' threads'}{where_m}")
                line.append(text)
                vals.append(value)
                if predictor:
                    p = predictor(cell) if cell else None
                    bad = disturbed.get((cell.spec.framework, cell.spec.threads)) if cell \
                        else None
                    if p and bad and bad not in shaky:
                        shaky.append(bad)
                    moved = bool(p and drift and speed_probe.moved(drift(cell)))
                    drifted += moved
                    past = beyond(cell) if p and beyond else None
                    if past:
                        past_cores[past] = past_cores.get(past, 0) + 1
                    skeleton = bool(p and timed and not timed(cell.spec))
                    if skeleton:
                        # the command that times them, for a network as defined
                        key = (name, cell.spec.network if workloads.as_defined(
                            cell.spec.network, cell.spec.size, cell.spec.params) else None)
                        untimed[key] = untimed.get(key, 0) + 1
                    missed = missed_by(cell.spec) if p and missed_by else None
                    if missed:
                        kinds, n = grid_missed.get(missed.command, ([], 0))
                        grid_missed[missed.command] = (
                            list(dict.fromkeys([*kinds, *missed.kinds])), n + 1)
                    line.append((f"{p[0]:.4g}" + ("!" if bad else "") + ("~" if moved else "")
                                 + ("^" if past else "") + ("#" if skeleton else "")
                                 + ("?" if missed else ""))
                                if p else "")
                    vals.append(p[0] if p else None)
        out_rows.append(line)
        values.append(vals)
    caption = ("Median over timed steps and worker processes; forward + backward + update; "
               "'-' marks a configuration that did not complete (reason in the footnote).")
    if predictor:
        caption += (" 'pred.': the performance model's time for the cell's configuration "
                    "(errors in the predictions section).")
    notes_after = [f"! predicted from a disturbed calibration: {q}" for q in shaky]
    if drifted:
        notes_after.append(
            f"~ measured while the machine ran at another speed than when it was calibrated "
            f"(its speed probe more than {speed_probe.DRIFT:.0%} off, {drifted} cell"
            f"{'s' if drifted != 1 else ''}): the cell's error is partly the machine's; "
            f"'dlperf calibrate --force' and measuring the cell again set both at one speed")
    notes_after += [f"^ more threads than the cores ({n} cell{'s' if n != 1 else ''}): "
                    + beyond_cores_text(threads, cores) for (threads, cores), n in past_cores.items()]
    notes_after += [f"# {net}'s layer shapes were not timed by the calibration ({n} cell"
                    f"{'s' if n != 1 else ''}): a skeleton of the grid stands in, its error "
                    f"that of 'dlperf validate --held-out-shapes'; "
                    + (f"'dlperf calibrate --networks {network}' times them" if network else
                       "a calibration times a network as defined")
                    for (net, network), n in untimed.items()]
    notes_after += [f"? predicted from the whole grid's curves, which miss the {' and '.join(kinds)} "
                    f"there ({n} cell{'s' if n != 1 else ''}, docs/prediction.md): {command} "
                    "times their own shapes" for command, (kinds, n) in grid_missed.items()]
    return Table(
        title="Time per mini-batch (s), DLBench layout",
        headers=headers,
        rows=out_rows,
        values=values,
        footnotes=[f"[{i}] {n}" for i, n in enumerate(notes, 1)] + prov.notes + notes_after,
        caption=caption,
        groups=groups,
    )


def machine_group(machine_id: str | None, machines: dict[str, str] | None) -> str:
    """The label of a machine's column group: its description and short id."""
    desc = (machines or {}).get(machine_id or "")
    return f"{desc} [{machine_label(machine_id)}]" if desc else machine_label(machine_id)


def detail_table(rows: list[ConfigResult], title: str = "Measurements",
                 machines: dict[str, str] | None = None) -> Table:
    """Every configuration with its dispersion, throughput, FLOP rate and memory, and the
    settings (and machine) that measured it."""
    prov = Provenance(rows, machines)
    headers = ["network", "framework", "device", "batch", *prov.headers, "time/batch", "+-MAD",
               "CV", "samples/s", "GFLOP/s", "%peak", "MFU", "memory", "threads", "procs"]
    n_head = 4 + len(prov.headers)
    out, values, notes = [], [], []
    for r in sort_rows(rows):
        dev = f"cpu x{r.spec.threads}" if r.spec.device == "cpu" else r.spec.device
        name = r.spec.network if r.spec.size in ("full", "") else f"{r.spec.network} [{r.spec.size}]"
        head = [name, r.framework_label, dev, str(r.spec.batch_size), *prov.cells(r)]
        if not r.measured:
            notes.append(f"{name} {r.framework_label} {dev} b{r.spec.batch_size}: {r.failure}")
            out.append(head + [f"-[{len(notes)}]"] + [""] * (len(headers) - n_head - 1))
            values.append([*head, None] + [None] * (len(headers) - n_head - 1))
            continue
        cv = r.within_cv
        share = units.percent(r.peak_share)
        if r.over_peak:  # capped at 100%: say so rather than hide it
            notes.append(f"{name} {r.framework_label} {dev} b{r.spec.batch_size}: achieved above "
                         "the peak stored with it; shown as 100%")
            share += f"[{len(notes)}]"
        out.append(head + [
            units.seconds(r.median_s), units.seconds(r.mad_s), units.percent(cv),
            f"{r.samples_per_s:.4g}", f"{r.achieved_flops / 1e9:.1f}" if r.achieved_flops else "-",
            share, units.percent(r.mfu) if r.mfu is not None else "-",
            units.nbytes(r.peak_rss_bytes),
            str(r.threads_in_force or "-"), str(r.processes),
        ])
        values.append([*head, r.median_s, r.mad_s, cv, r.samples_per_s, r.achieved_flops,
                       r.peak_share, r.mfu, r.peak_rss_bytes, r.threads_in_force,
                       r.processes])
    # what MFU divides by (model FLOPs/s over the device's peak at the run's precision)
    # (one line for peaks that differ only in the clock measured at each run)
    peaks = cpu_peak.merged(sorted({p for r in rows if r.measured and (p := r.utilisation_peak)}))
    return Table(title=title, headers=headers, rows=out, values=values,
                 footnotes=[f"[{i}] {n}" for i, n in enumerate(notes, 1)] + prov.notes
                 + [f"MFU: model FLOPs per second over {p}" for p in peaks])
