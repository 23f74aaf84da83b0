"""The discrete-event loop of the system scheduler.

Events are ordered by the key ``(time_ms, priority, sequence)``: earlier first; at the same
instant the lower :class:`Priority` first; at the same instant and priority, in the order they
were scheduled. The priorities encode the rules a reader of a timeline expects:

1. ``TRANSFER`` completions first (data has arrived before anyone acts on it);
2. ``VERDICT`` (a PRM score) before any device completion, so a verdict and the end of a
   step-ahead draft at the same instant count as "verdict first": an accept submits the
   completed step without a stall, a reject discards it;
3. ``TARGET`` completions, then ``DRAFT`` completions, then ``SYNC`` (draft-side prefill or
   shadow ingest) completions;
4. ``START`` last: work scheduled to begin at an instant starts after everything that ends then.

Time never goes back: scheduling an event before the current time raises.
"""

from __future__ import annotations

import enum
import heapq
from collections.abc import Callable

__all__ = ["EventLoop", "Priority"]


class Priority(enum.IntEnum):
    TRANSFER = 0
    VERDICT = 1
    TARGET = 2
    DRAFT = 3
    SYNC = 4
    START = 5


class EventLoop:
    """A heap of ``(time_ms, priority, sequence, handler, args)`` entries."""

    __slots__ = ("_heap", "_seq", "events", "now")

    def __init__(self):
        self._heap: list = []
        self._seq = 0
        self.now = 0.0
        self.events = 0

    def at(self, time_ms: float, priority: Priority, handler: Callable, *args) -> None:
        if time_ms < self.now:
            raise ValueError(f"event at {time_ms} ms scheduled in the past (now {self.now} ms)")
        self._seq += 1
        heapq.heappush(self._heap, (time_ms, priority, self._seq, handler, args))

    def run(self) -> float:
        """Run to exhaustion; returns the time of the last event."""
        heap, pop, events = self._heap, heapq.heappop, 0
        try:
            while heap:
                time_ms, _, _, handler, args = pop(heap)
                self.now = time_ms
                events += 1
                handler(*args)
        finally:
            self.events += events
        return self.now
