"""cocotb testbench of the MultiDraftEngine (top ``draft_engine`` with ``contexts`` > 1): the
host plays a scenario of :mod:`heteroreason.sim.verify.engine_scenarios` on each of several
contexts at once (each started when the one before has submitted its first step, so that a
pass holds contexts at different positions), their messages interleaved on the one host
stream, while the HBM model serves weights with stalls. Every context's draft tokens are
checked against the integer reference's greedy choice after that context's own tokens, every
submitted span against that context's delimiters; so a context that saw another's KV rows, a
sample routed to the wrong context or a lost token fails.

The run plan's stimulus: ``scenarios`` (a list of scenarios as JSON, one a context),
``latency``/``stall``, ``idle``, ``backpressure`` and ``result`` as for
:mod:`~heteroreason.sim.verify.tb.engine_tb`.
"""

from __future__ import annotations

import json
from collections import deque

import cocotb

from heteroreason.model.spec.protocol import ContextError, Op
from heteroreason.rtl.multi_engine import MultiDraftEngine
from heteroreason.rtl.multi_kvmu import ContextStateLayout
from heteroreason.sim.verify.engine_scenarios import GreedyOracle
from heteroreason.sim.verify.tb.common import param, seeded_rng, stimulus
from heteroreason.sim.verify.tb.core_tb import top_model_and_params
from heteroreason.sim.verify.tb.engine_tb import EngineBench
from heteroreason.sim.verify.tb.streams import Payload


class Context:
    """One context's scenario and what the testbench knows of it: its tokens by KV position,
    where its next host token goes, its spans submitted and not yet judged, its drafts."""

    def __init__(self, index: int, scenario: dict, model):
        self.index, self.scenario = index, scenario
        self.oracle = GreedyOracle(model)
        self.tokens: list[int] = []
        self.host_pos = 0
        self.spans: deque[tuple[int, int]] = deque()
        self.drafts: list[tuple[int, int, int]] = []
        self.verdicts = deque(scenario["verdicts"])
        self.starts: list[int] = []  # the kept steps' starts (for a backtrack)
        self.started = False
        self.judging = False  # a verdict sent and not yet taken by the engine
        self.host_tokens = 0


class MultiEngineTB(EngineBench):
    def __init__(self, dut, *, name: str):
        seed, rng = seeded_rng(name)
        super().__init__(dut, seed=seed, name=name)
        self.model, params = top_model_and_params()
        self.delimiters, self.eos = params.delimiters, params.eos
        self.engine = MultiDraftEngine(model=self.model, params=params,
                                       capacity=param("capacity"))
        self._ports(self.engine, rng, stimulus())
        self.contexts: list[Context] = []
        self.view = 0  # the context view_state shows (driven with the inputs)

    def idle_inputs(self):
        self.dut.view.value = 0
        super().idle_inputs()

    def drive(self):
        self.dut.view.value = self.view
        super().drive()

    def context(self, index: int) -> Context:
        self.check(index < len(self.contexts), f"a beat of context {index}, beyond those run")
        return self.contexts[index]

    def check_draft(self, beat: dict) -> None:
        c = self.context(beat["ctx"])
        token, pos = beat["token"], beat["pos"]
        self.check(pos == len(c.tokens), f"context {c.index}: draft token {token} at {pos}; "
                   f"the context holds {len(c.tokens)} tokens")
        want = c.oracle.next_token(c.tokens)
        self.check(token == want, f"context {c.index}: draft token {token} at {pos}; the "
                   f"reference drafts {want} after that context's tokens")
        self.check(beat["step_end"] == int(token in (*self.delimiters, self.eos)),
                   f"context {c.index}: step_end {beat['step_end']} on token {token}")
        self.check(beat["eos"] == int(token == self.eos), f"eos {beat['eos']} on {token}")
        c.tokens.append(token)
        c.drafts.append((token, pos, beat["step_end"]))

    def check_span(self, span: dict) -> None:
        c = self.context(span["ctx"])
        start, end = span["start"], span["end"]
        self.check(start < end <= len(c.tokens), f"context {c.index}: span [{start}, {end}) "
                   f"with {len(c.tokens)} tokens")
        self.check(c.tokens[end - 1] in (*self.delimiters, self.eos),
                   f"context {c.index}: span [{start}, {end}) does not end a step")
        c.spans.append((start, end))

    def apply_host(self, message: dict) -> None:
        message = {"ctx": 0, "is_token": 0, "op": 0, "pos": 0, "token": 0, "last": 0} | message
        if message["ctx"] >= len(self.contexts):  # an id out of range: the engine reports it
            return
        c = self.contexts[message["ctx"]]
        if message["is_token"]:
            del c.tokens[c.host_pos:]
            c.tokens.append(message["token"])
            c.host_pos += 1
            c.host_tokens += 1
            return
        op = Op(message["op"])
        c.judging = False
        if op == Op.INIT:
            c.host_pos = message["pos"]
            c.spans.clear()
        elif op == Op.REJECT:
            c.host_pos = c.spans[0][0]
            c.spans.clear()
        elif op == Op.ACCEPT:
            c.spans.popleft()

    def send_tokens(self, c: Context, tokens) -> None:
        for k, token in enumerate(tokens):
            self.host.send(ctx=c.index, is_token=1, token=token,
                           last=int(k == len(tokens) - 1))

    def start_context(self, c: Context) -> None:
        c.started = True
        self.host.send(ctx=c.index, is_token=0, op=Op.INIT, pos=0)
        self.send_tokens(c, c.scenario["prompt"])

    def judge(self, c: Context) -> None:
        """Send ``c``'s next verdict on its oldest submitted span."""
        verdict = c.verdicts.popleft()
        kind = verdict if isinstance(verdict, str) else verdict[0]
        c.judging = True
        start = c.spans[0][0]
        if kind == "accept":
            self.host.send(ctx=c.index, is_token=0, op=Op.ACCEPT)
            c.starts.append(start)
        elif kind == "reject":
            self.host.send(ctx=c.index, is_token=0, op=Op.REJECT)
            self.send_tokens(c, verdict[1])
            c.starts.append(start)
        elif kind == "backtrack":
            self.check(bool(c.starts), "backtrack needs a kept step before it")
            self.host.send(ctx=c.index, is_token=0, op=Op.INIT, pos=c.starts[-1])
            self.send_tokens(c, verdict[1])
        else:
            self.fail(f"unknown verdict {verdict!r}")


@cocotb.test()
async def scenarios(dut):
    tb = MultiEngineTB(dut, name="scenarios")
    plans = stimulus().scenarios
    tb.check(bool(plans), "the stimulus names no scenarios")
    contexts = tb.engine.contexts
    tb.check(len(plans) <= contexts, f"{len(plans)} scenarios for {contexts} contexts")
    tb.contexts = [Context(k, s, tb.model) for k, s in enumerate(plans)]
    tb.log.info("COCOTB_RANDOM_SEED=%d scenarios=%s delimiters=%s eos=%d", tb.seed,
                [s["name"] for s in plans], tb.delimiters, tb.eos)
    await tb.reset()
    tb.start_context(tb.contexts[0])
    limit = 40 * tb.token_limit * len(plans)
    for _ in range(limit):
        await tb.step()
        for k, c in enumerate(tb.contexts):
            if not c.started and tb.contexts[k - 1].spans:
                tb.start_context(c)  # once the context before has submitted a step
            elif c.started and c.spans and c.verdicts and not c.judging:
                tb.judge(c)
        if all(c.started and not c.verdicts and not c.judging for c in tb.contexts) \
                and not tb.host.busy:
            break
    else:
        tb.fail(f"the scenarios did not finish in {limit} cycles")
    # after its last verdict each context drafts until it stalls (a step under verification
    # and the step-ahead one): then the engine goes quiet
    everyone = (1 << len(plans)) - 1
    await tb.run_until(lambda: int(dut.waiting.value) & everyone == everyone,
                       limit=20 * tb.token_limit * len(plans), what="every context stalled")
    quiet, busy = 0, int(dut.busy_cycles.value)  # then the core finishes its last pass
    for _ in range(2 * tb.token_limit):
        await tb.step()
        now = int(dut.busy_cycles.value)
        quiet, busy = (quiet + 1 if now == busy else 0), now
        if quiet == 16:
            break
    else:
        tb.fail("the core did not go idle with every context stalled")
    tb.check(ContextError(int(dut.context_error.value)) == ContextError.NONE,
             f"context error {ContextError(int(dut.context_error.value)).name}")
    tb.check(not int(dut.bad_token.value), "bad_token set")
    drafts = sum(len(c.drafts) for c in tb.contexts)
    host_tokens = sum(c.host_tokens for c in tb.contexts)
    processed, passes = int(dut.tokens.value), int(dut.passes.value)
    tb.check(processed == host_tokens + drafts,
             f"the decoder processed {processed} tokens: {host_tokens} host tokens and "
             f"{drafts} drafts were expected")
    for memory in tb.memories:
        tb.check(not memory.busy, f"memory requests left unserved ({memory})")
    record = {"drafts": {c.index: c.drafts for c in tb.contexts}, "cycles": tb.cycle,
              "tokens": processed, "passes": passes,
              "busy_cycles": int(dut.busy_cycles.value)}
    tb.log.info("%d draft tokens of %d contexts matched the reference; %d host tokens; %d "
                "passes for %d tokens; %d cycles", drafts, len(plans), host_tokens, passes,
                processed, tb.cycle)
    out = stimulus().result
    if out:
        with open(out, "w") as f:
            json.dump(record, f)


@cocotb.test()
async def context_errors(dut):
    """A host token to a context never initialised and messages to an id out of range are
    taken and reported (the context's and the engine's sticky errors), a token id outside the
    vocabulary sets ``bad_token``; none reaches the decoder, and drafting then runs as usual."""
    tb = MultiEngineTB(dut, name="context_errors")
    tb.contexts = [Context(k, {"verdicts": []}, tb.model) for k in range(tb.engine.contexts)]
    state = Payload(ContextStateLayout(param("capacity")))
    await tb.reset()
    bad = tb.engine.contexts  # the first id out of range
    tb.host.send(ctx=1, is_token=1, token=5, last=0)  # context 1 was never initialised
    await tb.run_until(lambda: not tb.host.busy, limit=1000, what="the token taken")
    tb.view = 1
    await tb.step()
    await tb.step()
    seen = state.unpack(int(dut.view_state.value))
    tb.check(seen["context_error"] == ContextError.CONTEXT_NOT_INITIALISED,
             f"context 1's error is {seen['context_error']}")
    tb.check(int(dut.context_error.value) == ContextError.NONE, "the engine's error is set")
    tb.host.send(ctx=bad, is_token=0, op=Op.INIT, pos=0)
    tb.host.send(ctx=bad, is_token=1, token=5, last=1)
    await tb.run_until(lambda: not tb.host.busy, limit=1000, what="the messages taken")
    await tb.step()
    tb.check(int(dut.context_error.value) == ContextError.CONTEXT_OUT_OF_RANGE,
             "no CONTEXT_OUT_OF_RANGE")
    tb.check(int(dut.bad_context.value) == bad, f"bad_context {int(dut.bad_context.value)}")
    tb.host.send(ctx=0, is_token=0, op=Op.INIT, pos=0)
    tb.host.send(ctx=0, is_token=1, token=tb.model.config.vocab, last=0)  # outside the vocab
    await tb.run_until(lambda: not tb.host.busy, limit=1000, what="the bad token taken")
    for _ in range(4 * tb.engine.contexts + 8):  # a pass would be issued by now
        await tb.step()
    tb.check(int(dut.bad_token.value) == 1, "bad_token not set")
    tb.check(int(dut.tokens.value) == 0, "a refused token reached the decoder")
    tb.host.send(ctx=0, is_token=0, op=Op.CLEAR_ERROR)
    tb.host.send(ctx=0, is_token=0, op=Op.INIT, pos=0)
    c = tb.contexts[0]
    c.tokens, c.host_pos, c.host_tokens = [], 0, 0
    tb.send_tokens(c, [5, 77])
    await tb.run_until(lambda: len(c.drafts) >= 2, limit=3 * tb.token_limit,
                       what="drafting after the errors")
    tb.check(int(dut.context_error.value) == ContextError.NONE, "CLEAR_ERROR kept the error")
    tb.check(int(dut.bad_token.value) == 1, "bad_token is sticky")
    tb.log.info("refused and reported: a token to a context never initialised, an id out of "
                "range, a token outside the vocabulary; %d drafts matched after", len(c.drafts))
