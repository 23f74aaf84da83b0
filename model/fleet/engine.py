"""The fleet simulator: problems arrive, are admitted to a draft device with room for their KV
cache, and run the batch-1 scheduler's state machines on shared pools of devices.

    spec = FleetSpec(system_config("config1"), ServingMode.HETEROREASON, drafts=2, prms=1,
                     targets=1)
    run = simulate_fleet(spec, problems, arrivals_ms)

Pools (:class:`~heteroreason.model.fleet.spec.FleetSpec`): draft devices (FPGA boards holding
the problems their design holds, one job at a time or several drafts a pass,
:class:`~heteroreason.model.fleet.pass_board.PassBoard`; or GPUs batching the draft model),
PRM GPUs and target GPUs (batching, :class:`~heteroreason.model.fleet.batched_gpu.BatchedGpu`),
and a host link per draft device.
Routing picks the member with the least outstanding work (``least``) or the next in turn
(``round-robin``); a problem's draft, link and target stay where they started, each PRM call
is routed on its own.
"""

from __future__ import annotations

import itertools
import math
import operator
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field, replace

from heteroreason.model.fleet.batched_gpu import BatchedGpu
from heteroreason.model.fleet.devices import Activity, ExclusiveDevice, FleetError
from heteroreason.model.fleet.pass_board import PassBoard
from heteroreason.model.fleet.problem_replay import LastRecord, problem_replay
from heteroreason.model.fleet.spec import FleetSpec, Routing, fpga_slots
from heteroreason.model.system.contexts import check_contexts
from heteroreason.model.system.event_loop import EventLoop, Priority
from heteroreason.model.system.records import ProblemRun, Station
from heteroreason.model.system.replay import ScheduleError
from heteroreason.model.system.scheduler import check_timeline
from heteroreason.model.timing.energy import DevicePower
from heteroreason.model.workload.traces import ProblemTrace, check_trace

__all__ = ["DeviceStats", "FleetProblem", "FleetRun", "FleetSpec", "Routing", "fpga_slots",
           "simulate_fleet"]

_OUTSTANDING = operator.attrgetter("outstanding_ms")


@dataclass(frozen=True)
class FleetProblem:
    """One problem's passage through the fleet (times in ms from the first arrival)."""

    index: int
    dataset: str
    problem_id: str
    arrival_ms: float
    admitted_ms: float
    done_ms: float
    output_tokens: int
    drafted_tokens: int
    waits_ms: tuple[tuple[str, float], ...]

    @property
    def latency_ms(self) -> float:
        return self.done_ms - self.arrival_ms


@dataclass(frozen=True)
class DeviceStats:
    name: str
    pool: str
    busy_ms: float
    items_served: int
    wait_ms: float
    queue_area_ms: float
    power: DevicePower | None


@dataclass(frozen=True)
class FleetRun:
    spec: FleetSpec
    problems: tuple[FleetProblem, ...]
    devices: tuple[DeviceStats, ...]
    start_ms: float
    end_ms: float
    events: int
    timelines: tuple[ProblemRun, ...] = field(default=())
    activity: tuple[Activity, ...] = field(default=())

    @property
    def span_ms(self) -> float:
        return self.end_ms - self.start_ms


class _Fleet:
    def __init__(self, spec: FleetSpec, *, check: bool, keep: int):
        self.spec = spec
        self.loop = EventLoop()
        self.check = check
        self.keep = keep
        self.done: list[FleetProblem] = []
        self.timelines: list[ProblemRun] = []
        self.pending: deque[tuple[int, ProblemTrace, float]] = deque()
        self.slots = spec.slots()
        if self.slots is not None and self.slots < 1:
            raise FleetError(f"a draft device cannot hold one problem (draft_slots "
                             f"{self.slots}): the board's HBM is too small for the KV cache")
        loop = self.loop
        table = spec.pass_table()
        self.draft_passes = table is not None  # the replays shape their drafts for it
        if table is not None:
            self.drafts = [PassBoard(f"draft{k}", "draft", loop, table)
                           for k in range(spec.drafts)]
        elif spec.draft_on_fpga:
            self.drafts = [ExclusiveDevice(f"draft{k}", "draft", loop) for k in range(spec.drafts)]
        else:
            cost = spec.cost("draft")
            self.drafts = [BatchedGpu(f"draft{k}", "draft", loop, cost)
                           for k in range(spec.drafts)]
        self.links = [ExclusiveDevice(f"link{k}", "link", loop) for k in range(spec.drafts)]
        prm, target = spec.cost("prm"), spec.cost("target")
        self.prms = [BatchedGpu(f"prm{k}", "prm", loop, prm) for k in range(spec.prms)]
        self.targets = [BatchedGpu(f"target{k}", "target", loop, target,
                                   max_prefetch_items=spec.max_prefetch_items)
                        for k in range(spec.targets)]
        for pool in (self.drafts, self.links, self.prms, self.targets):
            for k, device in enumerate(pool):
                device.index = k
        self.resident = [0] * spec.drafts
        self.turn = {"draft": itertools.count(), "prm": itertools.count(),
                     "target": itertools.count()}

    def _pick(self, pool: str, members: list, allowed=None):
        """The index of the member a request goes to (None: no member allowed)."""
        if len(members) == 1:
            return 0 if allowed is None or allowed(0) else None
        if self.spec.routing is Routing.LEAST:
            # the first of the least outstanding work: ``min`` keeps the first of equals, and
            # runs its scan in C (the scan in Python grew with the pool: issue 43)
            if allowed is None:
                return min(members, key=_OUTSTANDING).index
            candidates = [m for m in members if allowed(m.index)]
            return min(candidates, key=_OUTSTANDING).index if candidates else None
        candidates = [k for k in range(len(members)) if allowed is None or allowed(k)]
        if not candidates:
            return None
        start = next(self.turn[pool])
        return min(candidates, key=lambda k: (k - start) % len(members))

    def arrive(self, index: int, trace: ProblemTrace, arrival_ms: float) -> None:
        self.pending.append((index, trace, arrival_ms))
        self._admit()

    def _admit(self) -> None:
        while self.pending:
            free = None if self.slots is None else (lambda k: self.resident[k] < self.slots)
            k = self._pick("draft", self.drafts, free)
            if k is None:
                return
            index, trace, arrival_ms = self.pending.popleft()
            self.resident[k] += 1
            replay = problem_replay(trace, self.spec.config, self.spec.mode, fleet=self,
                                 index=index, arrival_ms=arrival_ms, draft_index=k)
            if not self.check and len(self.timelines) >= self.keep:
                # its timeline will not be kept (the kept ones are the first to finish, and
                # the count only grows): its jobs need not outlive their ends
                replay.records = LastRecord()
            replay.devices[Station.DRAFT] = self.drafts[k]
            replay.devices[Station.LINK] = self.links[k]
            replay.start()

    def route(self, replay, res: Station):
        if res is Station.PRM:
            return self.prms[self._pick("prm", self.prms)]
        if res is Station.TARGET:
            device = self.targets[self._pick("target", self.targets)]
            replay.devices[Station.TARGET] = device
            return device
        raise AssertionError(f"{res} is fixed at admission")  # pragma: no cover

    def problem_done(self, replay) -> None:
        trace = replay.trace
        arrival = replay.arrival_ms
        if self.check or len(self.timelines) < self.keep:
            shifted = ProblemRun(trace, replay.cfg, replay.mode,
                                 tuple(_shift(r.interval(), arrival) for r in replay.records),
                                 replay.done_ms - arrival, sum(replay.chain),
                                 replay.stalled_steps, replay.reused, 0)
            if self.check:
                check_timeline(shifted)
            if len(self.timelines) < self.keep:
                self.timelines.append(shifted)
        self.done.append(FleetProblem(
            replay.index, trace.dataset, trace.problem_id, arrival, replay.admitted_ms,
            replay.done_ms, sum(replay.chain), sum(s.draft_tokens for s in trace.steps),
            tuple(sorted((r.value, ms) for r, ms in replay.waits_ms.items()))))
        self.resident[replay.draft_index] -= 1
        # summarized: drop the jobs, whose items refer back to the replay (a cycle that the
        # garbage collector would have to find; dropped here, reference counting frees it)
        replay.records = None
        # admit after the finishing problem's own cancellations are done
        self.loop.at(self.loop.now, Priority.START, self._admit)

    def stats(self) -> tuple[DeviceStats, ...]:
        powers = self.spec.powers()
        out = []
        for d in self.drafts + self.links + self.prms + self.targets:
            d._queue_change(0)  # the queue's area up to now
            out.append(DeviceStats(d.name, d.pool, d.busy_ms, d.items_served, d.wait_ms,
                                   d.queue_area_ms, powers.get(d.pool)))
        return tuple(out)


def _shift(iv, offset_ms: float):
    return replace(iv, start_ms=iv.start_ms - offset_ms, end_ms=iv.end_ms - offset_ms)


def simulate_fleet(spec: FleetSpec, problems: Sequence[ProblemTrace],
                   arrivals_ms: Sequence[float], *, check: bool = True,
                   keep_timelines: int = 0, record_until_ms: float | None = None) -> FleetRun:
    """Run ``problems`` arriving at ``arrivals_ms`` (non-decreasing) through the fleet.
    ``check``: the batch-1 invariants on every problem's timeline (no resource of a problem busy
    twice at once, every accepted token accounted for); ``keep_timelines``: keep that many
    problems' timelines (shifted to their arrival); ``record_until_ms``: record every device's
    work that starts before then (:class:`~heteroreason.model.fleet.devices.Activity`)."""
    if len(problems) != len(arrivals_ms):
        raise FleetError(f"{len(problems)} problems but {len(arrivals_ms)} arrival times")
    if not problems:
        raise FleetError("no problems to simulate")
    for a, b in itertools.pairwise(arrivals_ms):
        if b < a:
            raise FleetError(f"arrival times must not decrease ({a} then {b})")
    fleet = _Fleet(spec, check=check, keep=keep_timelines)
    devices = fleet.drafts + fleet.links + fleet.prms + fleet.targets
    if record_until_ms is not None:
        for d in devices:
            d.activity, d.record_until_ms = [], record_until_ms
    checked: set[int] = set()  # a workload draws the same traces many times
    for i, (trace, t) in enumerate(zip(problems, arrivals_ms, strict=True)):
        if not math.isfinite(t) or t < 0:
            raise FleetError(f"arrival time {t!r} of problem {i} must be finite and >= 0")
        if id(trace) not in checked:
            check_trace(trace)
            try:
                check_contexts(trace, spec.config, spec.mode)
            except ScheduleError as exc:
                raise FleetError(str(exc)) from None
            checked.add(id(trace))
    _check_capacity(fleet, problems)

    def arrive(i: int) -> None:  # each arrival schedules the next: the event heap stays small
        if i + 1 < len(problems):
            fleet.loop.at(arrivals_ms[i + 1], Priority.START, arrive, i + 1)
        fleet.arrive(i, problems[i], arrivals_ms[i])

    fleet.loop.at(arrivals_ms[0], Priority.START, arrive, 0)
    fleet.loop.run()
    if len(fleet.done) != len(problems):
        raise FleetError(f"{len(problems) - len(fleet.done)} problem(s) never finished "
                         "(a pool could not serve them)")
    done = tuple(sorted(fleet.done, key=lambda p: p.index))
    activity = sorted((a for d in devices for a in d.activity or ()),
                      key=lambda a: (a.start_ms, a.device))
    return FleetRun(spec, done, fleet.stats(), min(arrivals_ms),
                    max(p.done_ms for p in done), fleet.loop.events, tuple(fleet.timelines),
                    tuple(activity))


def _check_capacity(fleet: _Fleet, problems: Sequence[ProblemTrace]) -> None:
    """A problem whose scoring the PRM GPUs' KV caches cannot hold would never be served (a
    target call too large for its GPU's cache fails when it is submitted)."""
    # the longest context and step the PRM scores along a trace's steps (the KV one scoring call
    # holds); the overlapped modes also score step-ahead drafts on a context a backtrack later
    # undoes, which can be longer: for them this is a lower bound
    longest = max(max(p.step_contexts()) for p in {id(p): p for p in problems}.values())
    cost = fleet.prms[0].cost
    if longest > cost.kv_capacity_tokens:
        raise FleetError(
            f"PRM GPUs hold {cost.kv_capacity_tokens} KV tokens (kv_capacity_tokens, from "
            f"memory_utilization {fleet.spec.memory_utilization}); a problem's scoring needs "
            f"{longest}: the KV capacity cannot hold one problem")
