"""Transaction-level golden model of the KV-cache management unit (KVMU).

Written from the event table of docs/design.md §4.1, one method per event, without regard to how the
RTL computes anything. The encodings it shares with the RTL (:class:`Mode`, :class:`Op`,
:class:`Error`, :class:`Source`) are :mod:`heteroreason.model.spec.protocol`'s.

State
-----
Three pointers ``valid <= curr <= ahead <= capacity`` (token positions), the mode, and two flags:

* ``pending``: the step ``[valid, curr)`` has been submitted and awaits a verdict;
* ``stalled``: while a step was pending, the step-ahead step ``[curr, ahead)`` ended too, so
  drafting waits for the verdict (speculation stall).

Events
------
``init(pos)``
    Every pointer becomes ``pos``; mode Initialization; flags cleared; in-flight samples are
    flushed. Illegal when ``pos > capacity``.
``accept()``
    ``valid <- curr``. If the step-ahead step is complete, ``curr <- ahead`` and that step is
    submitted at once (still pending, no longer stalled); otherwise nothing is pending until the
    next step end. Mode Accept. Illegal when nothing is pending.
``reject()``
    ``curr <- valid``, ``ahead <- valid``; mode Rollback; flags cleared; in-flight samples are
    flushed. Illegal when nothing is pending.
``clear_error()``
    Clears the sticky error code. Always legal.
``host_token(last)``
    A target-model token ingested in Initialization or Rollback: KV written at ``ahead``,
    ``ahead += 1``. With ``last``: ``valid <- curr <- ahead`` and mode Speculation.
``draft_token(step_end)``
    A sampled token processed in Speculation or Accept (mode becomes Speculation): KV written at
    ``ahead``, ``ahead += 1``. With ``step_end`` (the token is the step delimiter): if nothing is
    pending, ``curr <- ahead`` and the step ``[valid, curr)`` is submitted; otherwise the
    step-ahead step is complete and drafting stalls.

Illegal events set the sticky error code (the first error is kept until ``clear_error``) and
change nothing else. When one event breaks several rules, the error reported is the first that
applies in this order: wrong mode for the token's source, drafting while stalled, write at
capacity.
"""

from __future__ import annotations

from dataclasses import dataclass

from heteroreason.model import checks
from heteroreason.model.spec.protocol import Error, Mode, Op, Source

__all__ = ["GoldenKvmu", "KvmuState", "Outcome"]


@dataclass(frozen=True)
class KvmuState:
    """A snapshot of every architecturally visible register of the KVMU."""

    valid: int
    curr: int
    ahead: int
    mode: Mode
    pending: bool
    stalled: bool
    error: Error


@dataclass(frozen=True)
class Outcome:
    """What one event did.

    Attributes
    ----------
    error : Error
        ``Error.NONE`` when the event was legal, else the rule it broke (the sticky code may
        still hold an older error).
    submitted : tuple[int, int] or None
        The span ``(start, end)`` submitted for verification by this event, if any.
    write_pos : int or None
        The KV position written by a legal token event.
    flushed : bool
        Whether the event made every sample still in flight stale (legal INIT or REJECT).
    """

    error: Error = Error.NONE
    submitted: tuple[int, int] | None = None
    write_pos: int | None = None
    flushed: bool = False


class GoldenKvmu:
    """The golden KVMU. See the module docstring for the event semantics.

    Parameters
    ----------
    capacity : int
        KV-cache capacity in tokens (positions ``0 .. capacity - 1``).
    """

    def __init__(self, *, capacity: int):
        checks.integer("capacity", capacity, low=1)
        self._capacity = capacity
        self.valid = 0
        self.curr = 0
        self.ahead = 0
        self.mode = Mode.INITIALIZATION
        self.pending = False
        self.stalled = False
        self.error = Error.NONE

    @property
    def capacity(self) -> int:
        return self._capacity

    def state(self) -> KvmuState:
        return KvmuState(self.valid, self.curr, self.ahead, self.mode, self.pending,
                         self.stalled, self.error)

    def _fail(self, error: Error) -> Outcome:
        if self.error == Error.NONE:
            self.error = error
        return Outcome(error=error)

    # host commands

    def init(self, pos: int) -> Outcome:
        checks.integer("pos", pos, low=0)
        if pos > self.capacity:
            return self._fail(Error.INIT_BEYOND_CAPACITY)
        self.valid = pos
        self.curr = pos
        self.ahead = pos
        self.mode = Mode.INITIALIZATION
        self.pending = False
        self.stalled = False
        return Outcome(flushed=True)

    def accept(self) -> Outcome:
        if not self.pending:
            return self._fail(Error.ACCEPT_WITHOUT_PENDING)
        self.valid = self.curr
        self.mode = Mode.ACCEPT
        if self.stalled:
            self.curr = self.ahead
            self.stalled = False
            return Outcome(submitted=(self.valid, self.curr))
        self.pending = False
        return Outcome()

    def reject(self) -> Outcome:
        if not self.pending:
            return self._fail(Error.REJECT_WITHOUT_PENDING)
        self.curr = self.valid
        self.ahead = self.valid
        self.mode = Mode.ROLLBACK
        self.pending = False
        self.stalled = False
        return Outcome(flushed=True)

    def clear_error(self) -> Outcome:
        self.error = Error.NONE
        return Outcome()

    def command(self, op: Op, pos: int = 0) -> Outcome:
        """Apply a host command given by opcode (``pos`` is used by INIT only)."""
        op = Op(op)
        if op == Op.INIT:
            return self.init(pos)
        if op == Op.ACCEPT:
            return self.accept()
        if op == Op.REJECT:
            return self.reject()
        return self.clear_error()

    # tokens processed by the decoder

    def host_token(self, *, last: bool) -> Outcome:
        checks.flag("last", last)
        if not self.mode.takes_host_tokens:
            return self._fail(Error.HOST_TOKEN_IN_SPECULATION)
        if self.ahead == self.capacity:
            return self._fail(Error.WRITE_AT_CAPACITY)
        pos = self.ahead
        self.ahead += 1
        if last:
            self.valid = self.ahead
            self.curr = self.ahead
            self.mode = Mode.SPECULATION
        return Outcome(write_pos=pos)

    def draft_token(self, *, step_end: bool) -> Outcome:
        checks.flag("step_end", step_end)
        if self.mode.takes_host_tokens:
            return self._fail(Error.DRAFT_TOKEN_OUTSIDE_SPECULATION)
        if self.stalled:
            return self._fail(Error.DRAFT_TOKEN_WHILE_STALLED)
        if self.ahead == self.capacity:
            return self._fail(Error.WRITE_AT_CAPACITY)
        pos = self.ahead
        self.ahead += 1
        self.mode = Mode.SPECULATION
        submitted = None
        if step_end:
            if self.pending:
                self.stalled = True
            else:
                self.curr = self.ahead
                self.pending = True
                submitted = (self.valid, self.curr)
        return Outcome(submitted=submitted, write_pos=pos)

    def token(self, source: Source, *, last: bool = False, step_end: bool = False) -> Outcome:
        """Apply a token event given by source (``last`` for host, ``step_end`` for draft)."""
        if Source(source) == Source.HOST:
            return self.host_token(last=last)
        return self.draft_token(step_end=step_end)
