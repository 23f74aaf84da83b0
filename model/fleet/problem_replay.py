"""A problem's replay in the fleet: the batch-1 state machines
(:class:`~heteroreason.model.system.sequential.SequentialReplay`,
:class:`~heteroreason.model.system.overlapped.OverlappedReplay`) with their four stations
served by shared devices.

The replay keeps the batch-1 contract per problem and station — one job at a time, in order, stale
jobs (from before a backtrack) dropped — and hands each job to a device of the resource's pool:
the problem's draft board and its host link (fixed when the problem is admitted: the draft's KV
cache lives there), its target GPU (fixed at its first target call: the target's KV cache lives
there), a PRM GPU per call. Costs of GPU calls keep their shape (:class:`~heteroreason.model.
fleet.devices.GpuWork`) so that a batched GPU can price them; at batch 1 they cost what the
batch-1 scheduler charges.
"""

from __future__ import annotations

from heteroreason.model.fleet.devices import GpuWork, Item
from heteroreason.model.system.overlapped import OverlappedReplay
from heteroreason.model.system.records import JobKind, Station
from heteroreason.model.system.replay import Replay
from heteroreason.model.system.sequential import SequentialReplay
from heteroreason.model.timing.device_timing import LlmTiming

__all__ = ["FleetOverlapped", "FleetSequential", "LastRecord", "problem_replay"]

PREFETCH = JobKind.PREFETCH


class LastRecord:
    """A problem's records where its timeline is not wanted: the last one only (what the
    overlapped replay reads back). The jobs that ended are freed as they end, so a large
    fleet's live state is its running jobs, not every job of every problem in flight (which
    outgrew the processor's caches at 128:32:32: issue 43)."""

    __slots__ = ("last",)

    def __init__(self):
        self.last = None

    def append(self, record) -> None:
        self.last = record

    def __getitem__(self, index: int):
        if index != -1 or self.last is None:
            raise IndexError(f"only the last record is kept, not record {index}")
        return self.last


class _OnSharedDevices:
    """Mixed in before a replay class; ``fleet`` supplies the loop, devices and callbacks. A
    resource's running record is its :class:`~heteroreason.model.fleet.devices.Item`."""

    rejected = None  # the sequential replays have no rejected step waiting for its target

    def __init__(self, trace, config, mode, *, fleet, index: int, arrival_ms: float,
                 draft_index: int):
        super().__init__(trace, config, mode)
        self.fleet = fleet
        self.index = index
        self.arrival_ms = arrival_ms
        self.admitted_ms = fleet.loop.now
        self.draft_index = draft_index
        self.loop = fleet.loop
        self.devices: dict[Station, object] = {}
        self.waits_ms: dict[Station, float] = {}

    # the batch-1 cost forms, kept in their shape for the batched GPUs
    def work(self, model: LlmTiming, *, prefill=None, decode=0, kv=0):
        ms = model.prefill_ms(prefill) if prefill is not None else 0.0  # Replay.work's sum
        if decode:
            ms += model.decode_ms(decode, kv)
        return GpuWork(ms, model, prefill, decode, kv)

    def draft_ms(self, tokens: int, kv: int):
        # a board serving one job at a time needs no shape of its drafts (a draft GPU's and a
        # board drafting several a pass do)
        if self.mode.on_fpga and not self.fleet.draft_passes:
            return Replay.work(self, self.draft_t, decode=tokens, kv=kv)
        return self.work(self.draft_t, decode=tokens, kv=kv)

    @staticmethod
    def cost_ms(work) -> float:
        return work.ms if isinstance(work, GpuWork) else work

    def _start(self, res: Station, kind: JobKind, work, step: int, tokens: int,
               priority, done, args: tuple, epoch: int) -> None:
        self.job_id += 1
        shaped = type(work) is GpuWork
        device = self.devices.get(res) or self.fleet.route(self, res)
        speculative = kind is PREFETCH and self.rejected != step
        item = Item(self, res, kind, self.loop.now, work.ms if shaped else work, step, tokens,
                    self.job_id, epoch, priority, speculative, device, done, args)
        self.running[res] = item
        if device.batches:
            if shaped:
                device.submit(item, work)
            elif device.takes_plain:  # a job the device runs alone at its batch-1 cost
                device.submit(item, None)
            else:
                raise TypeError(f"a {kind} job reached GPU {device.name} without its shape")
        else:
            device.submit(item)

    def promote(self, res: Station, step: int) -> None:
        item = self.running[res]
        if item is not None and item.speculative and item.step == step:
            item.device.promote(item)

    # device callbacks
    def _waited(self, item: Item) -> None:
        """``item`` waited from its submission until it entered service (at ``start_ms``)."""
        res = item.resource
        self.waits_ms[res] = self.waits_ms.get(res, 0.0) + item.start_ms - item.submit_ms

    def completed(self, item: Item) -> None:
        item.end_ms = self.loop.now
        res = item.resource  # (_waited, written out: this runs for every job)
        self.waits_ms[res] = self.waits_ms.get(res, 0.0) + item.start_ms - item.submit_ms
        self.records.append(item)
        self._next(res)
        done = item.done
        if done is not None:
            done(*item.args)

    def cancel(self, res: Station, *, wasted: bool = True) -> Item | None:
        item = self.running[res]
        if item is None:
            return None
        item.device.cancel(item)
        now = self.loop.now
        if not item.started:  # cancelled in the queue: it waited until now
            item.start_ms = now
            item.tokens = 0
        elif item.work_ms > 0:
            item.tokens = int(item.tokens * item.fraction_done)
        self._waited(item)
        item.end_ms = now
        item.wasted = wasted
        self.records.append(item)
        self._next(res)
        return item

    def finish(self) -> None:
        super().finish()
        self.fleet.problem_done(self)


class FleetSequential(_OnSharedDevices, SequentialReplay):
    pass


class FleetOverlapped(_OnSharedDevices, OverlappedReplay):
    pass


def problem_replay(trace, config, mode, **kwargs):
    cls = FleetOverlapped if mode.overlapped else FleetSequential
    return cls(trace, config, mode, **kwargs)
