# amaranth: UnusedElaboratable=no
"""A shared crossing's two halves in Amaranth's simulator: each way's beats once and in order
under random idles and backpressure, whatever the other ways do; a way whose consumer stops
never holds another back; a beat a cycle over the ways, fairly; the latency of a crossing; in
the Verilog, every wire of the link a register's output landing in a register."""

import random
import shutil

import pytest
from amaranth.hdl import Module
from amaranth.lib import stream, wiring
from amaranth.lib.wiring import In, Out
from amaranth.sim import Simulator

from heteroreason.rtl.decoder.crossing_shared import (
    SHARED_LATENCY,
    SHARED_ROUND_TRIP,
    SharedCrossingReceiver,
    SharedCrossingSender,
)


class SharedPair(wiring.Component):
    """A shared sender and receiver joined by their link."""

    def __init__(self, *, width, ways, depth):
        self._width, self._ways, self._depth = width, ways, depth
        super().__init__({"i": In(stream.Signature(width)).array(ways),
                          "o": Out(stream.Signature(width)).array(ways)})

    def elaborate(self, platform):
        m = Module()
        args = {"shape": self._width, "ways": self._ways, "depth": self._depth}
        m.submodules.tx = tx = SharedCrossingSender(**args)
        m.submodules.rx = rx = SharedCrossingReceiver(**args)
        wiring.connect(m, tx.link, rx.link)
        for w in range(self._ways):
            wiring.connect(m, wiring.flipped(self.i[w]), tx.streams[w])
            wiring.connect(m, rx.streams[w], wiring.flipped(self.o[w]))
        return m


def run(pair, cycles, offers, accepts, seed):
    """Drive ``pair`` for ``cycles``: way ``w`` offers a new beat with probability
    ``offers[w]`` and takes one with ``accepts[w]``; return each way's beats sent and
    received, with their cycles."""
    rng = random.Random(seed)
    ways = len(offers)
    sent = [[] for _ in range(ways)]
    got = [[] for _ in range(ways)]
    sim = Simulator(pair)
    sim.add_clock(1e-6)

    async def bench(ctx):
        pending = [None] * ways
        for cycle in range(cycles):
            ready = []
            for w in range(ways):
                if pending[w] is None and rng.random() < offers[w]:
                    pending[w] = rng.getrandbits(len(pair.i[w].payload))
                ctx.set(pair.i[w].valid, pending[w] is not None)
                ctx.set(pair.i[w].payload, pending[w] or 0)
                ready.append(rng.random() < accepts[w])
                ctx.set(pair.o[w].ready, ready[w])
            for w in range(ways):
                if ctx.get(pair.o[w].valid) and ready[w]:
                    got[w].append((cycle, ctx.get(pair.o[w].payload)))
                if pending[w] is not None and ctx.get(pair.i[w].ready):
                    sent[w].append((cycle, pending[w]))
                    pending[w] = None
            await ctx.tick()

    sim.add_testbench(bench)
    sim.run()
    return sent, got


@pytest.mark.parametrize(("seed", "ways", "depth", "offers", "accepts"), [
    (1, 2, 8, (0.9, 0.9), (0.3, 0.8)),
    (2, 2, 8, (0.3, 0.8), (0.9, 0.2)),
    (3, 3, 2, (0.7, 0.5, 0.9), (0.7, 0.9, 0.4)),
    (4, 2, 1, (1, 1), (1, 1)),
    (5, 4, 6, (0.5, 1, 0.2, 0.8), (1, 0.5, 0.6, 0.9)),
])
def test_every_beat_of_every_way_once_in_order(seed, ways, depth, offers, accepts):
    sent, got = run(SharedPair(width=12, ways=ways, depth=depth), 900, offers, accepts, seed)
    for w in range(ways):
        assert len(got[w]) > 40, f"seed {seed}: too few beats went through way {w}"
        assert [v for _, v in got[w]] == [v for _, v in sent[w]][:len(got[w])], \
            f"seed {seed}, way {w}"
        assert len(sent[w]) - len(got[w]) <= depth, f"seed {seed}: way {w} over its credits"


def test_a_stopped_way_holds_no_other_back():
    """Way 0's consumer never takes a beat: it keeps its credits' worth, and way 1 still runs
    a beat a cycle once its credits come round."""
    sent, got = run(SharedPair(width=8, ways=2, depth=SHARED_ROUND_TRIP), 300, (1, 1), (0, 1),
                    7)
    assert len(sent[0]) == SHARED_ROUND_TRIP and got[0] == []
    steady = [c for c, _ in sent[1][2 * SHARED_ROUND_TRIP:]]
    assert steady == list(range(steady[0], steady[0] + len(steady)))


def test_latency_fairness_and_throughput():
    """Both ways always offered and taken: a beat a cycle in all, the ways taken in turn; the
    first beat is out SHARED_LATENCY cycles after it was taken (a crossing's, and the
    sender's landing register)."""
    sent, got = run(SharedPair(width=8, ways=2, depth=SHARED_ROUND_TRIP), 200, (1, 1), (1, 1),
                    0)
    first = min(sent[0][0][0], sent[1][0][0])
    arrived = min(got[0][0][0], got[1][0][0])
    assert arrived - first == SHARED_LATENCY
    cycles = sorted(c for way in sent for c, _ in way)
    assert cycles == list(range(cycles[0], cycles[0] + len(cycles)))
    assert abs(len(sent[0]) - len(sent[1])) <= 1
    # one way alone runs a beat a cycle too
    sent, _ = run(SharedPair(width=8, ways=2, depth=SHARED_ROUND_TRIP), 200, (0, 1), (1, 1), 0)
    steady = [c for c, _ in sent[1][SHARED_ROUND_TRIP:]]
    assert steady == list(range(steady[0], steady[0] + len(steady)))


@pytest.mark.skipif(shutil.which("yosys") is None, reason="no native yosys")
def test_the_link_is_registered_on_both_sides(tmp_path):
    """Synthesized for UltraScale+ with the hierarchy kept (the fit's own reading): every bit
    between the two halves comes from a flip-flop and lands only in flip-flops."""
    from amaranth.back import rtlil

    from heteroreason.sim.flow.hierarchy import synthesize_hierarchy

    (tmp_path / "pair.il").write_text(rtlil.convert(SharedPair(width=16, ways=2, depth=8),
                                                    name="pair", emit_src=False))
    h = synthesize_hierarchy(tmp_path / "pair.il", "pair")
    between = {link: n for link, n in h.links.items() if link.units == {"tx", "rx"}}
    assert sum(between.values()) == 16 + 1 + 1 + 2  # the payload, valid, way, two credits
    for link in between:
        assert link.driver_registered and not link.unregistered_loads, link


@pytest.mark.skipif(shutil.which("yosys") is None, reason="no native yosys")
def test_no_net_of_a_wide_link_is_over_the_fanout_bound(tmp_path):
    """A payload wider than MAX_FANOUT: the payload register's select reaches each group of
    GROUP_BITS from a registered copy of its own (one select would drive 2,100 multiplexers),
    and the streams' ``valid`` reaches none of the payload's logic."""
    from amaranth.back import rtlil

    from heteroreason.rtl.decoder.pipeline import MAX_FANOUT
    from heteroreason.sim.flow.hierarchy import synthesize_hierarchy

    (tmp_path / "pair.il").write_text(rtlil.convert(SharedPair(width=2_100, ways=2, depth=2),
                                                    name="pair", emit_src=False))
    h = synthesize_hierarchy(tmp_path / "pair.il", "pair")
    assert h.largest_nets[0].loads <= MAX_FANOUT, h.largest_nets[0]
    assert h.largest_nets[0].loads > 1_000  # a group's select: the copies were not merged
    valids = [n for n in h.largest_nets if n.net.endswith("valid")]
    assert all(n.loads < 100 for n in valids), valids


@pytest.mark.parametrize("cls", [SharedCrossingSender, SharedCrossingReceiver])
@pytest.mark.parametrize(("args", "message"), [
    ({"ways": 1}, r"^ways must be an integer in \[2, 8\], not 1$"),
    ({"ways": 9}, r"^ways must be an integer in \[2, 8\], not 9$"),
    ({"depth": 0}, r"^depth must be an integer in \[1, "),
])
def test_bad_parameters_are_refused(cls, args, message):
    with pytest.raises(TypeError, match=message):
        cls(shape=8, **args)
