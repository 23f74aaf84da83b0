"""The records of a reasoning trace (:mod:`~heteroreason.model.workload.traces` reads, checks and
writes them): a step's outcome, the BRSD policy, a step event, a problem's run; and the error
that names where a trace is wrong."""

from __future__ import annotations

import enum
from dataclasses import dataclass, field

__all__ = ["BRSD_POLICY", "OUTCOMES", "RSD_POLICY", "Policy", "ProblemTrace", "StepEvent",
           "StepOutcome", "TraceError"]


class StepOutcome(str, enum.Enum):
    """How the PRM judged a step: the draft's step kept; the target's step kept in its place;
    the target's step failed too, so the chain goes back (and the target regenerates)."""

    ACCEPT = "accept"
    RESCUE = "rescue"
    BACKTRACK = "backtrack"

    def __str__(self) -> str:
        return self.value


OUTCOMES = tuple(o.value for o in StepOutcome)


class TraceError(ValueError):
    """A trace that cannot be read or is inconsistent; says where and why."""

    def __init__(self, where: str, field_name: str | None, reason: str, value=None):
        self.where = where
        self.field = field_name
        self.reason = reason
        self.value = value
        location = f"{where}: field '{field_name}'" if field_name else where
        got = "" if value is None else f" (got {value!r})"
        super().__init__(f"{location}: {reason}{got}")


@dataclass(frozen=True)
class Policy:
    """The verification policy a trace was recorded under."""

    accept_threshold: float = 0.7
    backtrack_threshold: float = 0.7
    max_backtracks: int = 5
    max_backtrack_depth: int = 10


BRSD_POLICY = Policy()
RSD_POLICY = Policy(max_backtracks=0, max_backtrack_depth=0)


@dataclass(frozen=True)
class StepEvent:
    """One step of a problem's run; ``outcome`` is an :class:`StepOutcome` (its name as a string is
    taken too)."""

    outcome: StepOutcome
    draft_tokens: int
    target_tokens: int = 0
    draft_score: float | None = None
    target_score: float | None = None
    backtrack_steps: int = 0
    regenerated_tokens: int = 0
    prefetch_tokens: int = 0  # accepted steps: the target's step from the same context

    def __post_init__(self):
        if not isinstance(self.outcome, StepOutcome):
            try:
                object.__setattr__(self, "outcome", StepOutcome(self.outcome))
            except ValueError:
                raise ValueError(f"outcome must be one of {', '.join(OUTCOMES)}, not "
                                 f"{self.outcome!r}") from None


@dataclass(frozen=True)
class ProblemTrace:
    """One problem's BRSD run: its set and id, its prompt's tokens, its step events in order,
    whether its answer was correct (``None``: unknown) and the policy it ran."""

    dataset: str
    problem_id: str
    prompt_tokens: int
    steps: tuple[StepEvent, ...]
    correct: bool | None = None
    policy: Policy = field(default=BRSD_POLICY)

    def accepted_chain(self) -> list[int]:
        """Token counts of the steps that make up the final answer, in order."""
        chain: list[int] = []
        for step in self.steps:
            _extend(chain, step)
        return chain

    def step_contexts(self) -> list[int]:
        """The context each step needs, in tokens: the prompt and the validated chain before it
        and the step's longest sequence on it — its draft (which the PRM scores with the
        context), the target's step, or a backtrack's regeneration after the dropped steps."""
        chain: list[int] = []
        needs = []
        for step in self.steps:
            before = self.prompt_tokens + sum(chain)
            need = before + max(step.draft_tokens, step.target_tokens)
            if step.outcome == "backtrack" and step.regenerated_tokens:
                kept = chain[:len(chain) - step.backtrack_steps]
                need = max(need, self.prompt_tokens + sum(kept) + step.regenerated_tokens)
            needs.append(need)
            _extend(chain, step)
        return needs

    @property
    def output_tokens(self) -> int:
        """Tokens of the final reasoning chain (accepted draft and target tokens)."""
        return sum(self.accepted_chain())

    @property
    def generated_tokens(self) -> int:
        """Every token generated, kept or not (draft, target and regenerated)."""
        return sum(s.draft_tokens + s.target_tokens + s.regenerated_tokens for s in self.steps)

    @property
    def backtracks(self) -> int:
        return sum(s.outcome == "backtrack" for s in self.steps)


def _extend(chain: list[int], step: StepEvent) -> None:
    """``chain`` (the validated steps' token counts) after ``step``."""
    if step.outcome == "accept":
        chain.append(step.draft_tokens)
    elif step.outcome == "rescue":
        chain.append(step.target_tokens)
    else:
        del chain[len(chain) - step.backtrack_steps:]
        if step.regenerated_tokens:
            chain.append(step.regenerated_tokens)
