# amaranth: UnusedElaboratable=no
"""The KV rows kept aside in Amaranth's simulator: random writes, a stand-in for the attention
that takes each write's position at random and returns its address after a random delay, in
order, and a memory port that takes the stores at random; every store is a write's address
with that write's rows, in the writes' order, none lost or doubled."""

import random
from collections import deque

import pytest
from amaranth.hdl import signed
from amaranth.lib import data
from amaranth.sim import Simulator

from heteroreason.rtl.decoder.kv_aside import KvRowsAside, store_layout, without_rows

ROW = data.ArrayLayout(signed(8), 4)
WRITE = data.StructLayout({"layer": range(3), "pos": range(64), "k": ROW, "v": ROW})


def address(layer, pos):
    """The stand-in attention's address of a write (any function of its position will do)."""
    return layer * 64 + pos


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_each_store_is_a_writes_address_with_its_rows_in_order(seed):
    rng = random.Random(seed)
    dut = KvRowsAside(write_layout=WRITE, addr_shape=range(3 * 64))
    writes = [(rng.randrange(3), rng.randrange(64), [rng.randrange(-128, 128) for _ in range(4)],
               [rng.randrange(-128, 128) for _ in range(4)]) for _ in range(60)]
    stores = []
    sim = Simulator(dut)
    sim.add_clock(1e-6)

    async def bench(ctx):
        pending = deque()  # the stand-in attention: (cycle the address is due, address)
        sent, cycle = 0, 0
        while len(stores) < len(writes):
            assert cycle < 5000, f"seed {seed}: stuck with {len(stores)} stores"
            offer = sent < len(writes) and rng.random() < 0.7
            if offer:
                layer, pos, k, v = writes[sent]
                ctx.set(dut.write.payload, {"layer": layer, "pos": pos, "k": k, "v": v})
            ctx.set(dut.write.valid, offer)
            meta_ready = rng.random() < 0.6
            ctx.set(dut.meta.ready, meta_ready)
            due = pending and pending[0][0] <= cycle
            if due:
                ctx.set(dut.addr.payload.addr, pending[0][1])
            ctx.set(dut.addr.valid, bool(due))
            ctx.set(dut.store.ready, rng.random() < 0.5)
            await ctx.delay(1e-8)
            if ctx.get(dut.meta.valid) and meta_ready:
                meta = ctx.get(dut.meta.payload)
                assert offer and ctx.get(dut.write.ready), f"seed {seed}: meta without a write"
                assert (meta["layer"], meta["pos"]) == writes[sent][:2], f"seed {seed}"
                pending.append((cycle + rng.randrange(1, 12), address(meta["layer"],
                                                                      meta["pos"])))
                sent += 1
            else:
                assert not (offer and ctx.get(dut.write.ready)), f"seed {seed}: write lost"
            if ctx.get(dut.store.valid) and ctx.get(dut.store.ready):
                s = ctx.get(dut.store.payload)
                stores.append((s["addr"], list(s["k"]), list(s["v"])))
                assert due and ctx.get(dut.addr.ready), f"seed {seed}"
                pending.popleft()
            else:
                assert not (due and ctx.get(dut.addr.ready)), f"seed {seed}: address lost"
            await ctx.tick()
            cycle += 1

    sim.add_testbench(bench)
    sim.run()
    assert stores == [(address(layer, pos), k, v) for layer, pos, k, v in writes], f"seed {seed}"


def test_layouts_and_refusals():
    assert dict(without_rows(WRITE)).keys() == {"layer", "pos"}
    assert dict(store_layout(WRITE, range(192))).keys() == {"addr", "k", "v"}
    with pytest.raises(TypeError, match=r"^write_layout must have fields 'k' and 'v'"):
        KvRowsAside(write_layout=without_rows(WRITE), addr_shape=range(8))
    with pytest.raises(TypeError, match="depth"):
        KvRowsAside(write_layout=WRITE, addr_shape=range(8), depth=0)
