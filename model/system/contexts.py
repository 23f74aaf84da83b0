"""Traces against the models they are replayed on: every step's context (the prompt, the
validated chain and the step's longest sequence, :meth:`~heteroreason.model.workload.traces.
ProblemTrace.step_contexts`) must fit the context of the draft, the PRM and the target."""

from __future__ import annotations

from typing import NamedTuple

from heteroreason.model.spec.numerics.qwen2_config import qwen2_config
from heteroreason.model.system.config import ServingMode, SystemConfig
from heteroreason.model.system.replay import ScheduleError
from heteroreason.model.workload.traces import ProblemTrace

__all__ = ["ContextLimit", "check_contexts", "context_limits"]


class ContextLimit(NamedTuple):
    role: str
    model: str
    max_context: int


def context_limits(config: SystemConfig, mode: ServingMode) -> tuple[ContextLimit, ...]:
    """The three models' contexts, the draft's as it runs in ``mode`` (FPGA or GPU)."""
    draft = config.draft(mode).model
    prm, target = qwen2_config(config.prm.model), qwen2_config(config.target.model)
    return (ContextLimit("draft", draft.name, draft.max_context),
            ContextLimit("PRM", prm.name, prm.max_context),
            ContextLimit("target", target.name, target.max_context))


def check_contexts(trace: ProblemTrace, config: SystemConfig, mode: ServingMode) -> None:
    """Raise :class:`ScheduleError` naming the problem, the step, the tokens it needs and the model
    whose context is too short, at the first step that does not fit."""
    limits = context_limits(config, mode)
    tightest = min(limits, key=lambda limit: limit.max_context)
    for k, need in enumerate(trace.step_contexts()):
        if need > tightest.max_context:
            raise ScheduleError(
                f"problem {trace.problem_id} ({trace.dataset}) step {k}: needs {need} tokens of "
                f"context (prompt {trace.prompt_tokens}, the chain before it and the step); the "
                f"{tightest.role} ({tightest.model}) holds {tightest.max_context}")
