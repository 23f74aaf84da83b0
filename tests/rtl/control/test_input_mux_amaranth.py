# amaranth: UnusedElaboratable=no
"""Fast feedback: the input MUX in Amaranth's simulator against the golden selection rule."""

import random

import pytest
from amaranth.sim import Simulator

from heteroreason.model.spec.golden.input_mux import GoldenInputMux, Selection, select_source
from heteroreason.model.spec.protocol import Mode, Source
from heteroreason.rtl.input_mux import InputMux as InputMuxRtl


@pytest.mark.parametrize("kwargs, message", [
    ({"token_width": 0}, r"^token_width must be an integer in \[1, 32\], not 0$"),
    ({"token_width": 8, "max_in_flight": 0},
     r"^max_in_flight must be an integer in \[1, 1,048,576\], not 0$"),
    ({"token_width": "8"}, r"^token_width must be an integer in \[1, 32\], not '8'$"),
])
def test_parameters_are_validated(kwargs, message):
    with pytest.raises(TypeError, match=message):
        InputMuxRtl(**kwargs)


@pytest.mark.parametrize("seed", [21, 22])
def test_random_traffic_matches_golden(seed):
    rng = random.Random(seed)
    dut = InputMuxRtl(token_width=8, max_in_flight=3)
    golden = GoldenInputMux(max_in_flight=3)
    seen = {"host": 0, "draft": 0, "squash": 0, "flush": 0}

    async def bench(ctx):
        for cycle in range(4000):
            mode = rng.choice(list(Mode))
            stalled = rng.random() < 0.2
            flush = rng.random() < 0.05
            host = {"valid": rng.random() < 0.5, "token": rng.randrange(256),
                    "last": rng.random() < 0.3}
            sample = {"valid": rng.random() < 0.6, "token": rng.randrange(256),
                      "step_end": rng.random() < 0.3}
            out_ready = rng.random() < 0.7
            ctx.set(dut.mode, mode)
            ctx.set(dut.stalled, stalled)
            ctx.set(dut.flush, flush)
            ctx.set(dut.host.valid, host["valid"])
            ctx.set(dut.host.payload.token, host["token"])
            ctx.set(dut.host.payload.last, host["last"])
            ctx.set(dut.sampler.valid, sample["valid"])
            ctx.set(dut.sampler.payload.token, sample["token"])
            ctx.set(dut.sampler.payload.step_end, sample["step_end"])
            ctx.set(dut.out.ready, out_ready)

            where = f"seed={seed} cycle={cycle}"
            selection = select_source(mode, stalled=stalled)
            squashing = golden.stale > 0
            want = None
            if selection == Selection.HOST and host["valid"] and (
                    not host["last"] or golden.can_admit_kept()):
                want = (host["token"], Source.HOST, host["last"], False, host["last"])
            elif (selection == Selection.SAMPLER and not squashing and sample["valid"]
                  and golden.in_flight > 0):
                want = (sample["token"], Source.DRAFT, False, sample["step_end"], True)
            assert bool(ctx.get(dut.out.valid)) == (want is not None), where
            if want is not None:
                p = dut.out.payload
                got = (ctx.get(p.token), Source(ctx.get(p.source)), bool(ctx.get(p.last)),
                       bool(ctx.get(p.step_end)), bool(ctx.get(p.keep_logits)))
                assert got == want, where
            sample_taken = sample["valid"] and (
                (squashing) or (want is not None and want[1] == Source.DRAFT and out_ready))
            assert bool(ctx.get(dut.sampler.ready) and sample["valid"]) == sample_taken, where
            assert bool(ctx.get(dut.squash)) == (squashing and sample["valid"]), where
            host_taken = want is not None and want[1] == Source.HOST and out_ready
            assert bool(ctx.get(dut.host.ready) and host["valid"]) == host_taken, where

            if sample_taken:
                stale = golden.take_sample()
                assert stale == squashing, where
                seen["squash" if stale else "draft"] += 1
            if want is not None and out_ready:
                golden.admit(keep_logits=want[4])
                seen["host"] += want[1] == Source.HOST
            if flush:
                golden.flush()
                seen["flush"] += 1
            await ctx.tick()
            assert ctx.get(dut.in_flight) == golden.in_flight, where

    sim = Simulator(dut)
    sim.add_clock(1e-8)
    sim.add_testbench(bench)
    sim.run_until(1e-8 * 5000)
    assert min(seen.values()) > 20, seen
