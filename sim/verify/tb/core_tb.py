"""cocotb testbench of the decoder core (top ``decoder_core``): tokens in, samples out, weights
and parameters from the HBM model; checked token by token against the integer reference, and
timed for the benchmark.

The run plan's stimulus (:class:`~heteroreason.sim.verify.plan.Stimulus`): ``prompt`` and
``draft`` (greedy tokens to draft after it), ``positions`` (to time one decode token at),
``latency``/``stall`` (HBM model), ``idle``/``backpressure`` (token and sample streams),
``result`` (a JSON file the timing figures are written to).
"""

from __future__ import annotations

import json
import time

import cocotb
import numpy as np
from amaranth.hdl import Shape

from heteroreason.model.spec.numerics.qwen2_int8 import IntDecoder
from heteroreason.rtl.decoder.attention import kv_cache_rows
from heteroreason.rtl.decoder.core import PARAM_LAYOUT, DecoderCore
from heteroreason.rtl.decoder.decode_schedule import entries_per_param_beat
from heteroreason.rtl.decoder.operators import token_operators
from heteroreason.sim.verify.plan import Stimulus
from heteroreason.sim.verify.tb.common import TbBase, plan, seeded_rng, stimulus
from heteroreason.sim.verify.tb.hbm_channels import (
    HbmChannel,
    KvMemory,
    StripedChannel,
    packed_param_beats,
    packed_weight_beats,
)
from heteroreason.sim.verify.tb.shared_ports import SharedPorts
from heteroreason.sim.verify.tb.streams import StreamSink, StreamSource


def top_model_and_params():
    """The model and :class:`DecoderParams` the top was exported with (the plan's design)."""
    design = plan().design
    return design.model(), design.params


def build_reference_core() -> DecoderCore:
    """The same core the top was exported as (for its schedule and port layouts)."""
    model, params = top_model_and_params()
    return DecoderCore(model=model, params=params)


def hbm_channels(dut, core: DecoderCore, rng, knobs: Stimulus, *,
                 unwritten_kv_reads_zero: bool = False):
    """The weight and parameter channels of the HBM model for ``core``'s schedule, and the KV
    memory when the core keeps its cache outside (else None), as the stimulus ``knobs`` set
    them: ``latency`` and ``stall`` on every stream, the weights striped over ``weight_ports``
    (each ``port_fifo_depth`` slices ahead at most) when it names any, the key and value rows
    on one set of ports with ``shared_kv_ports``."""
    latency, stall = knobs.latency, knobs.stall
    addr_bits = Shape.cast(core.wreq.payload.shape()["addr"].shape).width
    image = packed_weight_beats(core.schedule, core.stream_bytes)
    if knobs.shared_ports:  # every stream on the weights' ports: one model serves them all
        kv, kv_addr_bits, kv_beat = None, 1, 0
        if core.external_kv:
            c = core.model.config
            rows = kv_cache_rows(layers=len(core.model.layers), kv_heads=c.kv_heads,
                                 max_context=c.max_context, contexts=core.params.contexts)
            kv = KvMemory(dut, core.kv_store.payload.shape(), rows=rows, rng=rng,
                          unwritten_reads_zero=unwritten_kv_reads_zero, serve_reads=False)
            kv_addr_bits = Shape.cast(core.k_req.payload.shape()["addr"].shape).width
            kv_beat = c.head_dim * core.params.kv_rows
        shared = SharedPorts(dut, weights=image, stream_bytes=core.stream_bytes,
                             params=packed_param_beats(core.schedule),
                             param_bytes=param_beat_costs(core), kv=kv,
                             kv_row_bytes=kv_beat, per_beat=core.params.kv_rows,
                             ports=knobs.weight_ports, addr_bits=addr_bits,
                             kv_addr_bits=kv_addr_bits, rng=rng,
                             fifo_depth=knobs.port_fifo_depth, window=knobs.port_fifo_depth,
                             gaps=knobs.port_gaps, refresh=knobs.port_refresh)
        return shared, None, None
    if knobs.weight_ports:
        weights = StripedChannel(dut, "wreq", "wdata", image, beat_bytes=core.stream_bytes,
                                 ports=knobs.weight_ports, addr_bits=addr_bits, rng=rng,
                                 fifo_depth=knobs.port_fifo_depth, gaps=knobs.port_gaps,
                                 refresh=knobs.port_refresh)
    else:
        weights = HbmChannel(dut, "wreq", "wdata", image, addr_bits=addr_bits, rng=rng,
                             latency=latency, stall=stall)
    params = HbmChannel(dut, "preq", "pdata", packed_param_beats(core.schedule),
                        addr_bits=addr_bits, rng=rng, latency=latency, stall=stall)
    kv = None
    if core.external_kv:
        c = core.model.config
        rows = kv_cache_rows(layers=len(core.model.layers), kv_heads=c.kv_heads,
                             max_context=c.max_context, contexts=core.params.contexts)
        kv = KvMemory(dut, core.kv_store.payload.shape(), rows=rows, rng=rng, latency=latency,
                      stall=stall, unwritten_reads_zero=unwritten_kv_reads_zero,
                      shared=knobs.shared_kv_ports, per_beat=core.params.kv_rows)
    return weights, params, kv


def param_beat_costs(core: DecoderCore) -> list[int]:
    """The bytes of each parameter beat in a time-shared image: the entries the beat's operator
    uses (a norm's ``param_width`` gains, a matrix's ``rows_per_beat`` row parameters, an entry
    of the SiLU table or the embedding), 69 bits each; the port's converter fills the rest."""
    p, schedule = core.params, core.schedule
    costs = [0] * len(schedule.param_image)
    for layer, op in token_operators(len(core.model.layers), keep_logits=True):
        if not op.params:
            continue
        region = schedule.regions[(f"layer{layer}." if op.per_layer else "") + op.params]
        entries = entries_per_param_beat(op.unit, p.param_width, p.rows_per_beat)
        for beat in range(region.start, region.start + region.count):
            costs[beat] = -(-entries * PARAM_LAYOUT.size // 8)
    return costs


class CoreTB(TbBase):
    def __init__(self, dut, *, name: str):
        seed, rng = seeded_rng(name)
        super().__init__(dut, seed=seed, name=name)
        self.core = build_reference_core()
        self.model = self.core.model
        knobs = stimulus()
        self.weights, self.params, self.kv = hbm_channels(
            dut, self.core, rng, knobs,
            unwritten_kv_reads_zero=name in ("token_timing", "pass_timing"))
        token_layout = self.core.token.payload.shape()
        sample_layout = self.core.sample.payload.shape()
        self.token = StreamSource(dut, "token", token_layout, rng=rng,
                                  idle=knobs.idle)
        self.sample = StreamSink(dut, "sample", sample_layout, rng=rng,
                                 backpressure=knobs.backpressure)
        self.samples: list[int] = []
        self.weight_wait = self.buffer_full = 0

    @property
    def memories(self):
        return [m for m in (self.weights, self.params, self.kv) if m is not None]

    def idle_inputs(self):
        self.token.idle_port()
        self.dut.sample__ready.value = 0
        for memory in self.memories:
            memory.idle_port()

    def drive(self):
        self.token.drive()
        self.sample.drive()
        for memory in self.memories:
            memory.drive(self.cycle)

    def observe(self):
        self.token.observe()
        beat = self.sample.observe()
        if beat is not None:
            self.samples.append(beat["token"])
        for memory in self.memories:
            memory.observe(self.cycle)
        self.weight_wait += int(self.dut.weight_wait.value)
        self.buffer_full += int(self.dut.buffer_full.value)

    async def run_token(self, token: int, pos: int, keep: bool, *, limit: int) -> int:
        """Send one token and wait until the core is done with it (its sample taken)."""
        wanted = len(self.samples) + int(keep)
        self.token.send(token=token, pos=pos, keep=int(keep))
        start = self.cycle
        await self.run_until(lambda: not self.token.busy, limit=limit, what=f"token at {pos}")
        await self.run_until(
            lambda: len(self.samples) == wanted and not int(self.dut.busy.value),
            limit=limit, what=f"the core finishing the token at {pos}")
        return self.cycle - start


    async def run_pass(self, items, *, limit: int) -> int:
        """Send one pass of a core with contexts — ``items``: (context, token, position,
        keep) — and wait until the core is done with it (every kept sample taken)."""
        layout = self.core.token.payload.shape()
        n = self.core.params.ingest_batch

        def packed(name, values):
            width = Shape.cast(layout[name].shape.elem_shape).width
            return sum(int(v) << (k * width) for k, v in enumerate(values))

        self.check(len(items) <= n, f"a pass of {len(items)} tokens; the core takes {n}")
        wanted = len(self.samples) + sum(keep for *_, keep in items)
        self.token.send(tokens=packed("tokens", [t for _, t, _, _ in items]),
                        ctx=packed("ctx", [c for c, *_ in items]),
                        pos=packed("pos", [p for _, _, p, _ in items]),
                        keep=sum(int(k) << b for b, (*_, k) in enumerate(items)),
                        count=len(items))
        start = self.cycle
        await self.run_until(lambda: not self.token.busy, limit=limit, what="a pass")
        await self.run_until(
            lambda: len(self.samples) == wanted and not int(self.dut.busy.value),
            limit=limit, what="the core finishing the pass")
        return self.cycle - start


def token_limit(core: DecoderCore) -> int:
    """Generous cycles for one token: ten times the weight stream at one beat per cycle."""
    ratio = core.params.ratio
    return 10 * ratio * core.schedule.weight_beats_per_token() + 200_000


@cocotb.test()
async def greedy_matches_reference(dut):
    tb = CoreTB(dut, name="greedy_matches_reference")
    prompt, draft = list(stimulus().prompt), stimulus().draft
    tb.log.info("COCOTB_RANDOM_SEED=%d prompt=%s draft=%d", tb.seed, prompt, draft)
    tb.check(len(prompt) >= 1, "the stimulus names no prompt token")
    await tb.reset()
    reference = IntDecoder(tb.model)
    logits = reference.prefill(prompt)[-1]
    expected = []
    for _ in range(draft + 1):
        expected.append(int(np.argmax(logits)))
        logits = reference.decode(expected[-1])
    limit = token_limit(tb.core)
    for pos, token in enumerate(prompt):
        await tb.run_token(token, pos, pos == len(prompt) - 1, limit=limit)
    for k in range(draft):
        await tb.run_token(tb.samples[-1], len(prompt) + k, True, limit=limit)
    tb.check(tb.samples == expected, f"samples {tb.samples} != reference {expected}")
    tb.check(not any(m.busy for m in tb.memories), "memory requests left unserved")
    sched, ratio = tb.core.schedule, tb.core.params.ratio
    scheduled = ratio * ((draft + 1) * sched.weight_beats_per_token(keep_logits=True) +
                         (len(prompt) - 1) * sched.weight_beats_per_token(keep_logits=False))
    tb.check(tb.weights.beats_sent == scheduled,
             f"{tb.weights.beats_sent} weight beats read, the schedule has {scheduled}")
    tb.log.info("%d samples matched the reference in %d cycles", len(tb.samples), tb.cycle)


@cocotb.test()
async def token_timing(dut):
    """Cycles of one decode token at each of the stimulus' ``positions`` (the KV cache holds
    whatever is there: timing does not depend on its values)."""
    tb = CoreTB(dut, name="token_timing")
    positions = stimulus().positions
    tb.check(bool(positions), "the stimulus names no position")
    await tb.reset()
    limit = token_limit(tb.core)
    rows = []
    for pos in positions:
        waits, fulls, beats = tb.weight_wait, tb.buffer_full, tb.weights.beats_sent
        start = time.perf_counter()
        cycles = await tb.run_token(5, pos, True, limit=limit)
        seconds = time.perf_counter() - start
        rows.append({"position": pos, "cycles": cycles, "stream_beats": tb.weights.beats_sent -
                     beats, "weight_wait": tb.weight_wait - waits,
                     "buffer_full": tb.buffer_full - fulls, "sim_seconds": seconds})
        tb.log.info("position %d: %d cycles, %d stream beats (%.1f%%), %.0f cycles/s", pos,
                    cycles, rows[-1]["stream_beats"], 100 * rows[-1]["stream_beats"] / cycles,
                    cycles / seconds)
    out = stimulus().result
    if out:
        with open(out, "w") as f:
            json.dump(rows, f)


@cocotb.test()
async def pass_timing(dut):
    """Cycles of passes of a core with contexts: the stimulus' ``positions`` taken
    ``ingest_batch`` at a time, each pass's tokens of contexts 0, 1, ... (every logit kept),
    then each pass again with its first token alone (the single-token pass beside it)."""
    tb = CoreTB(dut, name="pass_timing")
    positions, n = list(stimulus().positions), tb.core.params.ingest_batch
    tb.check(bool(positions) and tb.core.params.contexts >= n,
             "the stimulus names no position, or the core holds fewer contexts than a pass")
    await tb.reset()
    limit = token_limit(tb.core)
    rows = []
    for first in range(0, len(positions), n):
        group = positions[first:first + n]
        for items in ([(c, 5, p, 1) for c, p in enumerate(group)], [(0, 5, group[0], 1)]):
            cycles = await tb.run_pass(items, limit=limit)
            rows.append({"positions": [p for _, _, p, _ in items], "cycles": cycles})
            tb.log.info("pass at %s: %d cycles", rows[-1]["positions"], cycles)
    out = stimulus().result
    if out:
        with open(out, "w") as f:
            json.dump(rows, f)
