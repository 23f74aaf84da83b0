"""Metrics of replayed problems, all derived from their recorded timelines.

Tokens, as counted here:

* ``output tokens``: the final reasoning chain (accepted draft steps, target steps that passed,
  regenerated steps); **goodput** = output tokens / latency.
* ``drafted tokens``: every token the draft generated, kept or not — the paper's and the
  artifact's "generated tokens"; **throughput** = drafted tokens / latency, and the paper's
  **J/token** = busy-average system power x latency / drafted tokens.
* ``J/output token``: per-device integration (active power over busy time, idle power over the
  rest, on each of the three devices) / output tokens.

Speculation stall: the draft device idle with a finished step-ahead step, waiting for a
verdict; reported as a share of the latency and as the share of steps that stalled.
Communication share: link busy time / latency. Wasted work: intervals marked wasted
(squashed step-ahead drafts, work a backtrack invalidated), their tokens and the energy above
idle they cost. The target's step-ahead prefetches of steps the PRM accepted are discarded too,
except the tokens a later regeneration at the same position reuses from the partial-output
cache: their energy above idle, times the share of their tokens never reused, counts as wasted
and is reported apart (``prefetch_energy_share``). Accuracy: the share of problems whose trace
says its answer was correct, among those whose trace says either (``None`` where none does).
Hidden latency: busy time of all resources minus the latency (work that overlapped).
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass

from heteroreason.model.system.config import SystemConfig
from heteroreason.model.system.records import STATIONS, JobKind, ProblemRun, Station
from heteroreason.model.timing.energy import device_energy_j
from heteroreason.model.workload.traces import StepOutcome

__all__ = ["DatasetMetrics", "MetricsTotals", "ProblemMetrics", "dataset_metrics",
           "problem_metrics"]


@dataclass(frozen=True)
class ProblemMetrics:
    latency_ms: float
    output_tokens: int
    drafted_tokens: int
    busy_ms: dict[str, float]
    wasted_ms: dict[str, float]
    stall_ms: float
    stalled_steps: int
    steps: int
    wasted_draft_tokens: int
    wasted_target_tokens: int
    energy_device_j: float
    energy_system_j: float
    wasted_energy_j: float  # discarded work, the accepted steps' unused prefetches included
    hidden_ms: float
    prefetch_unused_tokens: float = 0.0
    prefetch_energy_j: float = 0.0  # the unused prefetches' part of wasted_energy_j
    correct: bool | None = None


def _device_powers(config: SystemConfig, mode):
    return {Station.DRAFT: config.draft(mode).power,
            Station.PRM: config.prm_power, Station.TARGET: config.target_power}


def problem_metrics(run: ProblemRun) -> ProblemMetrics:
    """The metrics of one replay, on the system it ran on."""
    config = run.config
    busy = dict.fromkeys(STATIONS, 0.0)
    wasted = dict.fromkeys(STATIONS, 0.0)
    stall = 0.0
    wasted_draft = wasted_target = 0
    prefetch_ms = prefetch_tokens = 0.0
    for iv in run.intervals:
        if iv.kind is JobKind.STALL:
            stall += iv.duration_ms
            continue
        busy[iv.resource] += iv.duration_ms
        if (iv.kind is JobKind.PREFETCH and not iv.wasted
                and run.trace.steps[iv.step].outcome is StepOutcome.ACCEPT):
            prefetch_ms += iv.duration_ms
            prefetch_tokens += iv.tokens
        if iv.wasted:
            wasted[iv.resource] += iv.duration_ms
            if iv.resource is Station.DRAFT and iv.kind is JobKind.DRAFT:
                wasted_draft += iv.tokens
            elif iv.resource is Station.TARGET:
                wasted_target += iv.tokens
    powers = _device_powers(config, run.mode)
    device_j = sum(device_energy_j(p, busy_ms=busy[res], total_ms=run.latency_ms)
                   for res, p in powers.items())
    wasted_j = sum(1e-3 * (p.active_w - p.idle_w) * wasted[res] for res, p in powers.items())
    unused = max(0.0, prefetch_tokens - run.cached_tokens_reused)
    target = powers[Station.TARGET]
    prefetch_j = (1e-3 * (target.active_w - target.idle_w) * prefetch_ms * unused
                  / prefetch_tokens) if prefetch_tokens else 0.0
    system_w = config.draft(run.mode).system_w
    drafted = sum(s.draft_tokens for s in run.trace.steps)
    return ProblemMetrics(
        latency_ms=run.latency_ms, output_tokens=run.output_tokens, drafted_tokens=drafted,
        busy_ms=busy, wasted_ms=wasted, stall_ms=stall, stalled_steps=run.stalled_steps,
        steps=len(run.trace.steps), wasted_draft_tokens=wasted_draft,
        wasted_target_tokens=wasted_target, energy_device_j=device_j,
        energy_system_j=1e-3 * system_w * run.latency_ms,
        wasted_energy_j=wasted_j + prefetch_j, hidden_ms=sum(busy.values()) - run.latency_ms,
        prefetch_unused_tokens=unused, prefetch_energy_j=prefetch_j, correct=run.trace.correct)


@dataclass(frozen=True)
class DatasetMetrics:
    problems: int
    latency_s: float
    goodput_tokens_s: float
    throughput_tokens_s: float
    j_per_token_system: float
    j_per_output_token_device: float
    stall_share: float
    stalled_step_share: float
    comm_share: float
    wasted_draft_tokens: float
    wasted_target_tokens: float
    wasted_energy_share: float
    hidden_s: float
    utilization: dict[str, float]
    prefetch_unused_tokens: float = 0.0
    prefetch_energy_share: float = 0.0
    accuracy: float | None = None

    COLUMNS = ("problems", "latency s", "goodput tok/s", "throughput tok/s", "J/token (system)",
               "J/output token (devices)", "stall %", "stalled steps %", "comm %",
               "wasted draft tok", "wasted target tok", "wasted energy %", "hidden s",
               "util draft %", "util prm %", "util target %")

    def row(self) -> list[str]:
        u = self.utilization
        return [str(self.problems), f"{self.latency_s:.2f}", f"{self.goodput_tokens_s:.1f}",
                f"{self.throughput_tokens_s:.1f}", f"{self.j_per_token_system:.2f}",
                f"{self.j_per_output_token_device:.2f}", f"{100 * self.stall_share:.1f}",
                f"{100 * self.stalled_step_share:.1f}", f"{100 * self.comm_share:.4f}",
                f"{self.wasted_draft_tokens:.0f}", f"{self.wasted_target_tokens:.0f}",
                f"{100 * self.wasted_energy_share:.2f}", f"{self.hidden_s:.2f}",
                f"{100 * u['draft']:.0f}", f"{100 * u['prm']:.0f}", f"{100 * u['target']:.0f}"]


def _per(total: float, count: float) -> float:
    """``total / count``; per-token figures of a set with no such token are infinite (energy
    spent on nothing kept), or 0 when nothing was spent either."""
    if count:
        return total / count
    return math.inf if total else 0.0


class MetricsTotals:
    """The running sums :func:`dataset_metrics` aggregates, one problem at a time (a set's
    metrics in memory that does not grow with the set; the sums are taken in the order of
    the problems, as ``sum`` would, so the figures are the same to the bit)."""

    _SUMS = ("latency_ms", "output_tokens", "drafted_tokens", "steps", "energy_device_j",
             "energy_system_j", "stall_ms", "stalled_steps", "wasted_draft_tokens",
             "wasted_target_tokens", "wasted_energy_j", "hidden_ms", "prefetch_unused_tokens",
             "prefetch_energy_j")
    _BUSY = ("link", "draft", "prm", "target")

    def __init__(self):
        self.problems = 0
        self.judged = self.correct = 0
        self._sums = dict.fromkeys(self._SUMS, 0)
        self._busy = dict.fromkeys(self._BUSY, 0)

    def add(self, m: ProblemMetrics) -> None:
        self.problems += 1
        sums, busy = self._sums, self._busy
        if m.correct is not None:
            self.judged += 1
            self.correct += m.correct
        for name in self._SUMS:
            sums[name] += getattr(m, name)
        for name in self._BUSY:
            busy[name] += m.busy_ms[name]

    def summary(self) -> DatasetMetrics:
        """Aggregates over complete replays only (callers never add partial ones). A set whose
        chains all end empty (a legal result: every kept step undone by a backtrack) has
        goodput 0 and infinite energy per output token."""
        if not self.problems:
            raise ValueError("no replayed problems to aggregate")
        n, s, busy = self.problems, self._sums, self._busy
        latency, drafted = s["latency_ms"], s["drafted_tokens"]
        return DatasetMetrics(
            problems=n,
            latency_s=latency / n / 1e3,
            goodput_tokens_s=1e3 * s["output_tokens"] / latency,
            throughput_tokens_s=1e3 * drafted / latency,
            j_per_token_system=_per(s["energy_system_j"], drafted),
            j_per_output_token_device=_per(s["energy_device_j"], s["output_tokens"]),
            stall_share=s["stall_ms"] / latency,
            stalled_step_share=_per(s["stalled_steps"], s["steps"]),
            comm_share=busy["link"] / latency,
            wasted_draft_tokens=s["wasted_draft_tokens"] / n,
            wasted_target_tokens=s["wasted_target_tokens"] / n,
            wasted_energy_share=_per(s["wasted_energy_j"], s["energy_device_j"]),
            hidden_s=s["hidden_ms"] / n / 1e3,
            utilization={r: busy[r] / latency for r in ("draft", "prm", "target")},
            prefetch_unused_tokens=s["prefetch_unused_tokens"] / n,
            prefetch_energy_share=_per(s["prefetch_energy_j"], s["energy_device_j"]),
            accuracy=self.correct / self.judged if self.judged else None,
        )


def dataset_metrics(metrics: Iterable[ProblemMetrics]) -> DatasetMetrics:
    """:meth:`MetricsTotals.summary` over ``metrics``."""
    totals = MetricsTotals()
    for m in metrics:
        totals.add(m)
    return totals.summary()
