"""Synthetic reasoning traces whose statistics match a dataset profile, and trace statistics.

The generator fixes a dataset's totals first and then distributes them, so that its statistics
land on the profile (to rounding) at any size rather than only on average: the number of step
events is ``problems x steps_per_problem``, split among problems by a gamma-Poisson draw and
corrected to the exact total; the numbers of rescues and backtracks are the profile's shares of
that total; draft tokens per step are log-normal with the profile's spread, rescaled to the
profile's mean. Backtracks are placed where the policy allows them (at least one accepted step
before, at most ``max_backtracks`` per problem) and go back ``1 + Geometric`` steps, bounded by
the accepted steps there are and the policy's depth.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, replace

import numpy as np

from heteroreason.model import checks
from heteroreason.model.spec.numerics.qwen2_config import qwen2_config
from heteroreason.model.workload.traces import BRSD_POLICY, Policy, ProblemTrace, StepEvent

__all__ = ["MAX_GENERATED_PROBLEMS", "PROFILES", "STEP_TARGET_FIELDS", "DatasetProfile",
           "TraceStats", "generate_traces", "iter_traces", "profile", "step_targets",
           "trace_stats"]


@dataclass(frozen=True)
class DatasetProfile:
    """Statistics of one dataset's traces (docs/design.md §9; spreads from the artifact's
    samples)."""

    name: str
    problems: int
    steps_per_problem: float
    accept_share: float
    rescue_share: float
    backtrack_share: float
    draft_tokens_per_step: float
    draft_tokens_log_sd: float
    target_tokens_per_rescue: float
    target_tokens_log_sd: float
    prompt_tokens: float
    steps_dispersion: float = 4.0  # gamma shape of the steps-per-problem distribution
    backtrack_depth_mean: float = 1.5

    def __post_init__(self):
        shares = self.accept_share + self.rescue_share + self.backtrack_share
        if not math.isclose(shares, 1.0, abs_tol=1e-3):
            raise ValueError(f"profile {self.name!r}: outcome shares sum to {shares}, not 1")
        for key in ("problems", "steps_per_problem", "draft_tokens_per_step",
                    "target_tokens_per_rescue", "prompt_tokens"):
            if getattr(self, key) <= 0:
                raise ValueError(f"profile {self.name!r}: {key} must be positive")

    @property
    def backtracks_per_problem(self) -> float:
        return self.steps_per_problem * self.backtrack_share

    @property
    def draft_tokens_per_problem(self) -> float:
        return self.steps_per_problem * self.draft_tokens_per_step


# Config1's full trace sets with backtracking, converted by step_targets from the artifact
# simulator's per-dataset counts (Hardware/reference_results/simulator_reference.json; rounded to
# 4 decimals, tests/model/workload/test_trace_synth.py converts them again): problems, steps per
# problem, outcome shares, draft tokens per step, target tokens per target draw. From the
# artifact's 120 sample traces (Hardware/inputs/Config1/with_bt): the log-normal spreads, the
# prompt lengths (docs/design.md §9) and the backtrack depth (a mean of 2.0 steps dropped over
# their 56 backtracks, before the generator's bounds)
PROFILES: dict[str, DatasetProfile] = {p.name: p for p in (
    DatasetProfile("math500", 500, 12.936, 0.8033, 0.1631, 0.0335, 72.43, 0.87, 93.54, 0.79,
                   141.0, backtrack_depth_mean=2.0),
    DatasetProfile("gsm8k", 1319, 7.2267, 0.8453, 0.1402, 0.0146, 47.90, 0.61, 62.78, 0.59,
                   116.0, backtrack_depth_mean=2.0),
    DatasetProfile("gaokao2023en", 385, 11.7948, 0.7875, 0.1793, 0.0333, 79.08, 1.01, 109.24,
                   0.91, 112.0, backtrack_depth_mean=2.0),
    DatasetProfile("olympiadbench", 675, 16.8119, 0.7409, 0.2045, 0.0545, 92.01, 0.99, 108.28,
                   0.66, 160.0, backtrack_depth_mean=2.0),
)}

STEP_TARGET_FIELDS = ("problems", "steps_per_problem", "accept_share", "rescue_share",
                      "backtrack_share", "draft_tokens_per_step", "target_tokens_per_rescue")


def step_targets(metrics: dict, *, where: str = "metrics") -> dict[str, float]:
    """A full trace set's statistics in this project's step semantics, from the artifact
    simulator's per-dataset counts (``examples``, ``events``, ``status_counts``,
    ``total_generated_tokens``, ``target_total_tokens`` of ``simulator_reference.json``).

    The artifact counts events: a ``BACKTRACK_EVENT`` and the ``target_rescue`` just before it
    are two events and one ``backtrack`` step here (:mod:`~heteroreason.model.workload.
    trace_import`). So steps = events - backtracks; rescue steps = rescue events - backtracks;
    draft tokens per step = every event's draft tokens (a backtrack event drafts none) over
    the steps; target tokens per target draw = the target's tokens (rescues' and
    regenerations') over the rescue and backtrack events, as the generator draws one per
    rescue and two per backtrack (the failed step and its regeneration).
    """
    def count(key, obj=metrics, name=None):
        value = obj.get(key) if isinstance(obj, dict) else None
        if isinstance(value, bool) or not isinstance(value, int | float) or value < 0:
            raise ValueError(f"{where}: field {name or key!r} must be a non-negative number, "
                             f"not {value!r}")
        return value

    statuses = metrics.get("status_counts") if isinstance(metrics, dict) else None
    accepts, rescues, backtracks = (
        count(k, statuses, f"status_counts.{k}")
        for k in ("accept_pure_draft", "target_rescue", "BACKTRACK_EVENT"))
    events, problems = count("events"), count("examples")
    if accepts + rescues + backtracks != events:
        raise ValueError(f"{where}: status_counts sum to {accepts + rescues + backtracks}, not "
                         f"the {events} events")
    if backtracks > rescues:
        raise ValueError(f"{where}: {backtracks} backtrack events but {rescues} rescues: each "
                         f"backtrack follows a rescue (the generator cannot reach these)")
    steps = events - backtracks
    if not problems or not steps or not rescues:
        raise ValueError(f"{where}: no problems, steps or rescues to derive a profile from")
    return {"problems": problems, "steps_per_problem": steps / problems,
            "accept_share": accepts / steps, "rescue_share": (rescues - backtracks) / steps,
            "backtrack_share": backtracks / steps,
            "draft_tokens_per_step": count("total_generated_tokens") / steps,
            "target_tokens_per_rescue": count("target_total_tokens") / (rescues + backtracks)}


def profile(name: str) -> DatasetProfile:
    if name not in PROFILES:
        raise KeyError(f"unknown dataset profile {name!r}; choose one of {', '.join(PROFILES)}")
    return PROFILES[name]


def _split_total(rng: np.random.Generator, total: int, parts: int, shape: float) -> np.ndarray:
    mean = total / parts
    counts = np.maximum(rng.poisson(rng.gamma(shape, mean / shape, size=parts)), 1)
    while counts.sum() != total:
        diff = total - int(counts.sum())
        idx = rng.integers(parts, size=abs(diff))
        if diff > 0:
            np.add.at(counts, idx, 1)
        else:
            for i in idx:
                if counts[i] > 1:
                    counts[i] -= 1
    return counts


def _tokens(rng: np.random.Generator, n: int, mean: float, log_sd: float) -> np.ndarray:
    if n == 0:
        return np.zeros(0, dtype=np.int64)
    raw = rng.lognormal(0.0, log_sd, size=n)
    values = np.maximum(np.rint(raw * (mean / raw.mean())), 1).astype(np.int64)
    # rescale once more for the rounding and the floor at one token
    drift = round(mean * n) - int(values.sum())
    if drift:
        idx = rng.choice(n, size=abs(drift), replace=True)
        np.add.at(values, idx, 1 if drift > 0 else -1)
        values = np.maximum(values, 1)
    return values


# a set's totals are fixed before they are split, so its draws are made set-wide, into flat
# arrays of a few bytes a step (about 0.25 kB a problem at the peak); the problems are then
# built and yielded one at a time (scripts/bench_traces.py measures the peak)
MAX_GENERATED_PROBLEMS = 1_000_000

ACCEPT, RESCUE, BACKTRACK = 0, 1, 2


# both configurations score with Qwen2.5-Math-PRM-7B, the shortest context of their models
PRM_CONTEXT_TOKENS = qwen2_config("qwen2.5-math-prm-7b").max_context


def generate_traces(prof: DatasetProfile, *, seed: int, problems: int | None = None,
                    policy: Policy = BRSD_POLICY,
                    max_context_tokens: int = PRM_CONTEXT_TOKENS) -> list[ProblemTrace]:
    """Synthetic traces for ``problems`` problems (the profile's count by default), as a list
    (:func:`iter_traces` yields the same traces one at a time)."""
    return list(iter_traces(prof, seed=seed, problems=problems, policy=policy,
                            max_context_tokens=max_context_tokens))


def iter_traces(prof: DatasetProfile, *, seed: int, problems: int | None = None,
                policy: Policy = BRSD_POLICY,
                max_context_tokens: int = PRM_CONTEXT_TOKENS) -> Iterator[ProblemTrace]:
    """Synthetic traces for ``problems`` problems (the profile's count by default), yielded in
    problem order. A problem ends before the first step whose context
    (:meth:`ProblemTrace.step_contexts`) exceeds ``max_context_tokens``, as a run ends when the
    PRM can no longer score it. The arguments are checked before the first trace is made."""
    checks.integer("seed", seed, low=0)
    checks.integer("max_context_tokens", max_context_tokens, low=1)
    problems = prof.problems if problems is None else problems
    checks.integer("problems", problems, low=1, high=MAX_GENERATED_PROBLEMS)
    return _traces(prof, seed, problems, policy, max_context_tokens)


def _place_outcomes(rng: np.random.Generator, lengths: np.ndarray, n_backtrack: int,
                    n_rescue: int, max_backtracks: int) -> tuple[np.ndarray, int]:
    """Every step's outcome, flat in problem order: backtracks first, in a random order of the
    slots after each problem's first step, while the problem has budget left; then rescues
    among the accepted steps."""
    total = int(lengths.sum())
    first = np.zeros(len(lengths), dtype=np.int64)
    np.cumsum(lengths[:-1], out=first[1:])
    problem_of = np.repeat(np.arange(len(lengths)), lengths)
    outcomes = np.full(total, ACCEPT, dtype=np.int8)
    is_first = np.zeros(total, dtype=bool)
    is_first[first] = True
    slots = np.flatnonzero(~is_first)
    del is_first
    order = rng.permutation(len(slots))
    per_problem = np.zeros(len(lengths), dtype=np.int64)
    placed = 0
    for k in order:
        if placed == n_backtrack:
            break
        step = slots[k]
        p = problem_of[step]
        if per_problem[p] < max_backtracks:
            outcomes[step] = BACKTRACK
            per_problem[p] += 1
            placed += 1
    del order, slots, problem_of
    free = np.flatnonzero(outcomes == ACCEPT)
    outcomes[free[rng.permutation(len(free))[:n_rescue]]] = RESCUE
    return outcomes, placed


def _traces(prof: DatasetProfile, seed: int, problems: int, policy: Policy,
            max_context_tokens: int) -> Iterator[ProblemTrace]:
    rng = np.random.default_rng([seed, sum(map(ord, prof.name))])
    total = max(round(problems * prof.steps_per_problem), problems)
    lengths = _split_total(rng, total, problems, prof.steps_dispersion)
    n_backtrack = round(total * prof.backtrack_share) if policy.max_backtracks else 0
    n_rescue = round(total * prof.rescue_share)
    if not policy.max_backtracks:
        n_rescue = round(total * (prof.rescue_share + prof.backtrack_share))
    outcomes, placed = _place_outcomes(rng, lengths, n_backtrack, n_rescue,
                                       policy.max_backtracks)
    if placed < n_backtrack:
        raise ValueError(f"profile {prof.name!r}: {n_backtrack} backtracks (share "
                         f"{prof.backtrack_share}) do not fit {problems} problems of {total} "
                         f"steps: at most {policy.max_backtracks} a problem and none at its "
                         f"first step ({placed} placed)")
    draft = _tokens(rng, total, prof.draft_tokens_per_step, prof.draft_tokens_log_sd)
    n_target = int(np.count_nonzero(outcomes != ACCEPT))
    target = _tokens(rng, n_target + placed, prof.target_tokens_per_rescue,
                     prof.target_tokens_log_sd)
    prompts = _tokens(rng, problems, prof.prompt_tokens, 0.4)
    d = t = 0
    for p, n in enumerate(lengths.tolist()):
        steps = []
        chain = 0
        for outcome in outcomes[d:d + n].tolist():
            # step 0 is never a backtrack, so chain >= 1 at every backtrack
            if outcome == ACCEPT:
                steps.append(StepEvent("accept", int(draft[d])))
                chain += 1
            elif outcome == RESCUE:
                steps.append(StepEvent("rescue", int(draft[d]), int(target[t])))
                t += 1
                chain += 1
            else:
                depth = int(rng.geometric(1.0 / prof.backtrack_depth_mean))
                depth = min(depth, chain, policy.max_backtrack_depth)
                steps.append(StepEvent("backtrack", int(draft[d]), int(target[t]),
                                       backtrack_steps=depth,
                                       regenerated_tokens=int(target[t + 1])))
                t += 2
                chain = chain - depth + 1
            d += 1
        trace = ProblemTrace(prof.name, str(p), int(prompts[p]), tuple(steps), None, policy)
        yield _within_context(trace, max_context_tokens)


def _within_context(trace: ProblemTrace, max_context_tokens: int) -> ProblemTrace:
    """``trace`` up to its first step beyond ``max_context_tokens`` (every random draw of the
    set is made before, so the other problems do not change)."""
    needs = trace.step_contexts()
    fits = next((k for k, need in enumerate(needs) if need > max_context_tokens), len(needs))
    if fits == len(needs):
        return trace
    if fits == 0:
        raise ValueError(f"problem {trace.problem_id} ({trace.dataset}): its prompt and first "
                         f"step need {needs[0]} tokens, beyond max_context_tokens "
                         f"{max_context_tokens}")
    return replace(trace, steps=trace.steps[:fits])


@dataclass(frozen=True)
class TraceStats:
    dataset: str
    problems: int
    steps_per_problem: float
    accept_share: float
    rescue_share: float
    backtrack_share: float
    backtracks_per_problem: float
    draft_tokens_per_problem: float
    draft_tokens_per_step: float
    target_tokens_per_rescue: float
    output_tokens_per_problem: float
    prompt_tokens: float

    COLUMNS = ("dataset", "problems", "steps/problem", "accept %", "rescue %", "backtrack %",
               "backtracks/problem", "tokens/problem", "tokens/step", "target tokens/rescue",
               "output tokens/problem", "prompt tokens")

    def row(self) -> list[str]:
        return [self.dataset, str(self.problems), f"{self.steps_per_problem:.1f}",
                f"{100 * self.accept_share:.1f}", f"{100 * self.rescue_share:.1f}",
                f"{100 * self.backtrack_share:.1f}", f"{self.backtracks_per_problem:.2f}",
                f"{self.draft_tokens_per_problem:.0f}", f"{self.draft_tokens_per_step:.0f}",
                f"{self.target_tokens_per_rescue:.0f}", f"{self.output_tokens_per_problem:.0f}",
                f"{self.prompt_tokens:.0f}"]


def trace_stats(traces: Sequence[ProblemTrace], dataset: str | None = None) -> TraceStats:
    """The statistics of §9's table (and a few more) over ``traces``.

    ``tokens/problem`` and ``tokens/step`` count the draft's tokens over all step events
    (accepted or not); ``target tokens/rescue`` averages the target's tokens over rescues and
    failed target steps of backtracks.
    """
    if not traces:
        raise ValueError("no traces to summarize")
    steps = [s for tr in traces for s in tr.steps]
    n = len(steps)
    count = {o: sum(s.outcome == o for s in steps) for o in ("accept", "rescue", "backtrack")}
    targets = [s.target_tokens for s in steps if s.outcome != "accept"]
    return TraceStats(
        dataset=dataset or ",".join(sorted({tr.dataset for tr in traces})),
        problems=len(traces),
        steps_per_problem=n / len(traces),
        accept_share=count["accept"] / n,
        rescue_share=count["rescue"] / n,
        backtrack_share=count["backtrack"] / n,
        backtracks_per_problem=count["backtrack"] / len(traces),
        draft_tokens_per_problem=sum(s.draft_tokens for s in steps) / len(traces),
        draft_tokens_per_step=sum(s.draft_tokens for s in steps) / n,
        target_tokens_per_rescue=(sum(targets) / len(targets)) if targets else 0.0,
        output_tokens_per_problem=sum(tr.output_tokens for tr in traces) / len(traces),
        prompt_tokens=sum(tr.prompt_tokens for tr in traces) / len(traces),
    )
