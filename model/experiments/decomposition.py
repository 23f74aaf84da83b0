"""The gap between the paper's latencies and this project's reproduction, factor by factor (the
validation report's level c).

A chain of latencies per mode and dataset (mean seconds per problem, Config1: the only
configuration whose traces are public), each link swapping one input of the one before it:

``heteroreason``
    the paper's figure (Fig. 10, +T2+T1) -> the artifact's simulator on its full trace sets
    (``simulator_reference.json``) -> the artifact's schedule on its public sample traces
    (:mod:`~heteroreason.model.experiments.artifact_semantics`) -> this scheduler on the same
    samples with the artifact's prompt convention -> with the prompt in every context -> on the
    bundled synthetic traces (what ``reproduce.py`` prints) -> with another FPGA draft model.
``baseline``, ``t2``
    the paper's figure -> this scheduler on the samples with the paper's claimed GPU draft ->
    with the measured GPU draft -> on the bundled traces (what ``reproduce.py`` prints).

The artifact's simulator models HeteroReason alone, so the GPU modes have no link of its.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np

from heteroreason.model.experiments.artifact_semantics import (
    artifact_latency_ms,
    read_artifact_problem,
)
from heteroreason.model.experiments.reproduce import DATASETS, PAPER_LATENCY_S
from heteroreason.model.files import InputError, loads_json, read_text
from heteroreason.model.system.config import system_config
from heteroreason.model.system.simulate import simulate
from heteroreason.model.workload.trace_import import import_artifact_file
from heteroreason.model.workload.traces import ProblemTrace

__all__ = ["Link", "decompose", "read_simulator_reference", "sample_statistics"]

CONFIG = "config1"


@dataclass(frozen=True)
class Link:
    """One latency of a chain (mean s/problem per dataset; ``None`` where it has none) and what
    it swapped from the link before it; ``kind``: where the figure comes from (``paper``,
    ``artifact`` for the artifact's own simulator output, ``model`` for this project's)."""

    mode: str
    name: str
    kind: str
    latency_s: Mapping[str, float | None]

    def factor(self, previous: Link, dataset: str) -> float | None:
        a, b = previous.latency_s.get(dataset), self.latency_s.get(dataset)
        return None if a is None or b is None else b / a


def read_simulator_reference(path: Path | str, *, case: str = "Config1",
                             variant: str = "with_bt") -> dict[str, dict]:
    """The artifact simulator's per-dataset results (its average latency, examples, events,
    status counts, generated tokens) over its full trace sets."""
    path = Path(path)
    obj = loads_json(read_text(path), str(path))
    try:
        datasets = obj["cases"][case][variant]["datasets"]
    except (KeyError, TypeError):
        raise InputError(str(path), f"no cases.{case}.{variant}.datasets") from None
    for name, metrics in datasets.items():
        value = metrics.get("average_latency_ms") if isinstance(metrics, dict) else None
        if isinstance(value, bool) or not isinstance(value, int | float) or not value > 0:
            raise InputError(str(path), f"{case}.{variant}.{name}: field 'average_latency_ms' "
                             f"must be a positive number, not {value!r}")
    return datasets


def _mean_s(values: Sequence[float]) -> float:
    return float(np.mean(values)) / 1e3


def _by_dataset(files: Sequence[Path]) -> dict[str, list[Path]]:
    groups: dict[str, list[Path]] = {}
    for f in files:
        groups.setdefault(f.parent.name, []).append(f)
    return {d: groups[d] for d in DATASETS if d in groups}


def _ours(traces: Mapping[str, list[ProblemTrace]], config, mode: str) -> dict[str, float]:
    return {d: simulate(t, config, mode, keep_runs=False).summary.latency_s
            for d, t in traces.items()}


def decompose(sample_files: Sequence[Path], reference: Mapping[str, dict],
              bundled: Mapping[str, list[ProblemTrace]], *,
              fpga_models: Sequence[str] = ()) -> list[Link]:
    """The chains (module docstring) on the artifact's sample traces ``sample_files``
    (``<dataset>/example_<N>.json``), its simulator's full-set results ``reference`` and the
    bundled trace sets; ``fpga_models``: FPGA draft models (``system_config``'s ``fpga``) to
    end the ``heteroreason`` chain with."""
    files = _by_dataset(sample_files)
    samples = {d: [import_artifact_file(f) for f in fs] for d, fs in files.items()}
    config = system_config(CONFIG)
    chain_only = replace(config, prompt_in_contexts=False)

    def paper(mode: str) -> dict[str, float]:
        values = PAPER_LATENCY_S[(CONFIG, mode, True)]
        return {d: values[DATASETS.index(d)] for d in DATASETS}

    links = [
        Link("heteroreason", "the paper (Fig. 10, +T2+T1)", "paper", paper("heteroreason")),
        Link("heteroreason", "the artifact's simulator, its full trace sets", "artifact",
             {d: reference[d]["average_latency_ms"] / 1e3 if d in reference else None
              for d in DATASETS}),
        Link("heteroreason", "the artifact's schedule, its sample traces", "model",
             {d: _mean_s([artifact_latency_ms(read_artifact_problem(f), config) for f in fs])
              for d, fs in files.items()}),
        Link("heteroreason", "this scheduler, same samples, the artifact's prompt convention",
             "model", _ours(samples, chain_only, "heteroreason")),
        Link("heteroreason", "the prompt in every context", "model",
             _ours(samples, config, "heteroreason")),
        Link("heteroreason", "the bundled synthetic traces (reproduce.py)", "model",
             _ours(bundled, config, "heteroreason")),
    ]
    for fpga in fpga_models:
        links.append(Link("heteroreason", f"the FPGA draft {fpga} (--fpga {fpga})", "model",
                          _ours(bundled, system_config(CONFIG, fpga=fpga), "heteroreason")))
    paper_draft = system_config(CONFIG, gpu_draft="paper")
    for mode, figure in (("baseline", "the paper (Fig. 10, baseline)"),
                         ("t2", "the paper (Fig. 10, +T2)")):
        links += [
            Link(mode, figure, "paper", paper(mode)),
            Link(mode, "this scheduler, the samples, the paper's GPU draft (8.0 ms/token)",
                 "model", _ours(samples, paper_draft, mode)),
            Link(mode, "the measured GPU draft", "model", _ours(samples, config, mode)),
            Link(mode, "the bundled synthetic traces (reproduce.py)", "model",
                 _ours(bundled, config, mode)),
        ]
    return links


def _execution_trace(path: Path) -> list:
    """A sample file's ``execution_trace`` (its events), or a located error."""
    obj = loads_json(read_text(path), str(path))
    events = obj.get("execution_trace") if isinstance(obj, dict) else None
    if not isinstance(events, list) or not all(
            isinstance(e, dict) and isinstance(e.get("draft_tokens_spent"), int) for e in events):
        raise InputError(str(path), "field 'execution_trace' must be a list of events with "
                                    "'draft_tokens_spent'")
    return events


def sample_statistics(sample_files: Sequence[Path], reference: Mapping[str, dict]
                      ) -> dict[str, tuple[float, float, float, float]]:
    """Per dataset: the draft tokens and the events per problem of the samples and of the full
    sets (the reference's ``total_generated_tokens`` and ``events`` over its ``examples``):
    what the samples' link of the chain swaps."""
    stats = {}
    for d, fs in _by_dataset(sample_files).items():
        events = [_execution_trace(f) for f in fs]
        tokens = np.mean([sum(e["draft_tokens_spent"] for e in ev) for ev in events])
        full = reference.get(d)
        stats[d] = (float(tokens), float(np.mean([len(ev) for ev in events])),
                    full["total_generated_tokens"] / full["examples"] if full else float("nan"),
                    full["events"] / full["examples"] if full else float("nan"))
    return stats
