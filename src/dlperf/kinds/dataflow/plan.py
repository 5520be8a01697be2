"""RunSpecs of data-flow measurements; imports no framework.

- ``resolve``: input flags -> InputOptions checked against the network (a format that
  holds images for a network that takes none is refused; a data set in memory larger
  than --memory-limit is streamed from disk instead, and a note says so);
- ``with_loader``: beside each step run on a pipeline, the loader-alone run of the same
  pipeline (its own process, no training);
- ``sweep``: the loader workers x prefetch grid on disk, the synthetic-data floor, and
  the loader-alone runs, for ``dlperf dataflow sweep``;
- ``prepare``: generate the data sets the specs read, before any worker starts.
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from pydantic import ValidationError

from dlperf import workloads
from dlperf.core.errors import UsageError, validation_message
from dlperf.core.spec import RunSpec
from dlperf.core.units import nbytes
from dlperf.inputs import datasets
from dlperf.inputs.options import InputOptions
from dlperf.kinds.dataflow.options import LoaderOptions
from dlperf.kinds.step.options import StepOptions

#: InputOptions field -> its flag (``dlperf.cli.dataflow_flags``)
FLAGS = {"input": "--input", "data_format": "--data-format", "loader_workers": "--loader-workers",
         "prefetch": "--prefetch", "autotune": "--autotune", "pin_memory": "--pin-memory",
         "cache": "--cache", "samples": "--samples", "sample_delay_s": "--sample-delay"}


def make(values: dict[str, Any]) -> InputOptions:
    """InputOptions from flag values; a contradiction is one line naming the flags."""
    try:
        return InputOptions.model_validate(values)
    except ValidationError as e:
        err = e.errors()[0]
        field = err["loc"][0] if err["loc"] else None
        flag = FLAGS.get(str(field)) if field else None
        msg = validation_message(e)
        for f, spelled in FLAGS.items():  # field names in the message -> their flags
            if f != "input":
                msg = re.sub(rf"\b{f}\b", spelled, msg)
        msg = re.sub(r"\binput (memory|disk)", r"--input \1", msg)
        raise UsageError(f"{flag + ': ' if flag else ''}{msg}") from None


def input_of(spec: RunSpec) -> InputOptions:
    """The input settings of a spec (synthetic data for a kind that has none)."""
    return spec.options if isinstance(spec.options, InputOptions) else InputOptions()


def has_pipeline(spec: RunSpec) -> bool:
    """True when a step or loader run reads a real input pipeline."""
    return input_of(spec).has_pipeline


def on_pipeline(spec: RunSpec, opts: InputOptions) -> RunSpec:
    """``spec`` (a step or loader run) with the input settings ``opts``."""
    model = LoaderOptions if spec.kind == "loader" else StepOptions
    return spec.model_copy(update={"options": model.model_validate(opts.to_options())})


def _config(network: str, size: str | None, params: dict[str, Any] | None) -> Any:
    return workloads.resolve(network, size, params)[2]


def is_image(config: Any) -> bool:
    return datasets.for_network(config, 1, "raw").kind == "image"


def resolve(values: dict[str, Any], network: str, size: str | None,
            params: dict[str, Any] | None, batch_size: int,
            memory_limit: int | None = None) -> tuple[InputOptions, list[str]]:
    """InputOptions for ``network`` from the flags given (``values``, by field), and notes
    on what was decided for the user."""
    notes: list[str] = []
    values = dict(values)
    cfg = _config(network, size, params)
    dlbench = [n for n, w in workloads.WORKLOADS.items() if w.group == "dlbench"]
    if values.get("input", "synthetic") != "synthetic" and network not in dlbench:
        raise UsageError(f"--input: input pipelines are built for the DLBench networks "
                         f"({', '.join(dlbench)}); {network} trains on synthetic data only")
    if values.get("input") == "disk" and "data_format" not in values:
        values["data_format"] = "jpeg" if is_image(cfg) else "raw"
    opts = make(values)
    if opts.synthetic:
        return opts, notes
    data = datasets.for_network(cfg, opts.samples,
                                opts.data_format if opts.input == "disk" else "raw")
    if batch_size > opts.samples:
        raise UsageError(f"--samples {opts.samples} is smaller than the batch size {batch_size}")
    if opts.input == "memory" and memory_limit and data.in_memory_bytes() > memory_limit:
        opts = make({**opts.to_options(), "input": "disk", "data_format": "raw"})
        notes.append(f"the data set ({nbytes(data.in_memory_bytes())} decoded) is larger "
                     f"than --memory-limit ({nbytes(memory_limit)}): streamed from disk (raw "
                     "records) instead of held in memory")
    return opts, notes


def with_options(specs: Iterable[RunSpec], opts: InputOptions) -> list[RunSpec]:
    """``specs`` on the input pipeline ``opts`` (unchanged for synthetic data)."""
    if opts.synthetic and not opts.to_options():
        return list(specs)
    return [on_pipeline(s, opts) for s in specs]


def loader_spec(step: RunSpec) -> RunSpec:
    """The loader-alone run of a step run's pipeline: same network (its data), batch,
    framework, threads and settings; no training."""
    return step.model_copy(update={"kind": "loader", "options": LoaderOptions.model_validate(
        input_of(step).to_options())})


def with_loader(specs: Sequence[RunSpec]) -> list[RunSpec]:
    """``specs`` followed by the loader-alone run of each distinct pipeline among them."""
    out = list(specs)
    seen = {s.run_id for s in out}
    for s in specs:
        if s.kind == "step" and has_pipeline(s):
            ld = loader_spec(s)
            if ld.run_id not in seen:
                seen.add(ld.run_id)
                out.append(ld)
    return out


def sweep(base: RunSpec, values: dict[str, Any], workers: Sequence[int],
          prefetch: Sequence[int], memory_limit: int | None = None) -> list[RunSpec]:
    """The data-flow sweep of one configuration ``base`` (a synthetic step spec): the
    synthetic floor first, then for every (workers, prefetch) the training run on the
    pipeline and its loader-alone run. ``values``: the other input flags (disk by
    default)."""
    specs = [base]
    for w, p in itertools.product(workers, prefetch):
        opts, _ = resolve({"input": "disk", **values, "loader_workers": w, "prefetch": p},
                          base.network, base.size, base.params, base.batch_size, memory_limit)
        step = on_pipeline(base, opts)
        specs += [step, loader_spec(step)]
    return specs


def prepare(specs: Iterable[RunSpec],
            on_progress: Callable[[str, int, int], None] | None = None) -> list[str]:
    """Generate every data set the specs read from disk (once per shape); their names."""
    made = []
    for s in specs:
        opts = input_of(s)
        if opts.input != "disk":
            continue
        data = datasets.for_network(_config(s.network, s.size, s.params), opts.samples,
                                    opts.data_format)
        if data.name in made:
            continue
        if not (datasets.path_of(data) / "meta.json").exists():
            datasets.ensure(data, (lambda d, n, name=data.name: on_progress(name, d, n))
                            if on_progress else None)
        made.append(data.name)
    return made
