"""Reasoning traces: one problem per JSON line, the ordered step events of its BRSD run. This
module reads, checks and writes the format; its records are
:mod:`~heteroreason.model.workload.trace_records`'.

Format (``heteroreason-trace/1``)
---------------------------------
Each line is an object::

    {"dataset": "math500", "problem_id": "17", "prompt_tokens": 141, "correct": true,
     "policy": {"accept_threshold": 0.7, "backtrack_threshold": 0.7,
                "max_backtracks": 5, "max_backtrack_depth": 10},
     "steps": [{"outcome": "accept", "draft_tokens": 35, "draft_score": 0.98}, ...]}

An accepted step may also carry ``prefetch_tokens``: the length of the step the target
generates from the same context (what a prefetch started there produces; recorded by the
controller), so the scheduler replays the real caching of partial target outputs; without it a
prefetch runs until interrupted.

``correct``, ``policy`` and the scores are optional (``null`` or absent when unknown; the policy
defaults to BRSD's: thresholds 0.7, 5 backtracks of at most 10 steps). A step event is one
round of drafting and verification:

``accept``
    the draft's step (``draft_tokens``) scored at least the threshold and was kept;
``rescue``
    the draft's step was rejected and the target generated ``target_tokens`` instead;
``backtrack``
    the draft's step was rejected, the target's step (``target_tokens``) failed too and was
    dropped, and the process went back ``backtrack_steps`` more accepted steps (0: the failed
    step alone); the target regenerated the earliest dropped step with ``regenerated_tokens``
    tokens (0 when drafting resumes there instead).

Consistency rules the loader enforces: token counts are non-negative integers, an accepted step
has at least one draft token and no target tokens, a rescue has target tokens, a backtrack goes
back at most ``max_backtrack_depth`` steps and no further than the accepted
steps there are, a problem has at most ``max_backtracks`` backtracks, and known scores agree with
the outcome and the thresholds. Every error names the file, line, field and value.
"""

from __future__ import annotations

import json
import math
import weakref
from collections.abc import Iterable, Iterator
from dataclasses import fields
from pathlib import Path

from heteroreason.model.files import InputError, loads_json, read_text
from heteroreason.model.workload.trace_records import (
    BRSD_POLICY,
    OUTCOMES,
    RSD_POLICY,
    Policy,
    ProblemTrace,
    StepEvent,
    StepOutcome,
    TraceError,
)

__all__ = [
    "BRSD_POLICY",
    "MAX_TOKENS",
    "OUTCOMES",
    "RSD_POLICY",
    "Policy",
    "ProblemTrace",
    "StepEvent",
    "StepOutcome",
    "TraceError",
    "check_trace",
    "dump_traces",
    "load_traces",
    "parse_trace",
    "read_json_lines",
    "trace_to_json",
]

_TOP_FIELDS = {"format", "dataset", "problem_id", "prompt_tokens", "correct", "policy", "steps"}
_STEP_FIELDS = {"outcome", "draft_tokens", "target_tokens", "draft_score", "target_score",
                "backtrack_steps", "regenerated_tokens", "prefetch_tokens"}
_POLICY_FIELDS = {"accept_threshold", "backtrack_threshold", "max_backtracks",
                  "max_backtrack_depth"}
FORMAT = "heteroreason-trace/1"


# no model here reads more than this many tokens (the largest context, Qwen2.5-7B's, is 131,072):
# a count beyond it is a broken trace, not a long one
MAX_TOKENS = 1_000_000


def _int(obj: dict, key: str, where: str, *, minimum: int = 0, default=None,
         maximum: int = MAX_TOKENS) -> int:
    if key not in obj or obj[key] is None:
        if default is None:
            raise TraceError(where, key, "is required")
        return default
    value = obj[key]
    if isinstance(value, bool) or not isinstance(value, int):
        raise TraceError(where, key, "must be an integer", value)
    if value < minimum:
        raise TraceError(where, key, f"must be at least {minimum}", value)
    if value > maximum:
        raise TraceError(where, key, f"must be at most {maximum:,}", value)
    return value


def _score(obj: dict, key: str, where: str) -> float | None:
    value = obj.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise TraceError(where, key, "must be a number in [0, 1] or null", value)
    if not 0.0 <= value <= 1.0:
        raise TraceError(where, key, "must be in [0, 1]", value)
    return float(value)


def _unknown(obj: dict, allowed: set[str], where: str) -> None:
    extra = sorted(set(obj) - allowed)
    if extra:
        raise TraceError(where, extra[0], f"is not a trace field (allowed: {sorted(allowed)})")


def _policy(obj, where: str) -> Policy:
    if obj is None:
        return BRSD_POLICY
    if not isinstance(obj, dict):
        raise TraceError(where, "policy", "must be an object", obj)
    where = f"{where}: policy"
    _unknown(obj, _POLICY_FIELDS, where)
    thresholds = {}
    for key in ("accept_threshold", "backtrack_threshold"):
        value = _score(obj, key, where)
        thresholds[key] = getattr(BRSD_POLICY, key) if value is None else value
    return Policy(
        max_backtracks=_int(obj, "max_backtracks", where, default=BRSD_POLICY.max_backtracks),
        max_backtrack_depth=_int(obj, "max_backtrack_depth", where,
                                 default=BRSD_POLICY.max_backtrack_depth),
        **thresholds)


def _step(obj, where: str, policy: Policy) -> StepEvent:
    if not isinstance(obj, dict):
        raise TraceError(where, None, "a step must be an object", obj)
    _unknown(obj, _STEP_FIELDS, where)
    outcome = obj.get("outcome")
    if outcome not in OUTCOMES:
        raise TraceError(where, "outcome", f"must be one of {', '.join(OUTCOMES)}", outcome)
    draft = _int(obj, "draft_tokens", where)
    target = _int(obj, "target_tokens", where, default=0)
    draft_score = _score(obj, "draft_score", where)
    target_score = _score(obj, "target_score", where)
    backtrack_steps = _int(obj, "backtrack_steps", where, default=0)
    regenerated = _int(obj, "regenerated_tokens", where, default=0)
    prefetch = _int(obj, "prefetch_tokens", where, default=0)
    if prefetch and outcome != "accept":
        raise TraceError(where, "prefetch_tokens", "only an accepted step has prefetch_tokens "
                         "(the others have target_tokens)", prefetch)
    if outcome == "accept":
        if draft < 1:
            raise TraceError(where, "draft_tokens", "an accepted step has at least one token",
                             draft)
        if target:
            raise TraceError(where, "target_tokens", "an accepted step has no target tokens",
                             target)
        if draft_score is not None and draft_score < policy.accept_threshold:
            raise TraceError(where, "draft_score",
                             f"an accepted step scores at least {policy.accept_threshold}",
                             draft_score)
    else:
        if draft_score is not None and draft_score >= policy.accept_threshold:
            raise TraceError(where, "draft_score",
                             f"a rejected step scores below {policy.accept_threshold}",
                             draft_score)
    if outcome == "rescue" and target < 1:
        raise TraceError(where, "target_tokens", "a rescue has at least one target token", target)
    if outcome != "backtrack" and (backtrack_steps or regenerated):
        key = "backtrack_steps" if backtrack_steps else "regenerated_tokens"
        raise TraceError(where, key, f"only a backtrack has {key}", obj[key])
    if outcome == "backtrack" and target_score is not None and \
            target_score >= policy.backtrack_threshold:
        raise TraceError(where, "target_score",
                         f"a backtrack follows a target step below "
                         f"{policy.backtrack_threshold}", target_score)
    return StepEvent(outcome, draft, target, draft_score, target_score, backtrack_steps,
                     regenerated, prefetch)


def parse_trace(obj, where: str) -> ProblemTrace:
    """Validate one decoded JSON object; ``where`` locates it in error messages."""
    if not isinstance(obj, dict):
        raise TraceError(where, None, "a problem must be a JSON object", type(obj).__name__)
    _unknown(obj, _TOP_FIELDS, where)
    if obj.get("format", FORMAT) != FORMAT:
        raise TraceError(where, "format", f"must be {FORMAT!r}", obj.get("format"))
    dataset = obj.get("dataset")
    if not isinstance(dataset, str) or not dataset:
        raise TraceError(where, "dataset", "must be a non-empty string", dataset)
    problem_id = obj.get("problem_id")
    if isinstance(problem_id, bool) or not isinstance(problem_id, str | int) or problem_id == "":
        raise TraceError(where, "problem_id", "must be a non-empty string or an integer",
                         problem_id)
    prompt = _int(obj, "prompt_tokens", where, minimum=1)
    correct = obj.get("correct")
    if correct is not None and not isinstance(correct, bool):
        raise TraceError(where, "correct", "must be true, false or null", correct)
    policy = _policy(obj.get("policy"), where)
    steps_obj = obj.get("steps")
    if not isinstance(steps_obj, list) or not steps_obj:
        raise TraceError(where, "steps", "must be a non-empty list", steps_obj)
    steps = []
    chain = 0
    backtracks = 0
    for i, step_obj in enumerate(steps_obj):
        step_where = f"{where}: steps[{i}]"
        step = _step(step_obj, step_where, policy)
        if step.outcome == "backtrack":
            backtracks += 1
            if backtracks > policy.max_backtracks:
                raise TraceError(step_where, "outcome",
                                 f"backtrack {backtracks} exceeds the policy's budget of "
                                 f"{policy.max_backtracks}", step.outcome.value)
            if step.backtrack_steps > policy.max_backtrack_depth:
                raise TraceError(step_where, "backtrack_steps",
                                 f"exceeds the policy's depth of {policy.max_backtrack_depth}",
                                 step.backtrack_steps)
            if step.backtrack_steps > chain:
                raise TraceError(step_where, "backtrack_steps",
                                 f"goes back beyond the start: only {chain} accepted steps",
                                 step.backtrack_steps)
            chain -= step.backtrack_steps
            chain += step.regenerated_tokens > 0
        else:
            chain += 1
        steps.append(step)
    return _parsed(ProblemTrace(dataset, str(problem_id), prompt, tuple(steps), correct,
                                policy))


def read_json_lines(path: Path | str) -> Iterator[tuple[str, object]]:
    """Yield ``(where, decoded object)`` for every non-blank line of a JSONL file, ``where``
    being ``file:line``; unreadable files and bad JSON raise :class:`TraceError`."""
    path = Path(path)
    try:
        text = read_text(path)
    except InputError as exc:
        raise TraceError(exc.where, None, exc.reason) from None
    # lines end at "\n" alone (str.splitlines would also break at form feeds, "\x1c" and
    # U+2028, which a JSON string may hold), and a blank line holds JSON whitespace only
    for number, line in enumerate(text.split("\n"), start=1):
        if not line.strip(" \t\r"):
            continue
        where = f"{path}:{number}"
        try:
            yield where, loads_json(line, where)
        except InputError as exc:
            raise TraceError(exc.where, None, exc.reason) from None


# the traces parse_trace made (by id, weakly): check_trace need not check them again
_PARSED: dict[int, weakref.ref] = {}


def _parsed(trace: ProblemTrace) -> ProblemTrace:
    key = id(trace)
    _PARSED[key] = weakref.ref(trace, lambda _, key=key: _PARSED.pop(key, None))
    return trace


def check_trace(trace: ProblemTrace) -> ProblemTrace:
    """The loader's checks on a trace built in Python (what :func:`load_traces` would accept);
    raises :class:`TraceError` naming the problem, step and field. A trace the loader made
    passes at once."""
    if not isinstance(trace, ProblemTrace):
        raise TypeError(f"expected a ProblemTrace, not {type(trace).__name__}")
    ref = _PARSED.get(id(trace))
    if ref is not None and ref() is trace:
        return trace
    where = f"problem {trace.problem_id!r} ({trace.dataset})"
    if not isinstance(trace.steps, tuple | list) or \
            not all(isinstance(s, StepEvent) for s in trace.steps):
        raise TraceError(where, "steps", "must be a sequence of StepEvent")
    parsed = parse_trace(trace_to_json(trace), where)
    for i, (got, want) in enumerate(zip(trace.steps, parsed.steps, strict=True)):
        for f in fields(StepEvent):
            if getattr(got, f.name) != getattr(want, f.name):
                raise TraceError(f"{where}: steps[{i}]", f.name,
                                 f"is not used by {got.outcome.value} steps",
                                 getattr(got, f.name))
    return trace


def load_traces(path: Path | str) -> list[ProblemTrace]:
    """Read a JSONL trace file; raises :class:`TraceError` naming file, line and field."""
    traces = [parse_trace(obj, where) for where, obj in read_json_lines(path)]
    if not traces:
        raise TraceError(str(path), None, "holds no problems")
    return traces


def trace_to_json(trace: ProblemTrace) -> dict:
    steps = []
    for s in trace.steps:
        step = {"outcome": s.outcome, "draft_tokens": s.draft_tokens}
        if s.target_tokens:
            step["target_tokens"] = s.target_tokens
        if s.draft_score is not None:  # full precision: rounding could cross a threshold
            step["draft_score"] = s.draft_score
        if s.target_score is not None:
            step["target_score"] = s.target_score
        if s.outcome == "backtrack":
            step["backtrack_steps"] = s.backtrack_steps
            step["regenerated_tokens"] = s.regenerated_tokens
        if s.prefetch_tokens:
            step["prefetch_tokens"] = s.prefetch_tokens
        steps.append(step)
    obj = {"dataset": trace.dataset, "problem_id": trace.problem_id,
           "prompt_tokens": trace.prompt_tokens, "correct": trace.correct}
    if trace.policy != BRSD_POLICY:
        p = trace.policy
        obj["policy"] = {"accept_threshold": p.accept_threshold,
                         "backtrack_threshold": p.backtrack_threshold,
                         "max_backtracks": p.max_backtracks,
                         "max_backtrack_depth": p.max_backtrack_depth}
    obj["steps"] = steps
    return obj


def dump_traces(traces: Iterable[ProblemTrace], path: Path | str) -> int:
    """Write traces as JSONL (one compact line each), as they come; returns how many were
    written. The lines go to a temporary file beside ``path``, renamed to it once the last is
    written: when ``traces`` raises, ``path`` is left as it was."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(f".{path.name}.partial")
    count = 0
    try:
        with partial.open("w", encoding="utf-8") as out:
            for trace in traces:
                out.write(json.dumps(trace_to_json(trace), separators=(",", ":")) + "\n")
                count += 1
        partial.replace(path)
    finally:
        partial.unlink(missing_ok=True)
    return count
