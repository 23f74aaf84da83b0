"""The scheduler's typed vocabulary: resources, kinds of work, queued jobs, running records and
the recorded intervals and runs that :mod:`heteroreason.model.system.metrics` reads."""

from __future__ import annotations

import enum
from collections.abc import Callable
from dataclasses import dataclass
from typing import NamedTuple

from heteroreason.model.system.config import ServingMode, SystemConfig
from heteroreason.model.system.event_loop import Priority
from heteroreason.model.workload.traces import ProblemTrace

__all__ = ["STATIONS", "Interval", "Job", "JobKind", "ProblemRun", "Record", "Station"]


class Station(str, enum.Enum):
    """A device or link of the system; each runs one job at a time."""

    DRAFT = "draft"
    PRM = "prm"
    TARGET = "target"
    LINK = "link"

    def __str__(self) -> str:
        return self.value


STATIONS = tuple(Station)


class JobKind(str, enum.Enum):
    """What an interval of a resource's time was spent on."""

    DRAFT_PROMPT_PREFILL = "draft_prompt_prefill"  # the GPU prefills the draft's prompt KV
    PROMPT_PREFILL = "prompt_prefill"  # the GPU draft prefills its prompt
    KV_MIGRATION = "kv_migration"  # the prompt's draft KV crosses to the FPGA
    INGEST = "ingest"  # the FPGA ingests host tokens (shadow synchronisation)
    DRAFT = "draft"  # the draft decodes a step
    STALL = "stall"  # the step-ahead draft waits for a verdict
    TOKENS = "tokens"  # token ids cross the link
    SCORE_DRAFT = "score_draft"
    SCORE_TARGET = "score_target"
    SCORE_REGEN = "score_regen"
    GENERATE = "generate"  # the target repairs a rejected step (sequential modes)
    PREFETCH = "prefetch"  # the target's step from the same context, ahead of the verdict
    REGENERATE = "regenerate"  # the target's step after a backtrack
    DRAFT_PREFILL = "draft_prefill"  # the GPU draft prefills the target's tokens

    def __str__(self) -> str:
        return self.value


class Job(NamedTuple):
    """Work waiting for a resource; ``done(*args)`` runs when it finishes, unless a backtrack
    (a new ``epoch``) made it stale. (A named tuple: the replay makes one per activity.)"""

    kind: JobKind
    duration_ms: float
    step: int
    tokens: int
    priority: Priority
    done: Callable[..., None] | None
    args: tuple
    epoch: int


@dataclass(slots=True)
class Record:
    """A job as it runs; a cancelled one is cut short (``end_ms``, ``tokens`` pro rata)."""

    resource: Station
    kind: JobKind
    start_ms: float
    end_ms: float
    step: int
    tokens: int
    wasted: bool
    job_id: int
    epoch: int

    def interval(self) -> Interval:
        return Interval(self.resource, self.kind, self.start_ms, self.end_ms, self.step,
                        self.tokens, self.wasted)


@dataclass(frozen=True)
class Interval:
    """One activity on one resource. ``wasted``: discarded work (squashed step-ahead drafts,
    work invalidated by a backtrack, speculative work still running when the problem ends). A
    prefetch interrupted by an accept is not wasted: its tokens are cached (``kind`` prefetch,
    cut short)."""

    resource: Station
    kind: JobKind
    start_ms: float
    end_ms: float
    step: int
    tokens: int
    wasted: bool = False

    @property
    def duration_ms(self) -> float:
        return self.end_ms - self.start_ms


@dataclass(frozen=True)
class ProblemRun:
    """One problem's replay: its trace, the system and mode it ran on, and its timeline."""

    trace: ProblemTrace
    config: SystemConfig
    mode: ServingMode
    intervals: tuple[Interval, ...]
    latency_ms: float
    output_tokens: int
    stalled_steps: int
    cached_tokens_reused: int
    events: int
