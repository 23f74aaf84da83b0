"""cocotb testbench of the DraftEngine (top ``draft_engine``): a host plays a scenario of
:mod:`heteroreason.sim.verify.engine_scenarios` (INIT, prompt, one verdict per submitted step, the
target's tokens after a REJECT or a backtrack) while the HBM model serves weights; every draft
token is checked against the integer reference's greedy choice after the engine's context.

The run plan's stimulus: ``scenario`` (the scenario as JSON), ``latency``/``stall`` (HBM
model), ``idle`` (host stream), ``backpressure`` (``draft_out`` and ``submit``), ``result`` (a
JSON file the run's record is written to).
"""

from __future__ import annotations

import json
from collections import deque

import cocotb

from heteroreason.model.spec.protocol import Error, Op
from heteroreason.rtl.draft_engine import DraftEngine
from heteroreason.sim.verify.engine_scenarios import GreedyOracle
from heteroreason.sim.verify.tb.common import TbBase, param, seeded_rng, stimulus
from heteroreason.sim.verify.tb.core_tb import hbm_channels, token_limit, top_model_and_params
from heteroreason.sim.verify.tb.streams import StreamSink, StreamSource


class EngineBench(TbBase):
    """What the engines' benches share: the HBM channels of the engine's core, the host
    stream, the sinks of draft tokens and submitted spans, and a cycle's drive and observe
    (a subclass checks the beats: ``check_draft``, ``check_span``, ``apply_host``)."""

    def _ports(self, engine, rng, knobs) -> None:
        dut = self.dut
        self.weights, self.params, self.kv = hbm_channels(dut, engine.core, rng, knobs)
        layouts = {n: engine.signature.members[n].signature.members["payload"].shape
                   for n in ("host", "draft_out", "submit")}
        self.host = StreamSource(dut, "host", layouts["host"], rng=rng, idle=knobs.idle)
        self.draft_out = StreamSink(dut, "draft_out", layouts["draft_out"], rng=rng,
                                    backpressure=knobs.backpressure)
        self.submit = StreamSink(dut, "submit", layouts["submit"], rng=rng,
                                 backpressure=knobs.backpressure)
        self.token_limit = token_limit(engine.core)

    @property
    def memories(self):
        return [m for m in (self.weights, self.params, self.kv) if m is not None]

    def idle_inputs(self):
        self.host.idle_port()
        self.dut.draft_out__ready.value = 0
        self.dut.submit__ready.value = 0
        for memory in self.memories:
            memory.idle_port()

    def drive(self):
        for port in (self.host, self.draft_out, self.submit):
            port.drive()
        for memory in self.memories:
            memory.drive(self.cycle)

    def observe(self):
        # a draft token the decoder takes in the cycle a command arrives is older than it
        beat = self.draft_out.observe()
        if beat is not None:
            self.check_draft(beat)
        span = self.submit.observe()
        if span is not None:
            self.check_span(span)
        message = self.host.observe()
        if message is not None:
            self.apply_host(message)
        for memory in self.memories:
            memory.observe(self.cycle)


class EngineTB(EngineBench):
    def __init__(self, dut, *, name: str):
        seed, rng = seeded_rng(name)
        super().__init__(dut, seed=seed, name=name)
        self.model, params = top_model_and_params()
        self.delimiters, self.eos = params.delimiters, params.eos
        self.engine = DraftEngine(model=self.model, params=params, capacity=param("capacity"))
        self._ports(self.engine, rng, stimulus())
        self.oracle = GreedyOracle(self.model)
        self.context: list[int] = []  # the engine's tokens by KV position
        self.host_pos = 0  # where the next host token goes
        self.spans: deque[tuple[int, int]] = deque()  # submitted, not yet judged
        self.drafts: list[tuple[int, int, int]] = []  # (token, pos, step_end)
        self.events: list[list] = []  # what the engine and the host did, in order
        self.host_tokens = 0

    def check_draft(self, beat: dict) -> None:
        token, pos = beat["token"], beat["pos"]
        self.check(pos == len(self.context),
                   f"draft token {token} at position {pos}; the context holds "
                   f"{len(self.context)} tokens")
        want = self.oracle.next_token(self.context)
        self.check(token == want, f"draft token {token} at {pos}; the reference drafts {want}")
        self.check(beat["step_end"] == int(token in (*self.delimiters, self.eos)),
                   f"step_end {beat['step_end']} on token {token}")
        self.check(beat["eos"] == int(token == self.eos), f"eos {beat['eos']} on {token}")
        self.context.append(token)
        self.drafts.append((token, pos, beat["step_end"]))
        self.events.append(["draft", token, pos])

    def check_span(self, span: dict) -> None:
        start, end = span["start"], span["end"]
        self.check(start < end <= len(self.context),
                   f"span [{start}, {end}) with {len(self.context)} tokens in the context")
        self.check(self.context[end - 1] in (*self.delimiters, self.eos),
                   f"span [{start}, {end}) does not end with the delimiter or EOS")
        self.spans.append((start, end))
        self.events.append(["submit", start, end])

    def apply_host(self, message: dict) -> None:
        message = {"is_token": 0, "op": 0, "pos": 0, "token": 0, "last": 0} | message
        if message["is_token"]:
            del self.context[self.host_pos:]
            self.context.append(message["token"])
            self.host_pos += 1
            self.host_tokens += 1
            self.events.append(["host_token", message["token"], self.host_pos - 1])
        else:
            op = Op(message["op"])
            self.events.append([op.name.lower(), message["pos"]])
            if op == Op.INIT:
                self.host_pos = message["pos"]
                self.spans.clear()
            elif op == Op.REJECT:
                self.host_pos = self.spans[0][0]
                self.spans.clear()
            elif op == Op.ACCEPT:
                self.spans.popleft()

    def send_tokens(self, tokens) -> None:
        for k, token in enumerate(tokens):
            self.host.send(is_token=1, token=token, last=int(k == len(tokens) - 1))

    async def wait_for_span(self) -> tuple[int, int]:
        await self.run_until(lambda: bool(self.spans) and not self.host.busy,
                             limit=12 * self.token_limit, what="a submitted step")
        return self.spans[0]


@cocotb.test()
async def scenario(dut):
    tb = EngineTB(dut, name="scenario")
    scenario_plan = stimulus().scenario
    tb.check(scenario_plan is not None, "the stimulus names no scenario")
    tb.log.info("COCOTB_RANDOM_SEED=%d scenario=%s delimiters=%s eos=%d", tb.seed,
                scenario_plan, tb.delimiters, tb.eos)
    await tb.reset()
    tb.host.send(is_token=0, op=Op.INIT, pos=0)
    tb.send_tokens(scenario_plan["prompt"])
    starts: list[int] = []
    for verdict in scenario_plan["verdicts"]:
        start, _ = await tb.wait_for_span()
        kind = verdict if isinstance(verdict, str) else verdict[0]
        if kind == "accept":
            tb.host.send(is_token=0, op=Op.ACCEPT)
            starts.append(start)
        elif kind == "reject":
            tb.host.send(is_token=0, op=Op.REJECT)
            tb.send_tokens(verdict[1])
            starts.append(start)
        elif kind == "backtrack":
            tb.check(bool(starts), "backtrack needs a kept step before it")
            tb.host.send(is_token=0, op=Op.INIT, pos=starts[-1])
            tb.send_tokens(verdict[1])
        else:
            tb.fail(f"unknown verdict {verdict!r}")
    # after the last verdict the engine drafts on until it stalls (a step under verification
    # and the step-ahead step complete): then nothing may be left in flight
    await tb.run_until(lambda: not tb.host.busy, limit=tb.token_limit, what="host messages")
    # (stalled: the stall counter runs and the busy counter does not, the held sample waiting)
    quiet, stalls, busy = 0, int(dut.stall_cycles.value), int(dut.busy_cycles.value)
    for _ in range(20 * tb.token_limit):
        await tb.step()
        now_stalls, now_busy = int(dut.stall_cycles.value), int(dut.busy_cycles.value)
        quiet = quiet + 1 if now_stalls > stalls and now_busy == busy else 0
        stalls, busy = now_stalls, now_busy
        if quiet == 16:
            break
    else:
        tb.fail("the engine did not stall at the end")
    tb.check(Error(int(dut.error.value)) == Error.NONE,
             f"error {Error(int(dut.error.value)).name}")
    tb.check(not int(dut.bad_token.value), "bad_token set")
    processed = int(dut.tokens.value)
    tb.check(processed == tb.host_tokens + len(tb.drafts),
             f"the decoder processed {processed} tokens: {tb.host_tokens} host tokens and "
             f"{len(tb.drafts)} drafts were expected (a re-prefill or a lost token)")
    for memory in tb.memories:
        tb.check(not memory.busy, f"memory requests left unserved ({memory})")
    tb.check(len(tb.drafts) > 0 and not tb.host.busy, "nothing drafted or host messages left")
    record = {"drafts": tb.drafts, "events": tb.events, "cycles": tb.cycle,
              "tokens": processed, "busy_cycles": int(dut.busy_cycles.value),
              "weight_wait_cycles": int(dut.weight_wait_cycles.value),
              "buffer_full_cycles": int(dut.buffer_full_cycles.value),
              "stall_cycles": int(dut.stall_cycles.value)}
    tb.log.info("%d draft tokens matched the reference; %d host tokens; %d cycles",
                len(tb.drafts), tb.host_tokens, tb.cycle)
    out = stimulus().result
    if out:
        with open(out, "w") as f:
            json.dump(record, f)


@cocotb.test()
async def out_of_vocab_host_token(dut):
    """A host token id beyond the vocabulary is consumed unprocessed and sets ``bad_token``;
    INIT and valid tokens then draft as usual."""
    tb = EngineTB(dut, name="out_of_vocab_host_token")
    vocab = tb.model.config.vocab
    width = tb.engine.signature.members["host"].signature.members["payload"].shape["token"]
    tb.check(vocab < 2 ** width.shape, f"every id fits the {width.shape}-bit token field")
    await tb.reset()
    tb.host.send(is_token=0, op=Op.INIT, pos=0)
    tb.host.send(is_token=1, token=vocab, last=0)
    await tb.run_until(lambda: not tb.host.busy, limit=1000, what="the bad token taken")
    for _ in range(20):
        await tb.step()
    tb.check(int(dut.bad_token.value) == 1, "bad_token not set")
    tb.check(int(dut.tokens.value) == 0, "the bad token reached the decoder")
    tb.check(Error(int(dut.error.value)) == Error.NONE, "the KVMU saw an error")
    tb.context.clear()
    tb.host_tokens = 0
    tb.host.send(is_token=0, op=Op.INIT, pos=0)
    tb.send_tokens([5, 77])
    await tb.run_until(lambda: len(tb.drafts) >= 2, limit=3 * tb.token_limit,
                       what="drafting after the recovery")
    tb.check(int(dut.bad_token.value) == 1, "bad_token is sticky")
    tb.log.info("bad token flagged; %d drafts matched after INIT", len(tb.drafts))
