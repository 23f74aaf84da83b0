"""Traces shipped with the package, so the project runs with no external data.

They are synthetic, made by :func:`heteroreason.model.workload.trace_synth.generate_traces` with the
seed and size recorded here (``heteroreason traces generate --dataset all --problems 100
--seed 2026 --out model/workload/data/traces`` writes them again, byte for byte).
"""

from __future__ import annotations

from pathlib import Path

from heteroreason.model.workload.trace_synth import PROFILES
from heteroreason.model.workload.traces import ProblemTrace, load_traces

__all__ = ["BUNDLED_DIR", "BUNDLED_PROBLEMS", "BUNDLED_SEED", "bundled_path", "load_bundled"]

BUNDLED_DIR = Path(__file__).resolve().parent / "data" / "traces"
BUNDLED_SEED = 2026
BUNDLED_PROBLEMS = 100


def bundled_path(dataset: str) -> Path:
    if dataset not in PROFILES:
        raise KeyError(f"no bundled traces for {dataset!r}; datasets: {', '.join(PROFILES)}")
    return BUNDLED_DIR / f"{dataset}.jsonl"


def load_bundled(dataset: str) -> list[ProblemTrace]:
    return load_traces(bundled_path(dataset))
