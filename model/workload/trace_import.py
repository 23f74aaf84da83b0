"""Importers from the paper artifact's trace formats into :mod:`heteroreason.model.workload.traces`.

Per-problem execution traces (``Hardware/inputs/Config1/with_bt/<dataset>/example_<N>.json``)
    ``accept_pure_draft`` -> accept, ``target_rescue`` -> rescue; a ``BACKTRACK_EVENT`` turns
    the rescue just before it into a backtrack of ``steps_dropped`` steps whose regenerated step
    has the event's ``target_tokens_spent`` tokens. Files without ``prompt_tokens`` (the
    ``no_bt`` set) need ``prompt_tokens`` from the caller.
Token logs (JSONL with ``step_attempts``)
    ``accept`` -> accept, ``target_intervention`` -> rescue; a ``backtrack_trigger`` turns the
    rescue before it into a backtrack: ``from_step`` is the chain position of that failed step
    and ``to_step`` the last position kept, so ``from_step - to_step - 1`` accepted steps are
    dropped beyond the failed one, after which drafting resumes (no regenerated step). (Read
    so, every backtrack of the artifact's sample log names the failed step's position; read as
    the position drafting resumes at, three of its eight records contradict themselves.) A
    backtrack whose ``from_step`` is not the failed step's position is inconsistent and is
    reported (``import_token_log(..., skip_invalid=True)`` lists such records and imports the
    rest). Token logs carry no prompt length: the caller gives one.
"""

from __future__ import annotations

from pathlib import Path

from heteroreason.model.files import InputError, loads_json, read_text
from heteroreason.model.workload.traces import (
    BRSD_POLICY,
    Policy,
    ProblemTrace,
    StepEvent,
    TraceError,
    parse_trace,
    read_json_lines,
    trace_to_json,
)

__all__ = ["import_artifact_file", "import_artifact_problem", "import_token_log",
           "import_token_log_record", "read_count"]


def _get(obj: dict, key: str, where: str, kinds=(int,)):
    if key not in obj:
        raise TraceError(where, key, "is required")
    value = obj[key]
    if isinstance(value, bool) or not isinstance(value, kinds):
        names = " or ".join(k.__name__ for k in kinds)
        raise TraceError(where, key, f"must be {names}", value)
    return value


def read_count(obj: dict, key: str, where: str, *, default: int | None = None) -> int:
    """``obj[key]`` as a non-negative integer (``default`` when given and the key is absent);
    a :class:`TraceError` naming ``where`` and ``key`` otherwise."""
    if key not in obj and default is not None:
        return default
    value = _get(obj, key, where)
    if value < 0:
        raise TraceError(where, key, "must not be negative", value)
    return value


def _objects(obj: dict, key: str, where: str, what: str):
    """``(where, item)`` of each object of the non-empty list ``obj[key]``."""
    items = obj.get(key)
    if not isinstance(items, list) or not items:
        raise TraceError(where, key, "must be a non-empty list", items)
    for i, item in enumerate(items):
        item_where = f"{where}: {key}[{i}]"
        if not isinstance(item, dict):
            raise TraceError(item_where, None, f"{what} must be an object", item)
        yield item_where, item


def _validated(trace: ProblemTrace, where: str) -> ProblemTrace:
    # the imported trace must satisfy every rule a hand-written one does
    return parse_trace(trace_to_json(trace), where)


def import_artifact_problem(obj, *, dataset: str, where: str,
                            prompt_tokens: int | None = None,
                            policy: Policy = BRSD_POLICY) -> ProblemTrace:
    """Convert one artifact execution trace (a decoded JSON object)."""
    if not isinstance(obj, dict):
        raise TraceError(where, None, "an artifact trace must be a JSON object")
    problem_id = _get(obj, "idx", where, (int, str))
    if "prompt_tokens" in obj:
        prompt = read_count(obj, "prompt_tokens", where)
    elif prompt_tokens is not None:
        prompt = prompt_tokens
    else:
        raise TraceError(where, "prompt_tokens",
                         "is missing (no_bt traces): give the prompt length explicitly")
    steps: list[StepEvent] = []
    for ewhere, event in _objects(obj, "execution_trace", where, "an event"):
        status = _get(event, "status", ewhere, (str,))
        if status == "accept_pure_draft":
            steps.append(StepEvent("accept", read_count(event, "draft_tokens_spent", ewhere)))
        elif status == "target_rescue":
            steps.append(StepEvent("rescue", read_count(event, "draft_tokens_spent", ewhere),
                                   read_count(event, "target_tokens_spent", ewhere)))
        elif status == "BACKTRACK_EVENT":
            if not steps or steps[-1].outcome != "rescue":
                raise TraceError(ewhere, "status", "a backtrack must follow a target rescue",
                                 status)
            failed = steps.pop()
            steps.append(StepEvent("backtrack", failed.draft_tokens, failed.target_tokens,
                                   backtrack_steps=read_count(event, "steps_dropped", ewhere),
                                   regenerated_tokens=read_count(event, "target_tokens_spent",
                                                             ewhere)))
        else:
            raise TraceError(ewhere, "status", "is not accept_pure_draft, target_rescue or "
                             "BACKTRACK_EVENT", status)
    summary = obj.get("summary") if isinstance(obj.get("summary"), dict) else {}
    correct = summary.get("is_correct")
    trace = ProblemTrace(dataset, str(problem_id), prompt, tuple(steps),
                         correct if isinstance(correct, bool) else None, policy)
    return _validated(trace, where)


def import_artifact_file(path: Path | str, *, dataset: str | None = None,
                         prompt_tokens: int | None = None,
                         policy: Policy = BRSD_POLICY) -> ProblemTrace:
    """Import one ``example_<N>.json``; the dataset defaults to its folder's name."""
    path = Path(path)
    try:
        obj = loads_json(read_text(path), str(path))
    except InputError as exc:
        raise TraceError(exc.where, None, exc.reason) from None
    return import_artifact_problem(obj, dataset=dataset or path.parent.name, where=str(path),
                                   prompt_tokens=prompt_tokens, policy=policy)


def import_token_log_record(obj, *, dataset: str, where: str, prompt_tokens: int,
                            policy: Policy = BRSD_POLICY) -> ProblemTrace:
    """Convert one token-log record (a decoded JSON object)."""
    if not isinstance(obj, dict):
        raise TraceError(where, None, "a token-log record must be a JSON object")
    problem_id = _get(obj, "idx", where, (int, str))
    steps: list[StepEvent] = []
    chain = 0  # steps in the reasoning chain: the next step's position
    for awhere, attempt in _objects(obj, "step_attempts", where, "an attempt"):
        outcome = _get(attempt, "outcome", awhere, (str,))
        if outcome == "accept":
            steps.append(StepEvent("accept", read_count(attempt, "draft_tokens", awhere)))
            chain += 1
        elif outcome == "target_intervention":
            steps.append(StepEvent("rescue", read_count(attempt, "draft_tokens", awhere),
                                   read_count(attempt, "target_tokens", awhere)))
            chain += 1
        elif outcome == "backtrack_trigger":
            if not steps or steps[-1].outcome != "rescue":
                raise TraceError(awhere, "outcome", "a backtrack must follow a target "
                                 "intervention", outcome)
            source = read_count(attempt, "from_step", awhere)
            if source != chain - 1:
                raise TraceError(awhere, "from_step", f"is not the position of the failed "
                                 f"target step before it ({chain - 1})", source)
            kept = read_count(attempt, "to_step", awhere)
            if kept >= source:
                raise TraceError(awhere, "to_step", "must be before from_step", kept)
            failed = steps.pop()
            steps.append(StepEvent("backtrack", failed.draft_tokens, failed.target_tokens,
                                   backtrack_steps=source - kept - 1))
            chain = kept + 1
        else:
            raise TraceError(awhere, "outcome",
                             "is not accept, target_intervention or backtrack_trigger", outcome)
    score = obj.get("score")
    correct = score[0] if isinstance(score, list) and score and isinstance(score[0], bool) \
        else None
    trace = ProblemTrace(dataset, str(problem_id), prompt_tokens, tuple(steps), correct, policy)
    return _validated(trace, where)


def import_token_log(path: Path | str, *, dataset: str, prompt_tokens: int,
                     policy: Policy = BRSD_POLICY, skip_invalid: bool = False,
                     ) -> tuple[list[ProblemTrace], list[TraceError]]:
    """Import every record of a token-log JSONL file.

    Returns the traces and, with ``skip_invalid``, the errors of the records left out;
    without it the first inconsistent record raises.
    """
    traces, skipped = [], []
    for where, obj in read_json_lines(path):
        try:
            traces.append(import_token_log_record(obj, dataset=dataset, where=where,
                                                  prompt_tokens=prompt_tokens, policy=policy))
        except TraceError as exc:
            if not skip_invalid:
                raise
            skipped.append(exc)
    if not traces:
        raise TraceError(str(path), None, "holds no importable records")
    return traces, skipped
