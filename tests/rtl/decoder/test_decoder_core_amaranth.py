# amaranth: UnusedElaboratable=no
"""The decoder core end to end in Amaranth's simulator: ingest a prompt, then draft greedily;
every sampled token equals the integer reference's. (The longer end-to-end runs — stalls,
rollback, other parallelism, the DraftEngine's host scenarios — run on Verilator:
``tests/sim/verify/test_decoder_cocotb.py``.)"""

import random

import numpy as np
import pytest
from amaranth.sim import Simulator

from heteroreason.model.numerics.qwen2_config import qwen2_config
from heteroreason.model.numerics.qwen2_float import random_weights
from heteroreason.model.numerics.qwen2_int8 import IntDecoder, activation_scales, quantize
from heteroreason.rtl.decoder.core import DecoderCore
from heteroreason.rtl.decoder.params import DecoderParams
from heteroreason.sim.verify.hbm_model import hbm_processes


def run_core(model, lanes, stall, schedule, *, seed, latency=0, **options):
    """Feed ``schedule`` — (token, pos, keep) for host tokens, or ``"draft"`` to feed back the
    last sample at the next position — and return the sampled tokens. ``options`` go to the
    core (stream width, buffer depths, heads in parallel)."""
    core = DecoderCore(model=model, params=DecoderParams(lanes, delimiters=(16,), eos=1,
                                                         **options))
    gaps = random.Random(seed)
    got = []

    async def host(ctx):
        pos = 0
        for item in schedule:
            if item == "draft":
                token, keep = got[-1], 1
            else:
                token, pos, keep = item
            ctx.set(core.token.payload.token, token)
            ctx.set(core.token.payload.pos, pos)
            ctx.set(core.token.payload.keep, keep)
            ctx.set(core.token.valid, 1)
            await ctx.tick().until(core.token.ready)
            ctx.set(core.token.valid, 0)
            pos += 1
            if keep:
                ctx.set(core.sample.ready, 1)
                for _ in range(100_000):  # a bound, so that a hung core fails the test
                    _, _, valid, sample = await ctx.tick().sample(core.sample.valid,
                                                                  core.sample.payload.token)
                    if valid:
                        got.append(int(sample))
                        break
                else:
                    raise AssertionError(f"no sample after token {token} at {pos}")
                ctx.set(core.sample.ready, 0)

    sim = Simulator(core)
    sim.add_clock(1e-8)
    w_server, p_server = hbm_processes(core, core.schedule, rng=gaps, stall=stall,
                                       stream_bytes=core.stream_bytes, latency=latency)
    sim.add_process(w_server)
    sim.add_process(p_server)
    sim.add_testbench(host)
    sim.run()  # until the host testbench is done; the memory servers run in the background
    return got


@pytest.fixture(scope="module")
def tiny_model():
    weights = random_weights(qwen2_config("test-tiny"), seed=1)
    return quantize(weights, activation_scales(weights, seed=2, sequences=1, length=32))


def greedy_continuation(model, prompt, count):
    reference = IntDecoder(model)
    logits = reference.prefill(prompt)[-1]
    out = []
    for _ in range(count):
        out.append(int(np.argmax(logits)))
        logits = reference.decode(out[-1])
    return out


@pytest.mark.slow
@pytest.mark.parametrize("vector_width", [4])  # width 1: the Verilator runs
def test_ingest_then_draft(tiny_model, vector_width):
    prompt = [5, 77]
    schedule = [(5, 0, 0), (77, 1, 1), "draft"]
    got = run_core(tiny_model, 16, 0.2, schedule, seed=1, latency=3, stream_bytes=16,
                   heads_parallel=2, weight_buffer=32, vector_width=vector_width)
    assert got == greedy_continuation(tiny_model, prompt, 2)
