"""A cocotb testbench that replays a transaction script on any exported top made of streams:
the operator benches (RMSNorm, RoPE, attention, SwiGLU, sampler) use it with vectors and
expected results computed by the integer reference in the launching process.

The script (a JSON file named by the run plan's ``stimulus.script``; the top is the plan's) is a
list of phases; each phase has ``inputs`` (port -> beats to drive, in order) and ``outputs`` (port
-> beats expected, in order). Inputs are driven with random idle cycles and outputs taken with
random backpressure (``idle``, ``backpressure`` in the script); every output beat is checked against
the next expected one of its port (an in-order scoreboard); a phase ends when all its inputs were
taken and all its outputs arrived, so a later phase's beats follow the earlier phase's (e.g. a KV
cache written before queries). A beat is a dict of fields, or a list for an array payload; a field
that is an array is given as a list of its elements.
"""

from __future__ import annotations

import json
from collections import deque

import cocotb
from amaranth.hdl import Shape
from amaranth.lib import data

from heteroreason.sim.flow.export import build_top
from heteroreason.sim.verify.tb.common import TbBase, plan, seeded_rng, stimulus
from heteroreason.sim.verify.tb.streams import StreamSink, StreamSource


def _element_width(layout) -> int | None:
    if isinstance(layout, data.ArrayLayout):
        return Shape.cast(layout.elem_shape).width
    return None


def normalize(beat, layout) -> dict:
    """A JSON beat as the field dict :class:`~heteroreason.sim.verify.tb.streams.Payload` packs."""
    if not isinstance(layout, data.Layout):
        return {"": int(beat)}
    if isinstance(beat, list):
        return dict(enumerate(beat))
    out = {}
    for name, value in beat.items():
        if isinstance(value, list):
            field_layout = data.Layout.cast(layout[name].shape)
            width = _element_width(field_layout)
            packed = 0
            for k, element in enumerate(value):
                packed |= (int(element) & ((1 << width) - 1)) << (k * width)
            value = packed
        out[name] = value
    return out


class ReplayTB(TbBase):
    def __init__(self, dut, *, name: str):
        seed, rng = seeded_rng(name)
        super().__init__(dut, seed=seed, name=name)
        component = build_top(plan().top, plan().params)
        with open(stimulus().script, encoding="utf-8") as f:
            self.script = json.load(f)
        self.layouts = {}
        self.sources, self.sinks = {}, {}
        for path, member, _ in component.signature.flatten(component):
            if len(path) == 2 and path[1] == "payload":
                self.layouts[path[0]] = member.shape
        for port, layout in self.layouts.items():
            flow = component.signature.members[port].flow
            if flow.name == "In":
                self.sources[port] = StreamSource(dut, port, layout, rng=rng,
                                                  idle=self.script.get("idle", 0.0))
            else:
                self.sinks[port] = StreamSink(dut, port, layout, rng=rng,
                                              backpressure=self.script.get("backpressure", 0.0))
        self.expected: dict[str, deque] = {port: deque() for port in self.sinks}
        self.matched = 0

    def idle_inputs(self):
        for source in self.sources.values():
            source.idle_port()
        for port in self.sinks:
            getattr(self.dut, f"{port}__ready").value = 0

    def drive(self):
        for port in (*self.sources.values(), *self.sinks.values()):
            port.drive()

    def observe(self):
        for source in self.sources.values():
            source.observe()
        for port, sink in self.sinks.items():
            beat = sink.observe()
            if beat is None:
                continue
            self.check(bool(self.expected[port]), f"{port}: beat {beat} with none expected")
            want = self.expected[port].popleft()
            self.check(all(beat[k] == v for k, v in want.items()),
                       f"{port}: beat {beat} != expected {want} (after {self.matched} matched)")
            self.matched += 1

    def load_phase(self, phase: dict) -> None:
        for port, beats in phase.get("inputs", {}).items():
            self.check(port in self.sources, f"the script drives {port!r}, not an input stream")
            for beat in beats:
                self.sources[port].queue.append(normalize(beat, self.layouts[port]))
        for port, beats in phase.get("outputs", {}).items():
            self.check(port in self.sinks, f"the script expects {port!r}, not an output stream")
            for beat in beats:
                self.expected[port].append(normalize(beat, self.layouts[port]))

    def idle(self) -> bool:
        return not any(s.busy for s in self.sources.values()) and \
            not any(self.expected.values())


@cocotb.test()
async def replay(dut):
    tb = ReplayTB(dut, name="replay")
    tb.log.info("COCOTB_RANDOM_SEED=%d top=%s phases=%d", tb.seed, plan().top,
                len(tb.script["phases"]))
    await tb.reset()
    limit = int(tb.script.get("cycle_limit", 1_000_000))
    for k, phase in enumerate(tb.script["phases"]):
        tb.load_phase(phase)
        await tb.run_until(tb.idle, limit=limit, what=f"phase {k}")
    for _ in range(8):
        await tb.step()
    tb.check(tb.idle(), "beats left unmatched")
    tb.check(tb.matched > 0, "nothing was checked")
    tb.log.info("%d output beats matched in %d cycles", tb.matched, tb.cycle)
