# amaranth: UnusedElaboratable=no
"""The decoder core with several contexts (``DecoderParams(contexts=N)``) in Amaranth's
simulator: passes whose tokens come from different contexts, each at its own position, every
kept token sampled; each context's samples equal the integer reference's greedy continuation
of that context alone, so no context saw another's KV rows."""

import random

import pytest
from amaranth.hdl import Fragment

from heteroreason.model.timing.fpga.calibration import CALIBRATION_FILE, load_calibration
from heteroreason.model.timing.fpga.core_cycles import CoreTiming
from heteroreason.rtl.decoder.core import DecoderCore
from heteroreason.rtl.decoder.params import DecoderParams
from tests.rtl.decoder.test_decoder_core_amaranth import greedy_continuation, simulate

DRAFT = "draft"
OPTIONS = dict(stream_bytes=16, heads_parallel=2, weight_buffer=32, vector_width=4)


def run_passes(model, passes, *, batch, contexts, seed, stall, latency=3, **options):
    """Feed ``passes`` — each a list of (context, token or ``DRAFT``, position, keep); a draft
    is the context's last sample — and return each context's samples and each pass's cycles
    (taken to the last sample out, or to the core free without samples)."""
    core = DecoderCore(model=model, params=DecoderParams(
        16, delimiters=(16,), eos=1, ingest_batch=batch, contexts=contexts, **options))
    got = {c: [] for c in range(contexts)}
    cycles = []

    async def host(ctx):
        for item in passes:
            tokens = [got[c][-1] if t == DRAFT else t for c, t, _, _ in item]
            pad = [0] * (batch - len(item))
            ctx.set(core.token.payload.tokens, tokens + pad)
            ctx.set(core.token.payload.count, len(item))
            ctx.set(core.token.payload.ctx, [c for c, *_ in item] + pad)
            ctx.set(core.token.payload.pos, [p for _, _, p, _ in item] + pad)
            ctx.set(core.token.payload.keep, sum(k << b for b, (*_, k) in enumerate(item)))
            ctx.set(core.token.valid, 1)
            await ctx.tick().until(core.token.ready)
            ctx.set(core.token.valid, 0)
            ctx.set(core.sample.ready, 1)
            wanted = [c for c, _, _, k in item if k]
            seen, taken = [], 0
            while True:
                _, _, busy, valid, token, context = await ctx.tick().sample(
                    core.busy, core.sample.valid, core.sample.payload.token,
                    core.sample.payload.ctx)
                taken += 1
                if valid:
                    seen.append(int(context))
                    got[int(context)].append(int(token))
                if len(seen) == len(wanted) and (wanted or not busy):
                    break
                assert taken < 200_000, f"seed={seed}: {item} did not finish"
            assert seen == wanted, f"seed={seed}: samples of {seen}, not {wanted} ({item})"
            cycles.append(taken)
            ctx.set(core.sample.ready, 0)

    simulate(core, host, rng=random.Random(seed), stall=stall, latency=latency)
    return got, cycles


PROMPTS = {0: [5, 77], 1: [3, 120, 9], 2: [44, 61]}


@pytest.mark.slow
def test_each_context_drafts_what_it_would_alone(tiny_model):
    """Three contexts, two tokens a pass: prompts ingested side by side (one pass holds two
    of a context's tokens at consecutive positions), then drafts of two contexts a pass and a
    pass of one, with stalls on both memory streams; the samples of each context equal its
    own greedy continuation, in order, each tagged with its context."""
    passes = [
        [(0, 5, 0, 0), (1, 3, 0, 0)],
        [(0, 77, 1, 1), (1, 120, 1, 0)],
        [(2, 44, 0, 0), (2, 61, 1, 1)],  # a context's two tokens in one pass
        [(1, 9, 2, 1), (0, DRAFT, 2, 1)],
        [(2, DRAFT, 2, 1), (1, DRAFT, 3, 1)],
        [(0, DRAFT, 3, 1)],
    ]
    got, _ = run_passes(tiny_model, passes, batch=2, contexts=3, seed=11, stall=0.2,
                        **OPTIONS)
    for c, prompt in PROMPTS.items():
        want = greedy_continuation(tiny_model, prompt, len(got[c]))
        assert got[c] == want, f"seed=11: context {c}"
    assert [len(got[c]) for c in range(3)] == [3, 2, 2]


@pytest.mark.slow
def test_a_pass_of_contexts_takes_the_cycles_the_timing_model_gives(tiny_model):
    """Without stalls, a pass of one and of two contexts at different positions take the
    cycles of ``CoreTiming.contexts_pass_cycles`` (the sampler's latency once, a cycle a
    further sample) with the committed calibration's overheads within 0.5 %."""
    passes = [[(0, 5, 0, 1), (1, 3, 0, 1)], [(1, DRAFT, 1, 1)], [(0, 77, 1, 0), (0, 9, 2, 0)],
              [(1, DRAFT, 2, 1), (0, DRAFT, 3, 1)]]
    _, cycles = run_passes(tiny_model, passes, batch=2, contexts=2, seed=12, stall=0.0,
                           **OPTIONS)
    timing = CoreTiming(tiny_model.config, DecoderParams(16, delimiters=(16,), eos=1,
                                                         ingest_batch=2, contexts=2, **OPTIONS),
                        3, load_calibration(CALIBRATION_FILE).overheads)
    for item, measured in zip(passes, cycles, strict=True):
        positions = [p for _, _, p, _ in item]
        kept = sum(k for *_, k in item)
        modelled = timing.contexts_pass_cycles(positions, samples=kept)
        assert modelled == pytest.approx(measured, rel=0.005), (item, measured, modelled)


def test_the_engines_take_the_contexts_they_are_built_for(tiny_model):
    from heteroreason.rtl.decoder.pass_sampler import PassSampler
    from heteroreason.rtl.draft_engine import DraftEngine
    from heteroreason.rtl.multi_engine import MultiDraftEngine

    several = DecoderParams(16, ingest_batch=2, contexts=3, **OPTIONS)
    with pytest.raises(ValueError, match=r"params\.contexts is 3: a DraftEngine holds one"):
        DraftEngine(model=tiny_model, params=several, capacity=64)
    with pytest.raises(ValueError, match="contexts must be at least 2"):
        MultiDraftEngine(model=tiny_model, params=DecoderParams(16, ingest_batch=2, **OPTIONS),
                         capacity=64)
    with pytest.raises(ValueError, match=r"capacity must be an integer in \[1, 512\]"):
        MultiDraftEngine(model=tiny_model, params=several, capacity=513)
    with pytest.raises(TypeError, match=r"tokens must be an integer in \[2, 64\]"):
        PassSampler(vocab=64, tokens=1, contexts=2)
    engine = MultiDraftEngine(model=tiny_model, params=several, capacity=64)
    assert engine.contexts == 3 and engine.core.params.ingest_batch == 2
    Fragment.get(engine, None)  # it elaborates (and its units are used)
