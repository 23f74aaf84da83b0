"""cocotb test of the RTL in the loop with several problems at once
(:mod:`heteroreason.sim.verify.cosim` with ``contexts`` > 1): the MultiDraftEngine holds a
problem a context, and a BRSD controller a context runs in a thread of the simulation
(``cocotb.task.bridge``), taking the next problem whenever its last one ends. Its draft backend,
a :class:`~heteroreason.sim.verify.tb.cosim_tb.RtlDraft` on that context, drives the context's
messages on the one host stream (``cocotb.task.resume``) — ACCEPT when the controller kept the
step the context submitted, REJECT and the target's tokens when it rescued it, INIT and the
tokens from the first difference otherwise — and returns the draft tokens the engine reports
for that context. The contexts' drafts share passes of the weights as the engine gathers them.

One task clocks the simulation (every stream driven and checked each cycle); the controllers'
calls wait on its ticks. Every draft token is checked against the integer reference after its
own context's tokens (:class:`~heteroreason.sim.verify.tb.multi_engine_tb.MultiEngineTB`); every
command is confirmed by the mode its context's KVMU goes to, shown on ``view_state`` from the
cycle after the command; a verdict waits for its step's span on ``submit``, as a verifier would.
The run plan's stimulus is the single-context bench's: ``cosim``, ``latency``, ``result``.
"""

from __future__ import annotations

import json
from collections import deque
from functools import partial

import cocotb
from cocotb.task import bridge
from cocotb.triggers import Event

from heteroreason.model.controller.brsd import common_prefix, run_problem
from heteroreason.model.spec.protocol import ContextError, Mode, Op
from heteroreason.model.workload.traces import trace_to_json
from heteroreason.rtl.multi_kvmu import ContextStateLayout
from heteroreason.sim.verify.cosim import backends, controller_from_json
from heteroreason.sim.verify.tb.common import param, param_text, stimulus
from heteroreason.sim.verify.tb.cosim_tb import EXPECTED_MODE, RtlDraft
from heteroreason.sim.verify.tb.multi_engine_tb import Context, MultiEngineTB
from heteroreason.sim.verify.tb.streams import Payload


class CosimContext(Context):
    """A context's bookkeeping (:class:`Context`) plus its draft backend's: the reported draft
    tokens not yet handed to its controller, its host messages not yet taken, the last step
    handed over and whether the engine submitted it, the problems it ran."""

    def __init__(self, index: int, model):
        super().__init__(index, {"verdicts": []}, model)
        self.inbox: deque[tuple[int, int, int]] = deque()
        self.queued = 0
        self.span_pending = False
        self.last_context: list[int] = []
        self.last_step: list[int] = []
        self.problems: list[int] = []


class MultiCosimTB(MultiEngineTB):
    def __init__(self, dut):
        super().__init__(dut, name="brsd_with_rtl_draft")
        self.contexts = [CosimContext(k, self.model) for k in range(self.engine.contexts)]
        self.state = Payload(ContextStateLayout(param("capacity")))
        self.commands: list[list] = []  # [cycle, context, command, pos, mode it led to]
        self.unconfirmed: deque[list] = deque()
        self.shown = 0  # the context view_state shows this cycle
        self._tick = Event()

    def drive(self):
        self.shown = self.view
        super().drive()

    def check_draft(self, beat):
        super().check_draft(beat)
        self.contexts[beat["ctx"]].inbox.append((beat["token"], beat["pos"], beat["step_end"]))

    def apply_host(self, message):
        super().apply_host(message)
        message = {"ctx": 0, "is_token": 0, "op": 0, "pos": 0} | message
        c = self.contexts[message["ctx"]]
        c.queued -= 1
        if not message["is_token"]:
            op = Op(message["op"])
            command = [self.cycle, c.index, op.name.lower(), message["pos"], None]
            self.commands.append(command)
            self.unconfirmed.append(command)
            if op in (Op.INIT, Op.REJECT):
                c.inbox.clear()  # drafts reported before it are stale

    def observe(self):
        super().observe()
        self.confirm()

    def confirm(self):
        """Show the oldest unconfirmed command's context on ``view_state``; the command is
        confirmed once that context's mode is the one it leads to, within a few cycles."""
        while self.unconfirmed:
            command = self.unconfirmed[0]
            cycle, ctx, name = command[:3]
            if self.shown == ctx and self.cycle > cycle:
                mode = Mode(self.state.unpack(int(self.dut.view_state.value))["mode"])
                if mode == EXPECTED_MODE[name]:
                    command[4] = mode.name
                    self.unconfirmed.popleft()
                    continue
            self.check(self.cycle <= cycle + 4, f"context {ctx}: {name} at cycle {cycle} did not "
                       f"lead to mode {EXPECTED_MODE[name].name}")
            self.view = ctx
            return

    async def clock(self):
        """Run the simulation a cycle at a time (the base bench's step: drive, then observe),
        waking whoever waits on the cycle."""
        while True:
            await super().step()
            tick, self._tick = self._tick, Event()
            tick.set()

    async def step(self) -> None:
        """A cycle as the controllers' calls see it: they wait on the clock task, which alone
        drives (so ``run_until`` waits the same way)."""
        await self._tick.wait()

    def send(self, c: CosimContext, **message) -> None:
        c.queued += 1
        self.host.send(ctx=c.index, **message)

    def send_tokens(self, c: CosimContext, tokens) -> None:
        for k, token in enumerate(tokens):
            self.send(c, is_token=1, token=token, last=int(k == len(tokens) - 1))

    async def draft_step(self, c: CosimContext, context: list[int], max_tokens: int):
        """Bring context ``c`` to ``context`` and take its next step."""
        n, slow = len(c.last_context), self.token_limit * len(self.contexts)
        extends = len(context) > n and context[:n] == c.last_context
        if c.span_pending and extends:  # a verdict on the step the context submitted
            await self.run_until(lambda: bool(c.spans), limit=4 * slow,
                                what=f"context {c.index}'s span submitted")
            self.check(c.spans[0] == (n, n + len(c.last_step)), f"context {c.index}: span "
                       f"{c.spans[0]}, the step handed over was [{n}, {n + len(c.last_step)})")
            if context == c.last_context + c.last_step:
                self.send(c, is_token=0, op=Op.ACCEPT)
            else:
                self.send(c, is_token=0, op=Op.REJECT)
                self.send_tokens(c, context[n:])
        else:
            keep = min(common_prefix(c.tokens, context), len(context) - 1)
            self.send(c, is_token=0, op=Op.INIT, pos=keep)
            self.send_tokens(c, context[keep:])
        await self.run_until(lambda: c.queued == 0, limit=slow * (len(context) + 1),
                            what=f"context {c.index}'s host messages taken")
        step: list[int] = []
        while True:
            await self.run_until(lambda: bool(c.inbox), limit=4 * slow,
                                what=f"context {c.index}'s draft token {len(step)} of a step")
            token, pos, step_end = c.inbox.popleft()
            self.check(pos == len(context) + len(step), f"context {c.index}: draft token at "
                       f"{pos}, expected {len(context) + len(step)}")
            step.append(token)
            if step_end or len(step) == max_tokens:
                break
        c.last_context, c.last_step = list(context), step
        c.span_pending = bool(step_end)
        return step


@cocotb.test()
async def brsd_with_rtl_draft(dut):
    tb = MultiCosimTB(dut)
    plan = stimulus().cosim
    prompts = plan["prompts"]
    controller = controller_from_json(plan["controller"])
    tb.check(controller.delimiters == frozenset(tb.delimiters) and controller.eos == tb.eos,
             "the controller's delimiters and EOS differ from the engine's")
    tb.log.info("COCOTB_RANDOM_SEED=%d prompts=%d contexts=%d controller=%s", tb.seed,
                len(prompts), len(tb.contexts), plan["controller"])
    await tb.reset()
    clock = cocotb.start_soon(tb.clock())
    waiting = deque(range(len(prompts)))  # problems not yet begun (threads run one at a time)
    done: dict[int, tuple] = {}
    drafts: list[RtlDraft] = []

    def serve(c: CosimContext) -> None:
        """A controller on context ``c``: problems one after another until none is left."""
        models = backends(param_text("preset"), param("seed"))  # this context's own decoders
        draft = RtlDraft(partial(tb.draft_step, c), stops=controller.stops,
                         name=f"draft-rtl-context{c.index}")
        drafts.append(draft)
        while waiting:
            i = waiting.popleft()
            target, prm = models.for_problem()
            c.problems.append(i)
            done[i] = run_problem(prompts[i], draft=draft, target=target, prm=prm,
                                  config=controller, dataset=param_text("preset"),
                                  problem_id=str(i))

    servers = [cocotb.start_soon(bridge(serve)(c))
               for c in tb.contexts[:min(len(tb.contexts), len(prompts))]]
    for server in servers:
        await server
    clock.cancel()
    tb.check(not tb.unconfirmed, f"commands without their mode: {list(tb.unconfirmed)}")
    tb.check(ContextError(int(dut.context_error.value)) == ContextError.NONE,
             f"context error {ContextError(int(dut.context_error.value)).name}")
    tb.check(not int(dut.bad_token.value), "bad_token set")
    checked = sum(len(c.drafts) for c in tb.contexts)
    host_tokens = sum(c.host_tokens for c in tb.contexts)
    tokens, passes = int(dut.tokens.value), int(dut.passes.value)
    # every host token was processed (a draft followed it); of the drafts reported (as they
    # are gathered), at most those of the pass in the core and the pass being gathered are not
    per_pass = tb.engine.core.params.ingest_batch
    tb.check(0 <= host_tokens + checked - tokens <= 2 * per_pass, f"the decoder processed "
             f"{tokens} tokens: {host_tokens} host tokens and {checked} drafts were reported")
    traces = [trace_to_json(done[i][0]) for i in range(len(prompts))]
    with open(plan["trace_out"], "w") as out:
        for trace in traces:
            out.write(json.dumps(trace, separators=(",", ":")) + "\n")
    record = {"traces": traces, "chains": [done[i][1] for i in range(len(prompts))],
              "commands": tb.commands, "contexts": {c.index: c.problems for c in tb.contexts},
              "drafts": checked, "draft_calls": sum(d.calls for d in drafts),
              "host_tokens": host_tokens, "tokens": tokens, "passes": passes,
              "cycles": tb.cycle}
    tb.log.info("%d problems on %d contexts, %d draft calls, %d draft tokens checked, %d "
                "commands, %d tokens in %d passes, %d cycles", len(traces), len(servers),
                record["draft_calls"], checked, len(tb.commands), tokens, passes, tb.cycle)
    with open(stimulus().result, "w", encoding="utf-8") as f:
        json.dump(record, f)
