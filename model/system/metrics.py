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
idle they cost; prefetches an accept interrupted are counted apart (their tokens are cached).
Hidden latency: busy time of all resources minus the latency (work that overlapped).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from heteroreason.model.system.config import SystemConfig
from heteroreason.model.system.records import RESOURCES, JobKind, ProblemRun, Resource
from heteroreason.model.timing.energy import device_energy_j

__all__ = ["DatasetMetrics", "ProblemMetrics", "dataset_metrics", "problem_metrics"]


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
    wasted_energy_j: float
    hidden_ms: float


def _device_powers(config: SystemConfig, on_fpga: bool):
    return {Resource.DRAFT: config.fpga_power if on_fpga else config.draft_gpu_power,
            Resource.PRM: config.prm_power, Resource.TARGET: config.target_power}


def problem_metrics(run: ProblemRun) -> ProblemMetrics:
    """The metrics of one replay, on the system it ran on."""
    config = run.config
    busy = dict.fromkeys(RESOURCES, 0.0)
    wasted = dict.fromkeys(RESOURCES, 0.0)
    stall = 0.0
    wasted_draft = wasted_target = 0
    for iv in run.intervals:
        if iv.kind is JobKind.STALL:
            stall += iv.duration_ms
            continue
        busy[iv.resource] += iv.duration_ms
        if iv.wasted:
            wasted[iv.resource] += iv.duration_ms
            if iv.resource is Resource.DRAFT and iv.kind is JobKind.DRAFT:
                wasted_draft += iv.tokens
            elif iv.resource is Resource.TARGET:
                wasted_target += iv.tokens
    powers = _device_powers(config, run.mode.on_fpga)
    device_j = sum(device_energy_j(p, busy_ms=busy[res], total_ms=run.latency_ms)
                   for res, p in powers.items())
    wasted_j = sum(1e-3 * (p.active_w - p.idle_w) * wasted[res] for res, p in powers.items())
    system_w = config.fpga_system_w if run.mode.on_fpga else config.three_gpu_system_w
    drafted = sum(s.draft_tokens for s in run.trace.steps)
    return ProblemMetrics(
        latency_ms=run.latency_ms, output_tokens=run.output_tokens, drafted_tokens=drafted,
        busy_ms=busy, wasted_ms=wasted, stall_ms=stall, stalled_steps=run.stalled_steps,
        steps=len(run.trace.steps), wasted_draft_tokens=wasted_draft,
        wasted_target_tokens=wasted_target, energy_device_j=device_j,
        energy_system_j=1e-3 * system_w * run.latency_ms, wasted_energy_j=wasted_j,
        hidden_ms=sum(busy.values()) - run.latency_ms)


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


def dataset_metrics(metrics: Sequence[ProblemMetrics]) -> DatasetMetrics:
    """Aggregates over complete replays only (callers never pass partial ones). A set whose
    chains all end empty (a legal result: every kept step undone by a backtrack) has goodput 0
    and infinite energy per output token."""
    if not metrics:
        raise ValueError("no replayed problems to aggregate")
    n = len(metrics)
    latency = sum(m.latency_ms for m in metrics)
    output = sum(m.output_tokens for m in metrics)
    drafted = sum(m.drafted_tokens for m in metrics)
    steps = sum(m.steps for m in metrics)
    energy_device = sum(m.energy_device_j for m in metrics)
    return DatasetMetrics(
        problems=n,
        latency_s=latency / n / 1e3,
        goodput_tokens_s=1e3 * output / latency,
        throughput_tokens_s=1e3 * drafted / latency,
        j_per_token_system=_per(sum(m.energy_system_j for m in metrics), drafted),
        j_per_output_token_device=_per(energy_device, output),
        stall_share=sum(m.stall_ms for m in metrics) / latency,
        stalled_step_share=_per(sum(m.stalled_steps for m in metrics), steps),
        comm_share=sum(m.busy_ms["link"] for m in metrics) / latency,
        wasted_draft_tokens=sum(m.wasted_draft_tokens for m in metrics) / n,
        wasted_target_tokens=sum(m.wasted_target_tokens for m in metrics) / n,
        wasted_energy_share=_per(sum(m.wasted_energy_j for m in metrics), energy_device),
        hidden_s=sum(m.hidden_ms for m in metrics) / n / 1e3,
        utilization={r: sum(m.busy_ms[r] for m in metrics) / latency
                     for r in ("draft", "prm", "target")},
    )
