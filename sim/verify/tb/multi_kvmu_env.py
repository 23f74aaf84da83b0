"""The multi-context KVMU's testbench (:class:`MultiKvmuTB`): drivers, monitors and a
scoreboard against the golden model
:class:`heteroreason.model.spec.golden.multi_kvmu.GoldenMultiKvmu`, used by the tests of
:mod:`heteroreason.sim.verify.tb.multi_kvmu_tb`.

Every cycle: one context, drawn at random, is shown on ``view`` and its whole state compared;
every context's activity bits and the engine's error are compared; the readiness of both
input streams is predicted; a transfer on ``cmd`` or ``alloc`` is applied to the model, with
``write_pos``/``attn_len``/``write_addr`` and ``flush``/``flush_ctx`` checked in its cycle;
every beat on ``submit`` is matched in order against its context's spans, and no context's
submission sees more than ``contexts`` others leave before its own (the round robin: ``contexts -
1`` granted ahead of it and one already in the output register).
"""

from __future__ import annotations

import copy
from collections import Counter, deque

from heteroreason.model.spec.golden.kvmu import KvmuState
from heteroreason.model.spec.golden.multi_kvmu import Activity, GoldenMultiKvmu
from heteroreason.model.spec.protocol import ContextError, Error, Mode, Op, Source
from heteroreason.rtl.multi_kvmu import (
    ContextStateLayout,
    MultiAllocLayout,
    MultiCommandLayout,
    MultiSpanLayout,
    context_id_bits,
)
from heteroreason.sim.verify.tb.common import TbBase, param, seeded_rng
from heteroreason.sim.verify.tb.streams import Payload, StreamSink, StreamSource

__all__ = ["MultiKvmuTB", "prime", "start"]

_MASKS = {"ingesting": Activity.INGESTING, "drafting": Activity.DRAFTING,
          "waiting": Activity.WAITING}


class MultiKvmuTB(TbBase):
    def __init__(self, dut, *, name: str, idle: float = 0.0, backpressure: float = 0.0):
        seed, rng = seeded_rng(name)
        super().__init__(dut, seed=seed, name=name)
        self.contexts = param("contexts")
        self.capacity = param("capacity")
        self.id_limit = 1 << context_id_bits(self.contexts)
        self.rng = rng
        self.golden = GoldenMultiKvmu(contexts=self.contexts, capacity=self.capacity)
        self.cmd = StreamSource(dut, "cmd", MultiCommandLayout(self.contexts, self.capacity),
                                rng=rng, idle=idle)
        self.alloc = StreamSource(dut, "alloc", MultiAllocLayout(self.contexts), rng=rng,
                                  idle=idle)
        self.submit = StreamSink(dut, "submit", MultiSpanLayout(self.contexts, self.capacity),
                                 rng=rng, backpressure=backpressure)
        self.expected: dict[int, deque[tuple[int, int]]] = {
            c: deque() for c in range(self.contexts)}
        self.passed_by: Counter[int] = Counter()  # submissions that left while c's waited
        self.most_passed = 0
        self.events = 0
        self.submits_seen = 0
        self.coverage: Counter[str] = Counter()
        self.errors_seen: Counter[str] = Counter()
        self._view = 0
        self._view_payload = Payload(ContextStateLayout(self.capacity))
        self.force_view: int | None = None
        self.viewed: tuple[KvmuState, ContextError, bool] | None = None
        self.last_outcome = None

    # clocking

    def idle_inputs(self) -> None:
        self.cmd.idle_port()
        self.alloc.idle_port()
        self.dut.submit__ready.value = 0
        self.dut.view.value = 0

    def drive(self) -> None:
        self._view = self.rng.randrange(self.contexts) if self.force_view is None else \
            self.force_view
        self.dut.view.value = self._view
        self.cmd.drive()
        self.alloc.drive()
        self.submit.drive()

    def rtl_state(self) -> tuple[KvmuState, ContextError, bool]:
        """The state of the context on ``view`` this cycle: §4.1's, its context error and
        whether it is initialised."""
        get = self._view_payload.unpack(int(self.dut.view_state.value))
        state = KvmuState(get["valid"], get["curr"], get["ahead"], Mode(get["mode"]),
                          bool(get["pending"]), bool(get["stalled"]), Error(get["error"]))
        return state, ContextError(get["context_error"]), bool(get["initialised"])

    async def state_of(self, ctx: int) -> tuple[KvmuState, ContextError, bool]:
        """Context ``ctx``'s state as the RTL shows it on ``view`` (one idle cycle)."""
        self.force_view = ctx
        await self.step()
        self.force_view = None
        return self.viewed

    def _bit(self, name: str, ctx: int) -> bool:
        return bool((int(getattr(self.dut, name).value) >> ctx) & 1)

    def _applies(self, kind: str, beat: dict):
        if kind == "cmd":
            return lambda g: g.command(beat["ctx"], Op(beat["op"]), beat["pos"])
        return lambda g: g.token(beat["ctx"], Source(beat["source"]), last=bool(beat["last"]),
                                 step_end=bool(beat["step_end"]))

    def _would_wait(self, kind: str, beat: dict) -> bool:
        """Whether the event would submit while its context's submission is still held."""
        ctx = beat["ctx"]
        if ctx >= self.contexts or not self._bit("holding", ctx):
            return False
        outcome = self._applies(kind, beat)(copy.deepcopy(self.golden))
        return outcome.outcome.submitted is not None

    def observe(self) -> None:
        d, g = self.dut, self.golden
        state, ctx_error, live = self.viewed = self.rtl_state()
        v = self._view
        self.check((state, ctx_error, live) == (g.state(v), g.error(v), g.initialised(v)),
                   f"context {v}: RTL {state} {ctx_error.name} initialised={live} differs from "
                   f"the model {g.state(v)} {g.error(v).name} initialised={g.initialised(v)}")
        masks = {name: int(getattr(d, name).value) for name in ("initialised", *_MASKS)}
        for c in range(self.contexts):
            activity = g.activity(c)
            self.check(bool(masks["initialised"] >> c & 1) == g.initialised(c),
                       f"context {c}: initialised bit differs from the model")
            for mask, meant in _MASKS.items():
                self.check(bool(masks[mask] >> c & 1) == (activity is meant),
                           f"context {c}: {mask} bit differs from the model ({activity.name})")
        self.check(ContextError(int(d.context_error.value)) == g.context_error,
                   f"engine error {int(d.context_error.value)} != {g.context_error.name}")
        if g.bad_context is not None:
            self.check(int(d.bad_context.value) == g.bad_context, "bad_context differs")

        cmd_beat, alloc_beat = self.cmd.offered, self.alloc.offered
        if cmd_beat is not None:
            expect = alloc_beat is None and not self._would_wait("cmd", cmd_beat)
            self.check(bool(int(d.cmd__ready.value)) == expect,
                       f"cmd.ready should be {int(expect)} for {cmd_beat}")
        if alloc_beat is not None:
            expect = not self._would_wait("alloc", alloc_beat)
            self.check(bool(int(d.alloc__ready.value)) == expect,
                       f"alloc.ready should be {int(expect)} for {alloc_beat}")

        holding = [c for c in range(self.contexts) if self._bit("holding", c)]
        cmd_fired, alloc_fired = self.cmd.observe(), self.alloc.observe()
        flush = bool(int(d.flush.value))
        if alloc_fired is not None:
            outcome = self._applies("alloc", alloc_fired)(g)
            if outcome.write_address is not None:
                pos = outcome.outcome.write_pos
                self.check((int(d.write_pos.value), int(d.attn_len.value),
                            int(d.write_addr.value)) == (pos, pos + 1, outcome.write_address),
                           f"token {alloc_fired}: write_pos/attn_len/write_addr "
                           f"{int(d.write_pos.value)}/{int(d.attn_len.value)}/"
                           f"{int(d.write_addr.value)}, the model {pos} at {outcome.write_address}")
            self._record("alloc", alloc_fired, outcome)
        if cmd_fired is not None:
            outcome = self._applies("cmd", cmd_fired)(g)
            self._record("cmd", cmd_fired, outcome)
            flushed = outcome.outcome.flushed
            self.check(flush == flushed, f"flush={int(flush)} after {cmd_fired}")
            self.check(not flushed or int(d.flush_ctx.value) == cmd_fired["ctx"], "flush_ctx")
        else:
            self.check(not flush, "flush without a command")

        span = self.submit.observe()
        if span is not None:
            c = span["ctx"]
            self.check(c < self.contexts and bool(self.expected[c]),
                       f"unexpected submission {span}: the model submitted nothing there")
            expect = self.expected[c].popleft()
            self.check((span["start"], span["end"]) == expect,
                       f"context {c}: submitted span {span} != golden {expect}")
            self.submits_seen += 1
            self.passed_by[c] = 0
            for other in holding:
                if other != c:
                    self.passed_by[other] += 1
                    self.most_passed = max(self.most_passed, self.passed_by[other])
                    self.check(self.passed_by[other] <= self.contexts,
                               f"context {other}'s submission waited behind "
                               f"{self.passed_by[other]} others")

    def _record(self, kind: str, beat: dict, outcome) -> None:
        self.events += 1
        self.last_outcome = outcome
        ctx = beat["ctx"]
        if outcome.context_error is not ContextError.NONE:
            self.errors_seen[outcome.context_error.name] += 1
        elif outcome.outcome.error is not Error.NONE:
            self.errors_seen[outcome.outcome.error.name] += 1
        else:
            label = Op(beat["op"]).name if kind == "cmd" else Source(beat["source"]).name
            if outcome.outcome.submitted is not None:
                label += "+submit"
            self.coverage[label] += 1
        if outcome.outcome.submitted is not None:
            self.expected[ctx].append(outcome.outcome.submitted)

    # transaction-level helpers for directed tests

    async def command(self, ctx: int, op: Op, pos: int = 0):
        self.cmd.send(ctx=ctx, op=op, pos=pos)
        return await self._complete(self.cmd, f"command {op.name} to {ctx}")

    async def token(self, ctx: int, source: Source, *, last: bool = False,
                    step_end: bool = False):
        self.alloc.send(ctx=ctx, source=source, last=int(last), step_end=int(step_end))
        return await self._complete(self.alloc, f"{source.name} token of {ctx}")

    async def _complete(self, source: StreamSource, what: str):
        before = self.events
        await self.run_until(lambda: not source.busy, limit=1000, what=what)
        await self.step()  # the model is compared with the updated registers
        self.check(self.events > before, f"{what}: no event recorded")
        return self.last_outcome

    async def drain(self) -> None:
        """Stop offering, let every submission leave, and check nothing is left unmatched."""
        self.cmd.supplier = self.alloc.supplier = None
        await self.run_until(lambda: not (self.cmd.busy or self.alloc.busy),
                             limit=10000, what="input streams draining")
        self.submit.backpressure = 0.0
        await self.run_until(lambda: not any(self.expected.values()), limit=100 * self.contexts,
                             what="pending submissions leaving")
        for _ in range(3):
            await self.step()
        self.check(not int(self.dut.submit__valid.value), "a submission the model never made")


async def start(dut, name: str, **kwargs) -> MultiKvmuTB:
    tb = MultiKvmuTB(dut, name=name, **kwargs)
    tb.log.info("%s: seed=%d contexts=%d capacity=%d", name, tb.seed, tb.contexts, tb.capacity)
    await tb.reset()
    return tb


async def prime(tb: MultiKvmuTB, ctx: int, pos: int, host_tokens: int) -> None:
    """INIT(pos) to ``ctx``, then ``host_tokens`` host tokens, the last one marked."""
    await tb.command(ctx, Op.INIT, pos)
    for i in range(host_tokens):
        await tb.token(ctx, Source.HOST, last=i == host_tokens - 1)
