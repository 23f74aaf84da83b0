"""Transaction-level golden model of a KVMU holding several problems (contexts) at once.

Written from docs/design.md §4.6 (the contract of ../shared/DESIGN.md §14), ahead of the RTL
(issue 43): every host command and every token carries a context id; each context has its own
pointer triplet, flags and sticky error, which follow §4.1 exactly as
:class:`~heteroreason.model.spec.golden.kvmu.GoldenKvmu` does, and its own KV region in memory
(``context x capacity + position``). Isolation is the invariant: an event to context ``c``
changes only ``c``'s state.

Context errors
--------------
Two errors are the engine's, not §4.1's (their codes,
:class:`~heteroreason.model.spec.protocol.ContextError`, are the RTL's too):

* a context id out of range (``id >= contexts``): nothing changes but the engine's sticky
  ``context_error`` (the first kept, with the id, until a CLEAR_ERROR);
* any event but INIT and CLEAR_ERROR to a context never initialised: nothing changes but that
  context's sticky ``context_error``.

A CLEAR_ERROR to a context clears that context's errors and the engine's. A context is
initialised by its first legal INIT and stays so.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

from heteroreason.model import checks
from heteroreason.model.spec.golden.kvmu import GoldenKvmu, KvmuState, Outcome
from heteroreason.model.spec.protocol import ContextError, Error, Op, Source

__all__ = ["Activity", "ContextError", "ContextOutcome", "GoldenMultiKvmu"]


class Activity(enum.Enum):
    """What a context is doing, as a pass scheduler sees it (§4.6)."""

    IDLE = "idle"  # never initialised
    INGESTING = "ingesting"  # the host's (target's) tokens are arriving
    DRAFTING = "drafting"  # its next draft token may be processed
    WAITING = "waiting"  # stalled until a verdict


@dataclass(frozen=True)
class ContextOutcome:
    """What one event to a context did: §4.1's :class:`Outcome`, the context error it raised
    (``ContextError.NONE`` when none) and the KV address it wrote (its region's base plus the
    position), if any."""

    outcome: Outcome
    context_error: ContextError = ContextError.NONE
    write_address: int | None = None


class GoldenMultiKvmu:
    """The golden multi-context KVMU. See the module docstring.

    Parameters
    ----------
    contexts : int
        Problems held at once (ids ``0 .. contexts - 1``).
    capacity : int
        Tokens a context's KV region holds.
    """

    def __init__(self, *, contexts: int, capacity: int):
        checks.integer("contexts", contexts, low=1)
        checks.integer("capacity", capacity, low=1)
        self._kvmus = [GoldenKvmu(capacity=capacity) for _ in range(contexts)]
        self._initialised = [False] * contexts
        self._errors = [ContextError.NONE] * contexts
        self.context_error = ContextError.NONE  # the engine's: an id out of range
        self.bad_context: int | None = None

    @property
    def contexts(self) -> int:
        return len(self._kvmus)

    @property
    def capacity(self) -> int:
        return self._kvmus[0].capacity

    def state(self, ctx: int) -> KvmuState:
        return self._kvmus[self._index(ctx)].state()

    def initialised(self, ctx: int) -> bool:
        return self._initialised[self._index(ctx)]

    def error(self, ctx: int) -> ContextError:
        """The context's sticky context error (its §4.1 error is in :meth:`state`)."""
        return self._errors[self._index(ctx)]

    def activity(self, ctx: int) -> Activity:
        k = self._index(ctx)
        if not self._initialised[k]:
            return Activity.IDLE
        kvmu = self._kvmus[k]
        if kvmu.mode.takes_host_tokens:
            return Activity.INGESTING
        return Activity.WAITING if kvmu.stalled else Activity.DRAFTING

    def _index(self, ctx: int) -> int:
        """``ctx`` for the queries, which refuse an id out of range at once."""
        checks.integer("context id", ctx, low=0, high=self.contexts - 1,
                       note=f"{self.contexts} contexts")
        return ctx

    # ------------------------------------------------------------------ events

    def _admit(self, ctx: int, *, needs_init: bool) -> ContextOutcome | None:
        """The context error an event to ``ctx`` raises, or None when it may go on."""
        checks.integer("context id", ctx, low=0)
        if ctx >= self.contexts:
            if self.context_error is ContextError.NONE:
                self.context_error, self.bad_context = ContextError.CONTEXT_OUT_OF_RANGE, ctx
            return ContextOutcome(Outcome(), ContextError.CONTEXT_OUT_OF_RANGE)
        if needs_init and not self._initialised[ctx]:
            if self._errors[ctx] is ContextError.NONE:
                self._errors[ctx] = ContextError.CONTEXT_NOT_INITIALISED
            return ContextOutcome(Outcome(), ContextError.CONTEXT_NOT_INITIALISED)
        return None

    def _wrote(self, ctx: int, outcome: Outcome) -> ContextOutcome:
        address = None if outcome.write_pos is None else ctx * self.capacity + outcome.write_pos
        return ContextOutcome(outcome, write_address=address)

    def command(self, ctx: int, op: Op, pos: int = 0) -> ContextOutcome:
        """A host command to context ``ctx`` (``pos`` is INIT's)."""
        op = Op(op)
        refused = self._admit(ctx, needs_init=op not in (Op.INIT, Op.CLEAR_ERROR))
        if refused is not None:
            return refused
        outcome = self._kvmus[ctx].command(op, pos)
        if op is Op.INIT and outcome.error is Error.NONE:
            self._initialised[ctx] = True
        if op is Op.CLEAR_ERROR:
            self._errors[ctx] = ContextError.NONE
            self.context_error, self.bad_context = ContextError.NONE, None
        return ContextOutcome(outcome)

    def token(self, ctx: int, source: Source, *, last: bool = False,
              step_end: bool = False) -> ContextOutcome:
        """A token of context ``ctx`` processed by the decoder."""
        refused = self._admit(ctx, needs_init=True)
        if refused is not None:
            return refused
        return self._wrote(ctx, self._kvmus[ctx].token(source, last=last, step_end=step_end))
