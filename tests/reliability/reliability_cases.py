"""The bad-input catalogue: one valid trace problem and the ways a hostile user breaks it, each
with the field the error must name and a fragment of its reason (written from the trace format's
rules in ``heteroreason.model.workload.traces``, not from the loader's code)."""

from __future__ import annotations

import copy
import signal

MAX_TOKENS = 1_000_000


def sigint_as_at_a_terminal() -> None:
    """A child process's ``preexec_fn``: SIGINT back to its default, as a terminal's Ctrl-C
    finds it. A shell starts a background job with SIGINT ignored (POSIX), a child inherits
    that, and Python then installs no KeyboardInterrupt handler: without this, a suite run in
    the background would send its interrupts to runs that cannot hear them."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def valid_problem() -> dict:
    """accept, rescue, accept, then a backtrack of two steps whose regeneration is kept: every
    outcome and every optional field."""
    return {
        "dataset": "math500", "problem_id": "7", "prompt_tokens": 100, "correct": True,
        "policy": {"accept_threshold": 0.7, "backtrack_threshold": 0.7, "max_backtracks": 5,
                   "max_backtrack_depth": 10},
        "steps": [
            {"outcome": "accept", "draft_tokens": 10, "draft_score": 0.9, "prefetch_tokens": 12},
            {"outcome": "rescue", "draft_tokens": 5, "target_tokens": 8, "draft_score": 0.2,
             "target_score": 0.8},
            {"outcome": "accept", "draft_tokens": 6},
            {"outcome": "backtrack", "draft_tokens": 4, "target_tokens": 5, "draft_score": 0.1,
             "target_score": 0.1, "backtrack_steps": 2, "regenerated_tokens": 7},
        ],
    }


def _set(path: tuple, value):
    def mutate(obj):
        target = obj
        for key in path[:-1]:
            target = target[key]
        target[path[-1]] = value
    return mutate


def _del(path: tuple):
    def mutate(obj):
        target = obj
        for key in path[:-1]:
            target = target[key]
        del target[path[-1]]
    return mutate


def _steps(*steps):
    return _set(("steps",), list(steps))


A = {"outcome": "accept", "draft_tokens": 3}


def _cases():
    """``(id, mutation, field the message names, reason fragment)``"""
    cases = []
    add = cases.append
    # the problem's own fields
    for key in ("dataset", "problem_id", "prompt_tokens", "steps"):
        add((f"{key}-missing", _del((key,)), key, "" if key != "prompt_tokens" else "required"))
        add((f"{key}-null", _set((key,), None), key, ""))
        add((f"{key}-object", _set((key,), {"a": 1}), key, "must be"))
    for value, reason in ((True, "integer"), (1.5, "integer"), ("100", "integer"),
                          (0, "at least 1"), (-3, "at least 1"),
                          (MAX_TOKENS + 1, f"at most {MAX_TOKENS:,}"), (float("nan"), "integer")):
        add((f"prompt_tokens-{value!r}", _set(("prompt_tokens",), value), "prompt_tokens",
             reason))
    for value in ("", [], 3.5, True):
        add((f"dataset-{value!r}", _set(("dataset",), value), "dataset", "non-empty string"))
    for value in ("", 1.5, True, []):
        add((f"problem_id-{value!r}", _set(("problem_id",), value), "problem_id", "non-empty"))
    for value in ([], "many", 3):
        add((f"steps-{value!r}", _set(("steps",), value), "steps", "non-empty list"))
    for value in ("yes", 1, 0.0, []):
        add((f"correct-{value!r}", _set(("correct",), value), "correct", "true, false or null"))
    add(("unknown-field", _set(("speedup",), 2.0), "speedup", "is not a trace field"))
    add(("format-other", _set(("format",), "heteroreason-trace/2"), "format",
         "heteroreason-trace/1"))
    # the policy
    add(("policy-list", _set(("policy",), [0.7]), "policy", "must be an object"))
    add(("policy-unknown", _set(("policy", "threshold"), 0.7), "threshold",
         "is not a trace field"))
    for key in ("accept_threshold", "backtrack_threshold"):
        for value in (1.5, -0.1, "0.7", True, float("inf")):
            add((f"policy-{key}-{value!r}", _set(("policy", key), value), key, "[0, 1]"))
    for key in ("max_backtracks", "max_backtrack_depth"):
        for value in (-1, 2.5, "5", False):
            add((f"policy-{key}-{value!r}", _set(("policy", key), value), key, ""))
    # a step's counts
    for key in ("draft_tokens", "target_tokens", "backtrack_steps", "regenerated_tokens",
                "prefetch_tokens"):
        for value, reason in (("4", "integer"), (4.0, "integer"), (True, "integer"),
                              (-1, "at least 0"), (MAX_TOKENS + 1, "at most")):
            add((f"step-{key}-{value!r}", _set(("steps", 3, key), value), key, reason))
    add(("step-draft_tokens-missing", _del(("steps", 0, "draft_tokens")), "draft_tokens",
         "required"))
    # a step's scores
    for key in ("draft_score", "target_score"):
        for value in ("0.1", True, -0.5, 1.01, float("nan"), [0.1]):
            add((f"step-{key}-{value!r}", _set(("steps", 3, key), value), key, ""))
    # the outcome and the consistency of a step
    for value in ("reject", "", None, 1, "ACCEPT"):
        add((f"outcome-{value!r}", _set(("steps", 0, "outcome"), value), "outcome",
             "must be one of accept, rescue, backtrack"))
    add(("outcome-missing", _del(("steps", 0, "outcome")), "outcome", "must be one of"))
    add(("step-not-object", _set(("steps", 1), "rescue"), None, "a step must be an object"))
    add(("step-unknown-field", _set(("steps", 0, "tokens"), 3), "tokens",
         "is not a trace field"))
    add(("accept-no-tokens", _set(("steps", 0, "draft_tokens"), 0), "draft_tokens",
         "at least one token"))
    add(("accept-target-tokens", _set(("steps", 0, "target_tokens"), 4), "target_tokens",
         "no target tokens"))
    add(("accept-low-score", _set(("steps", 0, "draft_score"), 0.5), "draft_score",
         "at least 0.7"))
    add(("accept-backtrack-steps", _set(("steps", 2, "backtrack_steps"), 1), "backtrack_steps",
         "only a backtrack"))
    add(("rescue-no-target", _set(("steps", 1, "target_tokens"), 0), "target_tokens",
         "at least one target token"))
    add(("rescue-high-score", _set(("steps", 1, "draft_score"), 0.95), "draft_score",
         "below 0.7"))
    add(("rescue-regenerated", _set(("steps", 1, "regenerated_tokens"), 3),
         "regenerated_tokens", "only a backtrack"))
    add(("rescue-prefetch", _set(("steps", 1, "prefetch_tokens"), 3), "prefetch_tokens",
         "only an accepted step"))
    add(("backtrack-negative-steps", _set(("steps", 3, "backtrack_steps"), -1),
         "backtrack_steps", "at least 0"))
    add(("backtrack-beyond-start", _set(("steps", 3, "backtrack_steps"), 4), "backtrack_steps",
         "beyond the start"))
    add(("backtrack-target-passed", _set(("steps", 3, "target_score"), 0.9), "target_score",
         "below 0.7"))
    add(("backtrack-deeper-than-policy", _set(("policy", "max_backtrack_depth"), 1),
         "backtrack_steps", "depth of 1"))
    add(("backtrack-over-budget", _set(("policy", "max_backtracks"), 0), "outcome",
         "budget of 0"))
    add(("backtrack-first", _steps({"outcome": "backtrack", "draft_tokens": 2,
                                    "target_tokens": 2, "backtrack_steps": 1}),
         "backtrack_steps", "only 0 accepted steps"))
    back = {"outcome": "backtrack", "draft_tokens": 2, "target_tokens": 2, "backtrack_steps": 1}
    add(("backtrack-after-empty-chain", _steps(A, back, back), "backtrack_steps",
         "only 0 accepted steps"))
    add(("sixth-backtrack", _steps(*([A, dict(back, regenerated_tokens=2)] * 6)), "outcome",
         "budget of 5"))
    return cases


TRACE_CASES = _cases()


def broken(mutation) -> dict:
    obj = copy.deepcopy(valid_problem())
    mutation(obj)
    return obj
