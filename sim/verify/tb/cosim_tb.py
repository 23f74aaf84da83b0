"""cocotb test of the RTL in the loop (:mod:`heteroreason.sim.verify.cosim`): the BRSD controller
runs in a thread of the simulation (``cocotb.task.bridge``) and its draft backend,
:class:`RtlDraft`, drives the DraftEngine's host stream (``cocotb.task.resume``) — ACCEPT when the
controller kept the step the engine submitted, REJECT and the target's tokens when it rescued it,
INIT and the tokens from the first difference otherwise (a backtrack, a new problem, a step cut at
the controller's token limit) — and returns the draft tokens the engine reports.

Every draft token is also checked against the integer reference as it appears (the checks of
:class:`~heteroreason.sim.verify.tb.engine_tb.EngineTB`). The run plan's stimulus: ``cosim``
(prompts, controller settings, trace file, as JSON), ``latency``, ``result``.
"""

from __future__ import annotations

import json
from collections import deque

import cocotb
from cocotb.task import bridge, resume

from heteroreason.model.controller.brsd import ControllerError, common_prefix, run_problem
from heteroreason.model.spec.protocol import Mode, Op
from heteroreason.model.workload.traces import trace_to_json
from heteroreason.sim.verify.cosim import backends, controller_from_json
from heteroreason.sim.verify.tb.common import param, param_text, stimulus
from heteroreason.sim.verify.tb.engine_tb import EngineTB

EXPECTED_MODE = {"init": Mode.INITIALIZATION, "accept": Mode.ACCEPT, "reject": Mode.ROLLBACK}


class CosimTB(EngineTB):
    """The engine's testbench plus what the draft backend needs: the reported draft tokens not
    yet handed to the controller, the commands sent and the modes seen."""

    def __init__(self, dut):
        super().__init__(dut, name="brsd_with_rtl_draft")
        self.inbox: deque[tuple[int, int, int]] = deque()
        self.commands: list[list] = []  # [cycle, command, pos, mode it led to]
        self.modes: list[list] = []  # [cycle, mode] at each change
        self.unconfirmed: list[list] = []  # commands whose mode has not been seen yet
        self.started = False
        self.span_pending = False  # the last step handed over was submitted for verification
        self.last_context: list[int] = []
        self.last_step: list[int] = []

    def check_draft(self, beat):
        super().check_draft(beat)
        self.inbox.append((beat["token"], beat["pos"], beat["step_end"]))

    def apply_host(self, message):
        super().apply_host(message)
        message = {"is_token": 0, "op": 0, "pos": 0} | message
        if not message["is_token"]:
            op = Op(message["op"])
            command = [self.cycle, op.name.lower(), message["pos"], None]
            self.commands.append(command)
            self.unconfirmed.append(command)
            if op in (Op.INIT, Op.REJECT):
                self.inbox.clear()  # drafts reported before it are stale

    def observe(self):
        super().observe()
        mode = Mode(int(self.dut.mode.value))
        if not self.modes or self.modes[-1][1] != mode.name:
            self.modes.append([self.cycle, mode.name])
        # a command takes the KVMU to its mode within a few cycles of its transfer
        for command in list(self.unconfirmed):
            if self.cycle > command[0] and mode == EXPECTED_MODE[command[1]]:
                command[3] = mode.name
                self.unconfirmed.remove(command)
            elif self.cycle > command[0] + 3:
                self.fail(f"{command[1]} at cycle {command[0]} did not lead to mode "
                          f"{EXPECTED_MODE[command[1]].name} (now {mode.name})")

    async def draft_step(self, context: list[int], max_tokens: int) -> list[int]:
        """Bring the engine to ``context`` and take its next step."""
        n = len(self.last_context)
        if self.started and self.span_pending and context == self.last_context + self.last_step:
            self.host.send(is_token=0, op=Op.ACCEPT)
        elif self.started and self.span_pending and len(context) > n and \
                context[:n] == self.last_context:
            self.host.send(is_token=0, op=Op.REJECT)
            self.send_tokens(context[n:])
        else:
            keep = min(common_prefix(self.context, context), len(context) - 1)
            self.host.send(is_token=0, op=Op.INIT, pos=keep)
            self.send_tokens(context[keep:])
        self.started = True
        await self.run_until(lambda: not self.host.busy, limit=self.token_limit,
                             what="the host messages")
        step: list[int] = []
        while True:
            await self.run_until(lambda: bool(self.inbox), limit=4 * self.token_limit,
                                 what=f"draft token {len(step)} of a step")
            token, pos, step_end = self.inbox.popleft()
            self.check(pos == len(context) + len(step),
                       f"draft token at {pos}, expected {len(context) + len(step)}")
            step.append(token)
            if step_end or len(step) == max_tokens:
                break
        self.last_context, self.last_step = list(context), step
        self.span_pending = bool(step_end)
        return step


class RtlDraft:
    """The controller's draft backend: the engine on the simulator, or one context of it (call
    from a bridge thread). ``step(context, max_tokens)`` is the testbench's coroutine that
    brings the engine to ``context`` and returns its next step."""

    def __init__(self, step, *, stops: frozenset[int], name: str = "draft-rtl"):
        self.name = name
        self.max_context = param("capacity")
        self._step = step
        self._stops = stops
        self.calls = 0

    def generate_step(self, context, *, max_tokens, stop):
        if frozenset(stop) != self._stops:
            raise ControllerError(f"{self.name}: the engine stops at {sorted(self._stops)}, "
                                  f"the controller at {sorted(stop)}")
        if len(context) + max_tokens > self.max_context:
            raise ControllerError(f"{self.name}: context of {len(context)} tokens plus a step "
                                  f"of up to {max_tokens} exceeds its KV capacity of "
                                  f"{self.max_context}")
        self.calls += 1
        return resume(self._step)(list(context), max_tokens)


@cocotb.test()
async def brsd_with_rtl_draft(dut):
    tb = CosimTB(dut)
    plan = stimulus().cosim
    controller = controller_from_json(plan["controller"])
    tb.check(controller.delimiters == frozenset(tb.delimiters) and controller.eos == tb.eos,
             "the controller's delimiters and EOS differ from the engine's")
    tb.log.info("COCOTB_RANDOM_SEED=%d prompts=%d controller=%s", tb.seed,
                len(plan["prompts"]), plan["controller"])
    await tb.reset()
    models = backends(param_text("preset"), param("seed"))
    draft = RtlDraft(tb.draft_step, stops=controller.stops)
    chains: list[list[int]] = []

    def run():
        traces = []
        with open(plan["trace_out"], "w") as out:  # each problem as soon as it is complete
            for i, prompt in enumerate(plan["prompts"]):
                target, prm = models.for_problem()
                trace, chain = run_problem(prompt, draft=draft, target=target, prm=prm,
                                           config=controller, dataset=param_text("preset"),
                                           problem_id=str(i))
                out.write(json.dumps(trace_to_json(trace), separators=(",", ":")) + "\n")
                out.flush()
                traces.append(trace)
                chains.append(chain)
        return traces

    traces = await bridge(run)()
    for _ in range(4):
        await tb.step()
    tb.check(not tb.unconfirmed, f"commands without their mode: {tb.unconfirmed}")
    record = {"traces": [trace_to_json(t) for t in traces], "chains": chains,
              "commands": tb.commands,
              "modes": tb.modes, "drafts": len(tb.drafts), "draft_calls": draft.calls,
              "host_tokens": tb.host_tokens, "cycles": tb.cycle}
    tb.log.info("%d problems, %d draft calls, %d draft tokens checked, %d commands, %d cycles",
                len(traces), draft.calls, len(tb.drafts), len(tb.commands), tb.cycle)
    with open(stimulus().result, "w", encoding="utf-8") as f:
        json.dump(record, f)
