"""The fleet's devices: what every device shares (items, the activity log) and the devices that
run one job at a time (:class:`ExclusiveDevice`: an FPGA draft board, a host link); the GPUs
that batch continuously are :mod:`~heteroreason.model.fleet.batched_gpu`'s.

A device serves *items*, one per job a problem submits (the job's running record, with its
progress); it sets ``item.start_ms`` when an item first enters service and calls
``owner.completed(item)`` when it ends. Items of one problem
reach a device one at a time (the problem's replay,
:mod:`~heteroreason.model.fleet.problem_replay`).
"""

from __future__ import annotations

from collections import deque
from typing import NamedTuple

from heteroreason.model.system.event_loop import EventLoop, Priority
from heteroreason.model.system.records import JobKind, Record, Station
from heteroreason.model.timing.device_timing import LlmTiming

__all__ = ["Activity", "Device", "ExclusiveDevice", "FleetError", "GpuWork", "Item",
           "SharedDevice", "job_name", "rank"]


class FleetError(ValueError):
    """A fleet that cannot run as asked (the message names the parameter and its range)."""


class GpuWork(NamedTuple):
    """One call of a model: a prefill of ``prefill`` tokens (``None``: none), then ``decode``
    tokens after ``kv`` cached ones; ``ms`` is its batch-1 cost."""

    ms: float
    model: LlmTiming
    prefill: int | None
    decode: int
    kv: int


class Activity(NamedTuple):
    """A stretch of a device's work, for a timeline: a job of problem ``problem`` on a device
    that serves one at a time (``items`` 1), or a GPU segment of ``iterations`` iterations of a
    batch of ``items`` (``problem`` -1)."""

    device: str
    pool: str
    start_ms: float
    end_ms: float
    what: str
    items: int
    iterations: int
    problem: int


class Item(Record):
    """A job on a device: the problem's running :class:`Record` of it (``start_ms`` its
    submission until it enters service; ``end_ms`` the batch-1 end until it ends) with its
    progress in batch-1 milliseconds (``done_ms`` of ``work_ms``)."""

    __slots__ = ("args", "call_pending", "decode_left", "device", "done", "done_ms", "foreign",
                 "kv", "kv_tokens", "owner", "prefill", "priority", "seq",
                 "speculative", "started", "submit_ms", "work_ms")
    # an item is itself: two jobs of equal fields are two jobs
    __eq__ = object.__eq__
    __hash__ = object.__hash__

    def __init__(self, owner, resource: Station, kind: JobKind, now_ms: float, work_ms: float,
                 step: int, tokens: int, job_id: int, epoch: int, priority: Priority,
                 speculative: bool, device, done, args: tuple):
        self.resource = resource
        self.kind = kind
        self.start_ms = now_ms
        self.end_ms = now_ms + work_ms
        self.step = step
        self.tokens = tokens
        self.wasted = False
        self.job_id = job_id
        self.epoch = epoch
        self.owner = owner
        self.work_ms = work_ms
        self.priority = priority
        self.speculative = speculative
        self.submit_ms = now_ms
        self.done_ms = 0.0
        self.started = False
        self.seq = 0
        self.foreign = False
        self.device = device  # where the owner sent it
        self.done = done  # the owner's: what to call when it ends, with ``args``
        self.args = args

    @property
    def fraction_done(self) -> float:
        return self.done_ms / self.work_ms if self.work_ms > 0 else 1.0


class Device:
    """What every device records: busy time and the queue of items not yet served (its
    length integrated over time, for Little's law)."""

    def __init__(self, name: str, pool: str, loop: EventLoop):
        self.name = name
        self.pool = pool
        self.index = 0  # its place in its pool (the fleet numbers them)
        self.loop = loop
        self.busy_ms = 0.0
        self.outstanding_ms = 0.0  # batch-1 work of the items submitted and not yet ended
        self.items_served = 0
        self.queued = 0
        self.queue_area_ms = 0.0
        self.wait_ms = 0.0
        self._queue_t = 0.0
        self._seq = 0
        self.activity: list[Activity] | None = None  # recorded when a list (record_until)
        self.record_until_ms = 0.0

    def _log(self, start_ms: float, what: str, items: int, iterations: int,
             problem: int) -> None:
        if self.activity is not None and start_ms < self.record_until_ms:
            self.activity.append(Activity(self.name, self.pool, start_ms, self.loop.now, what,
                                          items, iterations, problem))

    def _queue_change(self, delta: int) -> None:
        now = self.loop.now
        self.queue_area_ms += self.queued * (now - self._queue_t)
        self._queue_t = now
        self.queued += delta

    def _forget(self, item: Item) -> None:
        self.outstanding_ms -= item.work_ms
        if not item.started:  # cancelled while queued: it waited until now
            self._queue_change(-1)
            self.wait_ms += self.loop.now - item.submit_ms


class ExclusiveDevice(Device):
    """One job at a time, in order of submission."""

    batches = False

    def __init__(self, name: str, pool: str, loop: EventLoop):
        super().__init__(name, pool, loop)
        self.queue: deque[Item] = deque()
        self.current: Item | None = None
        self._start_ms = 0.0
        self._token = 0

    # (the per-job paths are written out: they run for every job of every problem)
    def submit(self, item: Item) -> None:
        self._seq += 1
        item.seq = self._seq
        self.outstanding_ms += item.work_ms
        if self.current is None:
            self._start(item)  # served as it arrives: the queue's length does not change
        else:
            self._queue_change(+1)
            self.queue.append(item)

    def _start(self, item: Item) -> None:
        loop = self.loop
        now = loop.now
        self.current = item
        self._start_ms = now
        self._token += 1
        item.started = True
        item.start_ms = now
        self.wait_ms += now - item.submit_ms
        self.items_served += 1
        loop.at(now + item.work_ms, item.priority, self._end, self._token)

    def _end(self, token: int) -> None:
        if token != self._token:
            return
        item = self.current
        item.done_ms = item.work_ms
        self.busy_ms += self.loop.now - self._start_ms
        if self.activity is not None:
            self._log(self._start_ms, job_name(item), 1, 1, item.owner.index)
        self.outstanding_ms -= item.work_ms
        self._advance()
        item.owner.completed(item)

    def _advance(self) -> None:
        self.current = None
        if self.queue:
            self._queue_change(-1)
            self._start(self.queue.popleft())

    def promote(self, item: Item) -> None:
        item.speculative = False  # one job at a time in order: nothing to reorder

    def cancel(self, item: Item) -> None:
        now = self.loop.now
        if item is self.current:
            item.done_ms = now - self._start_ms
            self.busy_ms += now - self._start_ms
            if self.activity is not None:
                self._log(self._start_ms, f"{job_name(item)} (cut)", 1, 1, item.owner.index)
            self._token += 1
            self._forget(item)
            self._advance()
        else:
            self.queue.remove(item)
            self._forget(item)


class SharedDevice(Device):
    """What the devices that serve several items at once share (the batching GPUs, a board
    drafting several a pass): the items ``waiting`` and the ``batch`` in service, in
    :func:`rank` order; promotion and cancellation, which take effect when the segment in
    flight (``_seg``) reaches its next boundary. A subclass plans (``_plan``), cuts its
    segment (``_changed``), prices an item's partial work (``_partial_ms``) and closes a
    segment whose last item is cancelled (``_close_emptied``)."""

    batches = True

    def __init__(self, name: str, pool: str, loop: EventLoop):
        super().__init__(name, pool, loop)
        self.waiting: list[Item] = []
        self.batch: list[Item] = []
        self._seg: tuple | None = None
        self._token = 0
        self._priority = Priority.START  # the running segment's: its most urgent item's
        self._in_callbacks = False

    def promote(self, item: Item) -> None:
        """A speculative item becomes critical: the batch is planned again at the next
        boundary, with it ranked among the critical work."""
        item.speculative = False
        if item in self.batch:
            self.batch.sort(key=rank)  # the plans rely on the batch in rank order
            return  # already served
        self._changed()

    def cancel(self, item: Item) -> None:
        if item not in self.batch:
            self.waiting.remove(item)
            self._forget(item)
            return
        running = self._seg is not None
        if running:
            item.done_ms += self._partial_ms(item)
        self.batch.remove(item)
        self._forget(item)
        if not running:
            return  # between segments: the next plan goes without it
        if not self.batch:
            self._close_emptied()  # the work in flight served only it
            if not self._in_callbacks:
                self._plan()
            return
        self._priority = min(i.priority for i in self.batch)
        self._changed()

    def _finish(self, finished: list[Item]) -> None:
        """The end of a segment: ``finished`` (served whole) leave the batch and their owners
        hear of it; then, unless a callback started work, the next plan."""
        if finished:
            done = set(map(id, finished))
            self.batch = [i for i in self.batch if id(i) not in done]
        for item in finished:
            item.done_ms = item.work_ms
            self.outstanding_ms -= item.work_ms  # (_forget of a served item)
        self._in_callbacks = True
        try:
            for item in finished:
                item.owner.completed(item)
        finally:
            self._in_callbacks = False
        if self._seg is None:
            self._plan()


def rank(item: Item) -> tuple[bool, int]:
    """Critical work before step-ahead prefetches, then in order of submission."""
    return item.speculative, item.seq


def job_name(item: Item) -> str:
    return item.kind.value
