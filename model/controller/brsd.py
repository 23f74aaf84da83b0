"""The step-wise reasoning controller (RSD / BRSD, docs/design.md §1) over pluggable model
backends, and the capture of its runs as traces the system scheduler replays 1:1.

Per step, with validated context ``z`` (prompt and accepted steps):

1. the draft generates a candidate step greedily, until a step delimiter or EOS (included in
   the step) or ``max_step_tokens``;
2. the PRM scores ``[z, step]``; a score of at least ``accept_threshold`` accepts it;
3. otherwise the target generates the step from ``z`` (a rescue); with backtracking on, the PRM
   scores the target's step too, and a score below ``backtrack_threshold`` — while the budget
   (``max_backtracks`` per problem) allows and an accepted step precedes — backtracks: the
   preceding step is dropped and the target regenerates it from the context before it;
4. the problem ends at EOS, at ``max_total_tokens`` generated tokens in the chain, or after
   ``max_steps`` steps.

With ``record_prefetch`` (the default) the target also generates each accepted step's
alternative from the same context — what the overlapped system's prefetch produces — and its
length goes into the trace (``prefetch_tokens``) for the scheduler's cache of partial target
outputs.

Backends follow two small protocols: :class:`Generator` (``generate_step``) and :class:`Scorer`
(``score_step``). The numpy reference decoders serve as draft and target
(:class:`ReferenceGenerator`, which keeps its KV cache across calls and rolls it back to the
longest common prefix, as the KVMU does), and :class:`RewardHeadScorer` is a small reward head
over a reference decoder's final hidden state.

Backend misbehaviour is an error, never a silent fallback: an empty step, a score that is not a
number in [0, 1], a context beyond the backend's maximum raise :class:`ControllerError`.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

import numpy as np

from heteroreason.model import checks
from heteroreason.model.workload.traces import (
    RSD_POLICY,
    Policy,
    ProblemTrace,
    StepEvent,
    trace_to_json,
)

__all__ = [
    "ControllerConfig",
    "ControllerError",
    "Generator",
    "ReferenceGenerator",
    "RewardHeadScorer",
    "Scorer",
    "common_prefix",
    "reusable_prefix",
    "run_problem",
    "run_problems",
]


class ControllerError(RuntimeError):
    """A backend broke its contract; the message names the backend and what it did."""


class Generator(Protocol):
    name: str
    max_context: int

    def generate_step(self, context: Sequence[int], *, max_tokens: int,
                      stop: frozenset[int]) -> list[int]: ...


class Scorer(Protocol):
    name: str
    max_context: int

    def score_step(self, context: Sequence[int], step: Sequence[int]) -> float: ...


def common_prefix(a: Sequence[int], b: Sequence[int]) -> int:
    """Length of the longest common prefix: what a KV cache of ``a`` keeps for context ``b``."""
    n = 0
    for x, y in zip(a, b, strict=False):
        if x != y:
            break
        n += 1
    return n


def reusable_prefix(model, context: Sequence[int], max_tokens: int) -> int:
    """The tokens of ``context`` whose KV ``model`` (a decoder-backed model with ``name``,
    ``max_context`` and ``_cached``, the tokens its KV holds) keeps for a step of up to
    ``max_tokens``: the common prefix, less the last context token (its logits are needed, so
    it is always processed again). Raises :class:`ControllerError` when the step cannot fit."""
    if len(context) + max_tokens > model.max_context:
        raise ControllerError(f"{model.name}: context of {len(context)} tokens plus a step of "
                              f"up to {max_tokens} exceeds its maximum of {model.max_context}")
    return min(common_prefix(model._cached, context), len(context) - 1)


@dataclass(frozen=True)
class ControllerConfig:
    delimiters: frozenset[int]
    eos: int
    accept_threshold: float = 0.7
    backtrack_threshold: float = 0.7
    backtracking: bool = True
    max_backtracks: int = 5
    max_backtrack_depth: int = 10
    max_step_tokens: int = 2048
    max_total_tokens: int = 4096
    max_steps: int = 100
    record_prefetch: bool = True

    def __post_init__(self):
        for key in ("accept_threshold", "backtrack_threshold"):
            value = getattr(self, key)
            if not 0.0 <= value <= 1.0:
                raise ValueError(f"{key} must be in [0, 1], not {value!r}")
        for key in ("max_backtracks", "max_backtrack_depth", "max_step_tokens",
                    "max_total_tokens", "max_steps"):
            value = getattr(self, key)
            checks.integer(key, value, low=0)
        for key in ("max_step_tokens", "max_total_tokens", "max_steps"):
            if getattr(self, key) == 0:  # a trace needs a step of at least one token
                raise ValueError(f"{key} must be at least 1, not 0")

    @property
    def policy(self) -> Policy:
        if not self.backtracking:
            return RSD_POLICY
        return Policy(self.accept_threshold, self.backtrack_threshold, self.max_backtracks,
                      self.max_backtrack_depth)

    @property
    def stops(self) -> frozenset[int]:
        return frozenset(self.delimiters) | {self.eos}


class ReferenceGenerator:
    """Greedy generation with a numpy reference decoder, reusing its KV cache: each call rolls
    the cache back to the longest common prefix of the new context (as the KVMU does on a
    reject or a backtrack) and processes only what is new."""

    def __init__(self, name: str, decoder):
        self.name = name
        self.decoder = decoder
        self.max_context = decoder.config.max_context
        self._cached: list[int] = []  # the tokens whose KV the decoder holds

    def generate_step(self, context, *, max_tokens, stop):
        common = reusable_prefix(self, context, max_tokens)
        self.decoder.rollback(common)
        logits = self.decoder.prefill(list(context[common:]))[-1]
        self._cached = list(context)
        step = []
        while True:
            token = int(np.argmax(logits))
            step.append(token)
            if token in stop or len(step) == max_tokens:
                return step
            logits = self.decoder.decode(token)
            self._cached.append(token)


class RewardHeadScorer:
    """``sigmoid(w . h + b)`` over a reference decoder's final hidden state after the step."""

    def __init__(self, name: str, decoder, *, seed: int, bias: float = 1.0):
        self.name = name
        self.decoder = decoder
        self.max_context = decoder.config.max_context
        rng = np.random.default_rng(seed)
        hidden = decoder.config.hidden
        self.w = rng.standard_normal(hidden) / math.sqrt(hidden)
        self.bias = bias

    def score_step(self, context, step):
        tokens = list(context) + list(step)
        if len(tokens) > self.max_context:
            raise ControllerError(f"{self.name}: context of {len(tokens)} tokens exceeds its "
                                  f"maximum of {self.max_context}")
        self.decoder.rollback(0)
        self.decoder.prefill(tokens)
        if hasattr(self.decoder, "dequantized_hidden"):  # the integer model
            hidden = self.decoder.dequantized_hidden()[-1]
        else:
            hidden = np.asarray(self.decoder.last_hidden[-1], dtype=np.float64)
        return float(1.0 / (1.0 + math.exp(-(hidden @ self.w + self.bias))))


@dataclass
class _State:
    prompt: list[int]
    steps: list[list[int]] = field(default_factory=list)
    events: list[StepEvent] = field(default_factory=list)
    backtracks: int = 0

    @property
    def context(self) -> list[int]:
        return self.prompt + [t for s in self.steps for t in s]


def _generate(backend: Generator, context, cfg: ControllerConfig) -> list[int]:
    step = backend.generate_step(context, max_tokens=cfg.max_step_tokens, stop=cfg.stops)
    if not step:
        raise ControllerError(f"{backend.name}: returned an empty step")
    if len(step) > cfg.max_step_tokens:
        raise ControllerError(f"{backend.name}: returned {len(step)} tokens, more than "
                              f"max_step_tokens={cfg.max_step_tokens}")
    return list(step)


def _score(prm: Scorer, context, step) -> float:
    score = prm.score_step(context, step)
    if isinstance(score, bool) or not isinstance(score, int | float) or \
            not math.isfinite(score) or not 0.0 <= score <= 1.0:
        raise ControllerError(f"{prm.name}: returned score {score!r}, not a number in [0, 1]")
    return float(score)


def run_problem(prompt: Sequence[int], *, draft: Generator, target: Generator, prm: Scorer,
                config: ControllerConfig, dataset: str, problem_id: str
                ) -> tuple[ProblemTrace, list[int]]:
    """Run one problem; returns its trace and the final reasoning chain's tokens."""
    if not prompt:
        raise ValueError("the prompt must hold at least one token")
    state = _State(list(prompt))
    cfg = config
    while len(state.events) < cfg.max_steps:
        context = state.context
        if sum(map(len, state.steps)) >= cfg.max_total_tokens:
            break
        candidate = _generate(draft, context, cfg)
        score = _score(prm, context, candidate)
        if score >= cfg.accept_threshold:
            # what the target's prefetch of this step (started at the same context) produces
            prefetch = len(_generate(target, context, cfg)) if cfg.record_prefetch else 0
            state.steps.append(candidate)
            state.events.append(StepEvent("accept", len(candidate), draft_score=score,
                                          prefetch_tokens=prefetch))
        else:
            refined = _generate(target, context, cfg)
            t_score = _score(prm, context, refined) if cfg.backtracking else None
            can_backtrack = (cfg.backtracking and t_score < cfg.backtrack_threshold
                             and state.backtracks < cfg.max_backtracks and state.steps
                             and cfg.max_backtrack_depth >= 1)
            if can_backtrack:
                state.backtracks += 1
                state.steps.pop()
                regenerated = _generate(target, state.context, cfg)
                state.steps.append(regenerated)
                state.events.append(StepEvent("backtrack", len(candidate), len(refined),
                                              draft_score=score, target_score=t_score,
                                              backtrack_steps=1,
                                              regenerated_tokens=len(regenerated)))
            else:
                state.steps.append(refined)
                state.events.append(StepEvent("rescue", len(candidate), len(refined),
                                              draft_score=score, target_score=t_score))
        if state.steps and state.steps[-1][-1] == cfg.eos:
            break
    trace = ProblemTrace(dataset, str(problem_id), len(state.prompt), tuple(state.events),
                         None, cfg.policy)
    return trace, [t for s in state.steps for t in s]


def run_problems(prompts: Iterable[tuple[str, Sequence[int]]], out_path: Path | str, *,
                 draft: Generator, target: Generator, prm: Scorer, config: ControllerConfig,
                 dataset: str, on_problem: Callable[[ProblemTrace], None] | None = None
                 ) -> list[ProblemTrace]:
    """Run every prompt, appending each finished problem's trace to ``out_path`` as soon as it
    is complete (a crash leaves only complete problems in the file)."""
    out_path = Path(out_path)
    out_path.parent.mkdir(parents=True, exist_ok=True)
    traces = []
    with out_path.open("w") as out:
        for problem_id, prompt in prompts:
            trace, _ = run_problem(prompt, draft=draft, target=target, prm=prm, config=config,
                                   dataset=dataset, problem_id=problem_id)
            out.write(json.dumps(trace_to_json(trace), separators=(",", ":")) + "\n")
            out.flush()
            traces.append(trace)
            if on_problem is not None:
                on_problem(trace)
    return traces

