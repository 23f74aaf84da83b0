# amaranth: UnusedElaboratable=no
"""The decoder core end to end in Amaranth's simulator: ingest a prompt, then draft greedily;
every sampled token equals the integer reference's. (The longer end-to-end runs — stalls,
rollback, other parallelism, the DraftEngine's host scenarios — run on Verilator:
``tests/sim/verify/test_decoder_cocotb.py``.)"""

import importlib
import random

import numpy as np
import pytest
from amaranth.sim import Simulator

from heteroreason.model.spec.numerics.qwen2_int8 import IntDecoder
from heteroreason.model.timing.fpga.calibration import CALIBRATION_FILE, load_calibration
from heteroreason.model.timing.fpga.core_cycles import CoreTiming
from heteroreason.rtl.decoder.core import DecoderCore
from heteroreason.rtl.decoder.params import DecoderParams
from heteroreason.sim.verify.amaranth_hbm import hbm_processes


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

    simulate(core, host, rng=gaps, stall=stall, latency=latency)
    return got


def simulate(core, host, *, rng, stall, latency):
    """Run ``host`` against ``core`` with its weights and parameters served from memory."""
    sim = Simulator(core)
    sim.add_clock(1e-8)
    w_server, p_server = hbm_processes(core, core.schedule, rng=rng, stall=stall,
                                       stream_bytes=core.stream_bytes, latency=latency)
    sim.add_process(w_server)
    sim.add_process(p_server)
    sim.add_testbench(host)
    sim.run()  # until the host testbench is done; the memory servers run in the background


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


# the modules whose controls are replicated a copy a group of GROUP_BITS bits
_GROUPED = ("pipeline", "sequencer", "sequencer_streams", "scratchpad", "attention_controls",
            "mvu", "prefetch_fifo")


@pytest.mark.slow
@pytest.mark.parametrize("rows_per_beat", [1, 2])  # 2: the beat wider than the vector
def test_the_replicated_controls_in_groups_of_a_few_bits(tiny_model, monkeypatch, rows_per_beat):
    """Every replicated control (the beat's loads and shifts, the pipelines' advances, the
    attention's clears, adds and output selects, the prefetch buffers' selects, the weight
    buffer's columns) in groups of 40 bits, which split the beat's rows and bytes, so that each
    is built of many copies, as at full width (a group of 1,024 bits: a small core has one):
    the samples still equal the reference's."""
    for name in _GROUPED:
        module = importlib.import_module(f"heteroreason.rtl.decoder.{name}")
        monkeypatch.setattr(module, "GROUP_BITS", 40)
    monkeypatch.setattr(importlib.import_module("heteroreason.rtl.decoder.attention_controls"),
                        "_SELECT_BITS", 10)
    prompt = [5, 77]
    schedule = [(5, 0, 0), (77, 1, 1), "draft"]
    got = run_core(tiny_model, 16, 0.2, schedule, seed=2, latency=3,
                   stream_bytes=16 * rows_per_beat, heads_parallel=2, weight_buffer=32,
                   vector_width=4, param_width=rows_per_beat, rows_per_beat=rows_per_beat)
    assert got == greedy_continuation(tiny_model, prompt, 2), "seed=2"


def run_batched_core(model, lanes, stall, batches, *, seed, batch, latency=0, **options):
    """Feed ``batches`` — (tokens, pos, keep) for host tokens at ``pos``, ``pos + 1``, ...
    (at most ``batch`` of them), or ``"draft"`` to feed back the last sample at the next
    position — to a core of ``ingest_batch`` ``batch``; return the sampled tokens and the
    cycles each item took."""
    core = DecoderCore(model=model, params=DecoderParams(lanes, delimiters=(16,), eos=1,
                                                         ingest_batch=batch, **options))
    gaps = random.Random(seed)
    got, cycles = [], []

    async def host(ctx):
        pos = 0
        for item in batches:
            tokens, keep = ([got[-1]], 1) if item == "draft" else (item[0], item[2])
            if item != "draft":
                pos = item[1]
            ctx.set(core.token.payload.tokens, list(tokens) + [0] * (batch - len(tokens)))
            ctx.set(core.token.payload.count, len(tokens))
            ctx.set(core.token.payload.pos, pos)
            ctx.set(core.token.payload.keep, keep)
            ctx.set(core.token.valid, 1)
            await ctx.tick().until(core.token.ready)
            ctx.set(core.token.valid, 0)
            pos += len(tokens)
            ctx.set(core.sample.ready, 1)
            taken = 0
            while True:
                _, _, busy, valid, sample = await ctx.tick().sample(
                    core.busy, core.sample.valid, core.sample.payload.token)
                taken += 1
                if valid:  # a kept batch's sample: its last token's
                    got.append(int(sample))
                    break
                if not busy and not keep:
                    break
                # a bound, so that a hung core fails the test
                assert taken < 200_000, f"seed={seed}: {item} did not finish"
            cycles.append(taken)
            ctx.set(core.sample.ready, 0)

    simulate(core, host, rng=gaps, stall=stall, latency=latency)
    return got, cycles


@pytest.mark.slow
def test_a_batched_ingest_drafts_what_the_reference_does(tiny_model):
    """A prompt of five tokens ingested two a pass (the last pass one token), then two draft
    tokens: the samples equal the reference's greedy continuation, so every token of every
    batch reached the KV cache at its own position and attended only to those before it."""
    prompt = [5, 77, 3, 120, 9]
    batches = [([5, 77], 0, 0), ([3, 120], 2, 0), ([9], 4, 1), "draft"]
    got, _ = run_batched_core(tiny_model, 16, 0.2, batches, seed=4, batch=2, latency=3,
                              stream_bytes=16, heads_parallel=2, weight_buffer=32,
                              vector_width=4)
    assert got == greedy_continuation(tiny_model, prompt, 2), "seed=4"


@pytest.mark.slow
@pytest.mark.evidence
def test_batches_of_up_to_four_with_two_rows_a_beat_and_wide_gains(tiny_model):
    """Up to four tokens a pass, two rows a matrix-vector beat, two gains a parameter beat (the
    replayed gains in spans), stalls on both streams: batches of three and two, a kept batch of
    two whose sample is its last token's, then a draft token. The samples equal the
    reference's, and a batch of three takes fewer cycles than two single tokens."""
    prompt = [5, 77, 3, 120, 9, 44, 61]
    batches = [(prompt[:3], 0, 0), (prompt[3:5], 3, 0), (prompt[5:], 5, 1), "draft",
               ([77], 0, 0)]
    got, cycles = run_batched_core(tiny_model, 16, 0.2, batches, seed=5, batch=4, latency=3,
                                   stream_bytes=32, heads_parallel=2, weight_buffer=32,
                                   vector_width=4, param_width=2, rows_per_beat=2)
    assert got == greedy_continuation(tiny_model, prompt, 2), "seed=5"
    assert cycles[0] < 2 * cycles[-1], f"seed=5: {cycles}"


@pytest.mark.slow
def test_a_batched_pass_takes_the_cycles_the_timing_model_gives(tiny_model):
    """Without stalls, passes of one and two tokens (the second a token further on, its
    attention a row longer) take the cycles of ``CoreTiming.batch_cycles`` with the committed
    calibration's overheads (fitted on single tokens of other presets) within 0.5 %."""
    options = dict(stream_bytes=16, heads_parallel=2, weight_buffer=32, vector_width=4)
    batches = [([5, 77], 0, 0), ([3], 2, 0), ([44, 61], 200, 0)]
    _, cycles = run_batched_core(tiny_model, 16, 0.0, batches, seed=6, batch=2, latency=3,
                                 **options)
    timing = CoreTiming(tiny_model.config, DecoderParams(16, delimiters=(16,), eos=1,
                                                         ingest_batch=2, **options),
                        3, load_calibration(CALIBRATION_FILE).overheads)
    for (tokens, pos, _), measured in zip(batches, cycles, strict=True):
        modelled = timing.batch_cycles(pos, len(tokens))
        assert modelled == pytest.approx(measured, rel=0.005), (tokens, pos)
