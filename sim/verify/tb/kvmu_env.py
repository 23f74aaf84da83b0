"""The KVMU's testbench (:class:`KvmuTB`): its drivers, its monitor and scoreboard against the
golden model :class:`heteroreason.model.spec.golden.kvmu.GoldenKvmu`, used by the tests of
:mod:`heteroreason.sim.verify.tb.kvmu_tb`."""

from __future__ import annotations

import copy
from collections import Counter, deque

from heteroreason.model.spec.golden.kvmu import GoldenKvmu, KvmuState
from heteroreason.model.spec.protocol import Error, Mode, Op, Source
from heteroreason.rtl.kvmu import AllocLayout, CommandLayout, SpanLayout
from heteroreason.sim.verify.tb.common import TbBase, param, seeded_rng
from heteroreason.sim.verify.tb.streams import StreamSink, StreamSource

__all__ = ["KvmuTB", "prime", "start"]


class KvmuTB(TbBase):
    def __init__(self, dut, *, name: str, idle: float = 0.0, backpressure: float = 0.0):
        seed, rng = seeded_rng(name)
        super().__init__(dut, seed=seed, name=name)
        self.capacity = param("capacity")
        self.rng = rng
        self.golden = GoldenKvmu(capacity=self.capacity)
        self.cmd = StreamSource(dut, "cmd", CommandLayout(self.capacity), rng=rng, idle=idle)
        self.alloc = StreamSource(dut, "alloc", AllocLayout, rng=rng, idle=idle)
        self.submit = StreamSink(dut, "submit", SpanLayout(self.capacity), rng=rng,
                                 backpressure=backpressure)
        self.expected_submits: deque[tuple[int, int]] = deque()
        self.outcomes = []
        self.events = 0
        self.errors_seen: Counter[Error] = Counter()
        self.submits_seen = 0
        self.coverage: Counter[str] = Counter()

    # clocking

    def idle_inputs(self) -> None:
        self.cmd.idle_port()
        self.alloc.idle_port()
        self.dut.submit__ready.value = 0

    def drive(self) -> None:
        self.cmd.drive()
        self.alloc.drive()
        self.submit.drive()

    def rtl_state(self) -> KvmuState:
        d = self.dut
        return KvmuState(int(d.valid_ptr.value), int(d.curr_ptr.value), int(d.ahead_ptr.value),
                         Mode(int(d.mode.value)), bool(int(d.pending.value)),
                         bool(int(d.stalled.value)), Error(int(d.error.value)))

    def _would_submit(self, apply) -> bool:
        return apply(copy.deepcopy(self.golden)).submitted is not None

    @staticmethod
    def _apply_cmd(beat):
        return lambda g: g.command(Op(beat["op"]), beat["pos"])

    @staticmethod
    def _apply_alloc(beat):
        return lambda g: g.token(Source(beat["source"]), last=bool(beat["last"]),
                                 step_end=bool(beat["step_end"]))

    def observe(self) -> None:
        d = self.dut
        state = self.rtl_state()
        self.check(state == self.golden.state(),
                   f"RTL state {state} differs from the golden model {self.golden.state()}")

        submit_busy = bool(int(d.submit__valid.value))
        cmd_beat, alloc_beat = self.cmd.offered, self.alloc.offered
        if cmd_beat is not None:
            expect = alloc_beat is None and not (
                submit_busy and self._would_submit(self._apply_cmd(cmd_beat)))
            self.check(bool(int(d.cmd__ready.value)) == expect,
                       f"cmd.ready should be {int(expect)} for {cmd_beat}")
        if alloc_beat is not None:
            expect = not (submit_busy and self._would_submit(self._apply_alloc(alloc_beat)))
            self.check(bool(int(d.alloc__ready.value)) == expect,
                       f"alloc.ready should be {int(expect)} for {alloc_beat}")

        cmd_fired = self.cmd.observe()
        alloc_fired = self.alloc.observe()
        flush = bool(int(d.flush.value))
        if alloc_fired is not None:
            self.check(int(d.write_pos.value) == state.ahead,
                       f"write_pos {int(d.write_pos.value)} != ahead {state.ahead}")
            self.check(int(d.attn_len.value) == state.ahead + 1, "attn_len != ahead + 1")
            self._record(("alloc", alloc_fired), self._apply_alloc(alloc_fired)(self.golden))
        if cmd_fired is not None:
            outcome = self._apply_cmd(cmd_fired)(self.golden)
            self._record(("cmd", cmd_fired), outcome)
            self.check(flush == outcome.flushed, f"flush={int(flush)} after {cmd_fired}")
        else:
            self.check(not flush, "flush without a command")

        span = self.submit.observe()
        if span is not None:
            self.check(bool(self.expected_submits),
                       f"unexpected submission {span}: the model submitted nothing")
            expect = self.expected_submits.popleft()
            self.check((span["start"], span["end"]) == expect,
                       f"submitted span {span} != golden {expect}")
            self.submits_seen += 1

    def _record(self, event, outcome) -> None:
        self.events += 1
        self.outcomes.append((event, outcome))
        kind, beat = event
        if outcome.error == Error.NONE:
            if kind == "cmd":
                label = Op(beat["op"]).name
                if outcome.submitted is not None:
                    label += "+submit"
            else:
                label = Source(beat["source"]).name
                if beat["last"] and beat["source"] == Source.HOST:
                    label += "+last"
                if beat["step_end"] and beat["source"] == Source.DRAFT:
                    label += "+submit" if outcome.submitted else "+stall"
            self.coverage[label] += 1
        if outcome.error != Error.NONE:
            self.errors_seen[outcome.error] += 1
        if outcome.submitted is not None:
            self.expected_submits.append(outcome.submitted)

    # transaction-level helpers for directed tests

    async def command(self, op: Op, pos: int = 0):
        self.cmd.send(op=op, pos=pos)
        return await self._complete(self.cmd, f"command {op.name}")

    async def token(self, source: Source, *, last: bool = False, step_end: bool = False):
        self.alloc.send(source=source, last=int(last), step_end=int(step_end))
        return await self._complete(self.alloc, f"{source.name} token")

    async def _complete(self, source: StreamSource, what: str):
        await self.run_until(lambda: not source.busy, limit=1000, what=what)
        await self.step()  # the model is compared with the updated registers
        return self.outcomes[-1][1]

    async def drain(self) -> None:
        """Stop offering, let every submission leave, and check nothing is left unmatched."""
        self.cmd.supplier = self.alloc.supplier = None
        await self.run_until(lambda: not (self.cmd.busy or self.alloc.busy),
                             limit=10000, what="input streams draining")
        self.submit.backpressure = 0.0
        await self.run_until(lambda: not self.expected_submits, limit=100,
                             what="pending submissions leaving")
        for _ in range(3):
            await self.step()
        self.check(not self.expected_submits, f"unmatched submissions {self.expected_submits}")
        self.check(not int(self.dut.submit__valid.value), "a submission the model never made")


async def start(dut, name: str, **kwargs) -> KvmuTB:
    tb = KvmuTB(dut, name=name, **kwargs)
    tb.log.info("%s: seed=%d capacity=%d", name, tb.seed, tb.capacity)
    await tb.reset()
    return tb


async def prime(tb: KvmuTB, pos: int, host_tokens: int) -> None:
    """INIT(pos), then ``host_tokens`` host tokens, the last one marked: drafting starts."""
    await tb.command(Op.INIT, pos)
    for i in range(host_tokens):
        await tb.token(Source.HOST, last=i == host_tokens - 1)
