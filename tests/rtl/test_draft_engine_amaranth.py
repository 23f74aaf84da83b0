# amaranth: UnusedElaboratable=no
"""The DraftEngine end to end in Amaranth's simulator: INIT, prompt ingest, drafting to a step
end, REJECT with rollback and shadow ingest of the target's tokens, drafting again; the draft
tokens equal the integer reference's greedy continuations."""

import random
import sys
from pathlib import Path

import pytest
from amaranth.sim import Simulator

from heteroreason.model.kvmu import Error, Mode, Op
from heteroreason.model.qwen2_config import qwen2_config
from heteroreason.model.qwen2_float import random_weights
from heteroreason.model.qwen2_int8 import calibrate, quantize
from heteroreason.rtl.draft_engine import DraftEngine

sys.path.insert(0, str(Path(__file__).parent))
from test_decoder_core_amaranth import greedy_continuation

from heteroreason.sim.hbm_model import hbm_processes


@pytest.mark.slow
def test_draft_reject_refine_resume():
    weights = random_weights(qwen2_config("test-tiny"), seed=1)
    model = quantize(weights, calibrate(weights, seed=2, sequences=1, length=32))
    first = greedy_continuation(model, [5, 77], 3)
    resumed = greedy_continuation(model, [5, 77, 200, 31], 1)  # no stale token may precede it
    # the first drafted token is declared a step delimiter: the step [2, 3) is submitted
    engine = DraftEngine(model=model, lanes=16, capacity=64, delimiters=(first[0],), eos=1,
                         stream_bytes=8, heads_parallel=2, weight_buffer=128)
    core = engine.core
    drafted, spans, status = [], [], {}

    async def host(ctx):
        async def send(**fields):
            for key in ("is_token", "op", "pos", "token", "last"):
                ctx.set(getattr(engine.host.payload, key), fields.get(key, 0))
            ctx.set(engine.host.valid, 1)
            await ctx.tick().until(engine.host.ready)
            ctx.set(engine.host.valid, 0)

        ctx.set(engine.draft_out.ready, 1)
        ctx.set(engine.submit.ready, 1)
        await send(op=Op.INIT, pos=0)
        await send(is_token=1, token=5)
        await send(is_token=1, token=77, last=1)
        for _ in range(100_000):
            if spans:
                break
            await ctx.tick()
        await send(op=Op.REJECT)
        await send(is_token=1, token=200)
        await send(is_token=1, token=31, last=1)
        for _ in range(200_000):
            if drafted and drafted[-1][1] >= 4:
                break
            await ctx.tick()
        status["mode"] = Mode(ctx.get(engine.mode))
        status["error"] = Error(ctx.get(engine.error))
        status["tokens"] = ctx.get(engine.tokens)
        status["busy"] = ctx.get(engine.busy_cycles)

    async def monitor(ctx):
        while True:
            _, _, dv, dr, tok, pos, end, sv, sr, start, stop = await ctx.tick().sample(
                engine.draft_out.valid, engine.draft_out.ready, engine.draft_out.payload.token,
                engine.draft_out.payload.pos, engine.draft_out.payload.step_end,
                engine.submit.valid, engine.submit.ready, engine.submit.payload.start,
                engine.submit.payload.end)
            if dv and dr:
                drafted.append((int(tok), int(pos), int(end)))
            if sv and sr:
                spans.append((int(start), int(stop)))

    sim = Simulator(engine)
    sim.add_clock(1e-8)
    w_server, p_server = hbm_processes(engine, core.schedule, rng=random.Random(5), stall=0.1,
                                       stream_bytes=8, latency=10)
    sim.add_process(w_server)
    sim.add_process(p_server)
    sim.add_process(monitor)
    sim.add_testbench(host)
    sim.run()
    # drafted before the reject: first[0] (a delimiter) at 2, maybe step-ahead tokens after
    # it; after the refinement at positions 2 and 3: resumed[0] at 4
    assert drafted[0] == (first[0], 2, 1)
    assert spans[0] == (2, 3)
    after_reject = [d for d in drafted[1:] if d[1] >= 4]
    assert after_reject[0] == (resumed[0], 4, int(resumed[0] == first[0])), (drafted, resumed)
    assert all(d[1] != 3 or d[0] == first[1] for d in drafted), "only first[1] fits at 3"
    assert status["mode"] == Mode.SPECULATION and status["error"] == Error.NONE
    assert status["tokens"] >= 6 and status["busy"] > 0
