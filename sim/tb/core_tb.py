"""cocotb testbench of the decoder core (top ``decoder_core``): tokens in, samples out, weights
and parameters from the HBM model; checked token by token against the integer reference, and
timed for the benchmark.

Environment (besides the top's ``HR_PARAM_*``): ``HR_PROMPT`` (comma-separated ids),
``HR_DRAFT`` (greedy tokens to draft after it), ``HR_POSITIONS`` (positions to time one decode
token at), ``HR_LATENCY``/``HR_STALL`` (HBM model), ``HR_IDLE``/``HR_BACKPRESSURE`` (token and
sample streams), ``HR_RESULT`` (a JSON file the benchmark figures are written to).
"""

from __future__ import annotations

import json
import os
import time

import cocotb
import numpy as np
from amaranth.hdl import Shape

from heteroreason.model.qwen2_int8 import IntDecoder
from heteroreason.rtl.decoder_core import DecoderCore
from heteroreason.sim.export import seeded_model
from heteroreason.sim.tb.common import TbBase, param, param_text, seeded_rng
from heteroreason.sim.tb.hbm import (
    HbmChannel,
    KvMemory,
    packed_param_beats,
    packed_weight_beats,
)
from heteroreason.sim.tb.streams import StreamSink, StreamSource

CORE_OPTIONS = ("lanes", "stream_bytes", "heads_parallel", "weight_buffer", "param_buffer",
                "vector_width", "external_kv")


def build_reference_core() -> DecoderCore:
    """The same core the top was exported as (for its schedule and port layouts)."""
    model = seeded_model(param_text("preset"), param("seed"))
    return DecoderCore(model=model, delimiters=delimiters(), eos=param("eos"),
                       **{name: param(name) for name in CORE_OPTIONS})


def delimiters() -> tuple[int, ...]:
    """The step delimiters the top was built with (``delimiter``, and ``delimiter2`` unless
    -1)."""
    second = param("delimiter2")
    return (param("delimiter"),) if second == -1 else (param("delimiter"), second)


def env_list(name: str) -> list[int]:
    text = os.environ.get(name, "").strip()
    return [int(v) for v in text.split(",")] if text else []


def env_float(name: str, default: float) -> float:
    return float(os.environ.get(name, default))


def hbm_channels(dut, core: DecoderCore, rng, *, latency: int, stall: float,
                 unwritten_kv_reads_zero: bool = False):
    """The weight and parameter channels of the HBM model for ``core``'s schedule, and the KV
    memory when the core keeps its cache outside (else None)."""
    addr_bits = Shape.cast(core.wreq.payload.shape()["addr"].shape).width
    weights = HbmChannel(dut, "wreq", "wdata",
                         packed_weight_beats(core.schedule, core.stream_bytes),
                         addr_bits=addr_bits, rng=rng, latency=latency, stall=stall)
    params = HbmChannel(dut, "preq", "pdata", packed_param_beats(core.schedule),
                        addr_bits=addr_bits, rng=rng, latency=latency, stall=stall)
    kv = None
    if core.external_kv:
        c = core.model.config
        rows = len(core.model.layers) * c.kv_heads * c.max_context
        kv = KvMemory(dut, core.kv_store.payload.shape(), rows=rows, rng=rng, latency=latency,
                      stall=stall, unwritten_reads_zero=unwritten_kv_reads_zero)
    return weights, params, kv


class CoreTB(TbBase):
    def __init__(self, dut, *, name: str):
        seed, rng = seeded_rng(name)
        super().__init__(dut, seed=seed, name=name)
        self.core = build_reference_core()
        self.model = self.core.model
        self.weights, self.params, self.kv = hbm_channels(
            dut, self.core, rng, latency=int(env_float("HR_LATENCY", 0)),
            stall=env_float("HR_STALL", 0.0), unwritten_kv_reads_zero=name == "token_timing")
        token_layout = self.core.token.payload.shape()
        sample_layout = self.core.sample.payload.shape()
        self.token = StreamSource(dut, "token", token_layout, rng=rng,
                                  idle=env_float("HR_IDLE", 0.0))
        self.sample = StreamSink(dut, "sample", sample_layout, rng=rng,
                                 backpressure=env_float("HR_BACKPRESSURE", 0.0))
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


def token_limit(core: DecoderCore) -> int:
    """Generous cycles for one token: ten times the weight stream at one beat per cycle."""
    ratio = core.lanes // core.stream_bytes
    return 10 * ratio * core.schedule.weight_beats_per_token() + 200_000


@cocotb.test()
async def greedy_matches_reference(dut):
    tb = CoreTB(dut, name="greedy_matches_reference")
    prompt, draft = env_list("HR_PROMPT"), int(os.environ.get("HR_DRAFT", "2"))
    tb.log.info("COCOTB_RANDOM_SEED=%d prompt=%s draft=%d", tb.seed, prompt, draft)
    tb.check(len(prompt) >= 1, "HR_PROMPT names no token")
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
    sched, ratio = tb.core.schedule, tb.core.lanes // tb.core.stream_bytes
    scheduled = ratio * ((draft + 1) * sched.weight_beats_per_token(keep_logits=True) +
                         (len(prompt) - 1) * sched.weight_beats_per_token(keep_logits=False))
    tb.check(tb.weights.beats_sent == scheduled,
             f"{tb.weights.beats_sent} weight beats read, the schedule has {scheduled}")
    tb.log.info("%d samples matched the reference in %d cycles", len(tb.samples), tb.cycle)


@cocotb.test()
async def token_timing(dut):
    """Cycles of one decode token at each of ``HR_POSITIONS`` (the KV cache holds whatever is
    there: timing does not depend on its values)."""
    tb = CoreTB(dut, name="token_timing")
    positions = env_list("HR_POSITIONS")
    tb.check(bool(positions), "HR_POSITIONS names no position")
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
    out = os.environ.get("HR_RESULT")
    if out:
        with open(out, "w") as f:
            json.dump(rows, f)
