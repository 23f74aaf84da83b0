"""Formal proof that the multi-context KVMU keeps its contexts apart, with SymbiYosys.

The harness drives every input freely (any command or token to any id, in range or not, any
backpressure and reset in any cycle) and asserts, in every reachable state:

* **isolation**: a context that the cycle's event did not address (the command's or the token's
  id is another, or out of range, or no event was taken) keeps its pointers, mode, flags, §4.1
  error, context error and initialised bit unchanged; which context an event addresses is
  judged here from the id on the stream (``id == i``), not from the unit's own routing;
* one event a cycle: a command and a token are never both taken;
* each context's §4.1 invariants (``valid <= curr <= ahead <= capacity``, a pending step is
  non-empty, a stall has a pending step and a non-empty step ahead, nothing is pending while
  host tokens are ingested) and that a context never
  initialised is at reset (every pointer 0, Initialization, nothing pending);
* the engine's context error, once set, holds until a CLEAR_ERROR to a context in range.

:func:`prove_contexts` runs k-induction (``mode prove``): a pass is a proof for every reachable
state.
"""

from __future__ import annotations

from pathlib import Path

from amaranth.back import rtlil
from amaranth.hdl import Assert, Module, ResetSignal, Signal
from amaranth.lib import stream, wiring
from amaranth.lib.wiring import In, Out

from heteroreason.model.spec.protocol import Mode, Op
from heteroreason.rtl.compare import equals, is_zero
from heteroreason.rtl.multi_kvmu import (
    MultiAllocLayout,
    MultiCommandLayout,
    MultiKvmu,
    MultiSpanLayout,
    context_id_bits,
)
from heteroreason.sim.flow.formal import FormalResult, check_run, run_sby

__all__ = ["MultiKvmuFormalHarness", "prove_contexts"]


class MultiKvmuFormalHarness(wiring.Component):
    """Wraps a :class:`~heteroreason.rtl.multi_kvmu.MultiKvmu` with the assertions listed in
    the module."""

    def __init__(self, dut: MultiKvmu):
        self._dut = dut
        n, cap = dut.contexts, dut.capacity
        super().__init__({
            "cmd": In(stream.Signature(MultiCommandLayout(n, cap))),
            "alloc": In(stream.Signature(MultiAllocLayout(n))),
            "submit": Out(stream.Signature(MultiSpanLayout(n, cap))),
            "view": In(context_id_bits(n)),
        })

    def elaborate(self, platform):
        m = Module()
        m.submodules.dut = dut = self._dut
        cap = dut.capacity
        wiring.connect(m, wiring.flipped(self.cmd), dut.cmd)
        wiring.connect(m, wiring.flipped(self.alloc), dut.alloc)
        wiring.connect(m, dut.submit, wiring.flipped(self.submit))
        m.d.comb += dut.view.eq(self.view)

        cmd_fire = dut.cmd.valid & dut.cmd.ready
        tok_fire = dut.alloc.valid & dut.alloc.ready
        m.d.comb += Assert(~(cmd_fire & tok_fire), "a command and a token taken together")

        past_rst = Signal(init=1)  # in reset last cycle (the initial state counts as reset)
        m.d.sync += past_rst.eq(ResetSignal())
        checked = ~past_rst

        for i, kvmu in enumerate(dut.kvmus):
            valid, curr, ahead = kvmu.valid_ptr, kvmu.curr_ptr, kvmu.ahead_ptr
            live = dut.initialised[i]
            host_mode = equals(kvmu.mode, Mode.INITIALIZATION) | equals(kvmu.mode, Mode.ROLLBACK)
            m.d.comb += [
                Assert(valid <= curr, f"context {i}: valid <= curr"),
                Assert(curr <= ahead, f"context {i}: curr <= ahead"),
                Assert(ahead <= cap, f"context {i}: ahead <= capacity"),
                Assert(~kvmu.pending | (valid < curr), f"context {i}: a pending step is empty"),
                Assert(kvmu.pending | (valid == curr), f"context {i}: valid != curr, none pending"),
                Assert(~kvmu.stalled | (kvmu.pending & (curr < ahead)),
                       f"context {i}: a stall without a pending step or a step ahead"),
                Assert(~host_mode | ~kvmu.pending, f"context {i}: pending while ingesting"),
                Assert(live | (is_zero(ahead) & equals(kvmu.mode, Mode.INITIALIZATION)
                               & ~kvmu.pending), f"context {i}: never initialised, not at reset"),
            ]
            touched = (cmd_fire & (dut.cmd.payload.ctx == i)) | \
                (tok_fire & (dut.alloc.payload.ctx == i))
            state = [valid, curr, ahead, kvmu.mode, kvmu.pending, kvmu.stalled, kvmu.error,
                     dut.context_errors[i], live]
            past = [Signal.like(s, name=f"past_{i}_{k}") for k, s in enumerate(state)]
            past_touched = Signal(name=f"past_touched_{i}")
            m.d.sync += [p.eq(s) for p, s in zip(past, state, strict=True)]
            m.d.sync += past_touched.eq(touched)
            with m.If(checked & ~past_touched):
                for p, s in zip(past, state, strict=True):
                    m.d.comb += Assert(s == p, "isolation: another context's event changed it")

        clear = cmd_fire & equals(dut.cmd.payload.op, Op.CLEAR_ERROR) & \
            (dut.cmd.payload.ctx < dut.contexts)
        past_clear = Signal()
        past_error = Signal.like(dut.context_error, name="past_engine_error")
        past_bad = Signal.like(dut.bad_context, name="past_bad_context")
        m.d.sync += [past_clear.eq(clear), past_error.eq(dut.context_error),
                     past_bad.eq(dut.bad_context)]
        with m.If(checked & ~past_clear & past_error.any()):
            m.d.comb += [
                Assert(dut.context_error == past_error, "the engine's error changed without CLEAR"),
                Assert(dut.bad_context == past_bad, "the first bad id changed without CLEAR"),
            ]
        return m


def prove_contexts(dut: MultiKvmu | None = None, *, contexts: int = 3, capacity: int = 6,
                   depth: int = 12, mode: str = "prove",
                   work_dir: Path | str = "build/formal/multi_kvmu",
                   timeout_s: float = 600) -> FormalResult:
    """Run SymbiYosys on the harness around ``dut`` (a fresh ``MultiKvmu(contexts=...,
    capacity=...)`` if None); ``mode`` ``prove`` (k-induction of length ``depth``) or ``bmc``."""
    check_run(mode, depth)
    dut = dut if dut is not None else MultiKvmu(contexts=contexts, capacity=capacity)
    text = rtlil.convert(MultiKvmuFormalHarness(dut), name="multi_kvmu_formal",
                         platform="formal")
    return run_sby(text, top="multi_kvmu_formal", mode=mode, depth=depth,
                   work_dir=Path(work_dir), timeout_s=timeout_s)
