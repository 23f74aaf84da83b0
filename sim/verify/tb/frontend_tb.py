"""cocotb testbench of the KV front end (KVMU + input MUX) in a closed loop.

Around the DUT: a host model (verdicts for submitted steps, refined steps and backtracks as
target-model token bursts), and a decoder model that takes tokens with random backpressure and,
for each token whose logits are kept, returns one sampled token after a random latency.

Checks, every cycle: the KVMU registers against the golden
:class:`~heteroreason.model.spec.golden.kvmu.GoldenKvmu`; that a token reaches the decoder
exactly when the selection rule
(:func:`~heteroreason.model.spec.golden.input_mux.select_source`) and the stream
handshakes say it must, with its source, token id, logits flag and KV position; that a sample is
squashed exactly when it is stale. Staleness is known twice, independently: the golden MUX counts
samples in flight, and the testbench tags every sample with the number of flushes seen when its
parent token was admitted. Every test ends quiescent with every host token delivered, every sample
forwarded or squashed, and every submission matched.
"""

from __future__ import annotations

import copy
from collections import Counter, deque
from dataclasses import dataclass

import cocotb

from heteroreason.model.spec.golden.input_mux import GoldenInputMux, Selection, select_source
from heteroreason.model.spec.golden.kvmu import GoldenKvmu
from heteroreason.model.spec.protocol import Error, Mode, Op, Source
from heteroreason.rtl.input_mux import SampledTokenLayout
from heteroreason.rtl.kv_frontend import DecoderTokenLayout, HostMessageLayout
from heteroreason.rtl.kvmu import SpanLayout
from heteroreason.sim.verify.tb.common import TbBase, param, seeded_rng, stimulus
from heteroreason.sim.verify.tb.streams import StreamSink, StreamSource


@dataclass(frozen=True)
class Sample:
    token: int
    step_end: bool
    parent_epoch: int
    due_cycle: int


class FrontEndTB(TbBase):
    def __init__(self, dut, *, name: str, idle: float = 0.0, backpressure: float = 0.0,
                 step_end_prob: float = 0.15, max_latency: int = 6):
        seed, rng = seeded_rng(name)
        super().__init__(dut, seed=seed, name=name)
        self.capacity = param("capacity")
        self.token_width = param("token_width")
        self.rng = rng
        self.step_end_prob = step_end_prob
        self.max_latency = max_latency
        self.golden = GoldenKvmu(capacity=self.capacity)
        self.mux = GoldenInputMux(max_in_flight=param("max_in_flight"))
        self.epoch = 0  # flushes so far: the ground truth of staleness
        self.host = StreamSource(dut, "host", HostMessageLayout(self.token_width, self.capacity),
                                 rng=rng, idle=idle)
        self.sampler = StreamSource(dut, "sampler", SampledTokenLayout(self.token_width),
                                    rng=rng, idle=idle, supplier=self._next_sample)
        self.decoder = StreamSink(dut, "decoder",
                                  DecoderTokenLayout(self.token_width, self.capacity),
                                  rng=rng, backpressure=backpressure,
                                  withdrawable=self._withdrawable)
        self.submit = StreamSink(dut, "submit", SpanLayout(self.capacity), rng=rng,
                                 backpressure=backpressure)
        self.samples: deque[Sample] = deque()       # computed by the decoder model, in order
        self.offered_samples: deque[Sample] = deque()
        self.expected_submits: deque[tuple[int, int]] = deque()
        self.flushed_last_cycle = False
        self.stats: Counter[str] = Counter()
        self.host_tokens_sent = 0
        self.host_tokens_delivered = 0

    # decoder model

    def _next_sample(self):
        if self.samples and self.samples[0].due_cycle <= self.cycle:
            sample = self.samples.popleft()
            self.offered_samples.append(sample)
            return {"token": sample.token, "step_end": int(sample.step_end)}
        return None

    def _compute_sample(self) -> None:
        latency = self.rng.randint(0, self.max_latency)
        self.samples.append(Sample(
            token=self.rng.randrange(1 << self.token_width),
            step_end=self.rng.random() < self.step_end_prob,
            parent_epoch=self.epoch,
            due_cycle=self.cycle + 1 + latency))

    def _withdrawable(self, beat: dict) -> bool:
        return self.flushed_last_cycle and beat["source"] == Source.DRAFT

    # host model

    @staticmethod
    def command_message(op: Op, pos: int = 0) -> dict:
        return {"is_token": 0, "op": op, "pos": pos}

    def send_command(self, op: Op, pos: int = 0) -> None:
        self.host.queue.append(self.command_message(op, pos))

    def send_host_tokens(self, count: int) -> None:
        for i in range(count):
            self.host.send(is_token=1, token=self.rng.randrange(1 << self.token_width),
                           last=int(i == count - 1))
            self.host_tokens_sent += 1

    # clocking

    def idle_inputs(self) -> None:
        self.host.idle_port()
        self.sampler.idle_port()
        self.dut.decoder__ready.value = 0
        self.dut.submit__ready.value = 0

    def drive(self) -> None:
        self.host.drive()
        self.sampler.drive()
        self.decoder.drive()
        self.submit.drive()

    def _check_registers(self) -> None:
        d, g = self.dut, self.golden
        rtl = (int(d.valid_ptr.value), int(d.curr_ptr.value), int(d.ahead_ptr.value),
               Mode(int(d.mode.value)), bool(int(d.pending.value)), bool(int(d.stalled.value)),
               Error(int(d.error.value)), int(d.in_flight.value))
        gold = (g.valid, g.curr, g.ahead, g.mode, g.pending, g.stalled, g.error,
                self.mux.in_flight)
        self.check(rtl == gold, f"RTL (valid, curr, ahead, mode, pending, stalled, error, "
                                f"in_flight) = {rtl}, golden {gold}")

    def _expected_transfer(self, selection: Selection) -> str | None:
        """Which input must pass to the decoder this cycle, from the handshakes offered."""
        d = self.dut
        if not int(d.decoder__ready.value):
            return None
        head = self.host.offered
        if selection == Selection.HOST and head is not None and head["is_token"]:
            beat = head
            if beat["last"] and not self.mux.can_admit_kept():
                return None
            event = lambda g: g.host_token(last=bool(beat["last"]))  # noqa: E731
        elif (selection == Selection.SAMPLER and self.sampler.offered is not None
              and self.mux.stale == 0 and self.mux.in_flight > 0):
            beat = self.sampler.offered
            event = lambda g: g.draft_token(step_end=bool(beat["step_end"]))  # noqa: E731
        else:
            return None
        if int(d.submit__valid.value) and event(copy.deepcopy(self.golden)).submitted:
            return None
        return "host" if selection == Selection.HOST else "sampler"

    def observe(self) -> None:
        d = self.dut
        self._check_registers()
        selection = select_source(self.golden.mode, stalled=self.golden.stalled)
        expected = self._expected_transfer(selection)
        head = self.host.observe()
        host = head if head is not None and head["is_token"] else None
        cmd = head if head is not None and not head["is_token"] else None
        sample_beat = self.sampler.observe()
        out = self.decoder.observe()
        span = self.submit.observe()
        squash = bool(int(d.squash.value))

        self.check(out is None or cmd is None, "a command was taken while a token was handed over")
        forwarded = None
        if sample_beat is not None:
            sample = self.offered_samples.popleft()
            stale = self.mux.take_sample()
            truth = sample.parent_epoch != self.epoch
            self.check(stale == truth, f"golden MUX says stale={stale}, ground truth {truth}")
            self.check(squash == stale, f"squash={int(squash)} for a sample with stale={stale}")
            self.stats["squashed" if stale else "forwarded"] += 1
            if not stale:
                forwarded = ("sampler", sample_beat)
        else:
            self.check(not squash, "squash without a sampler transfer")
        if host is not None:
            self.check(forwarded is None, "host and sampler tokens forwarded in one cycle")
            forwarded = ("host", host)

        self.check((forwarded[0] if forwarded else None) == expected,
                   f"expected a {expected or 'no'} token to reach the decoder, got {forwarded}; "
                   f"selection {selection.value}, decoder beat {out}")
        self.check((out is None) == (forwarded is None),
                   f"decoder beat {out} does not match the input taken {forwarded}")
        if out is not None:
            kind, beat = forwarded
            source = Source.HOST if kind == "host" else Source.DRAFT
            keep = bool(beat["last"]) if kind == "host" else True
            want = {"token": beat["token"], "source": source, "keep_logits": int(keep),
                    "pos": self.golden.ahead}
            self.check(out == want, f"decoder beat {out} != expected {want}")
            outcome = (self.golden.host_token(last=bool(beat["last"])) if kind == "host"
                       else self.golden.draft_token(step_end=bool(beat["step_end"])))
            self.check(outcome.error == Error.NONE, f"illegal token reached the KVMU: {outcome}")
            self.mux.admit(keep_logits=keep)
            if keep:
                self._compute_sample()
            if outcome.submitted:
                self.expected_submits.append(outcome.submitted)
            if kind == "host":
                self.host_tokens_delivered += 1
            self.stats[f"{kind} tokens"] += 1

        self.flushed_last_cycle = False
        if cmd is not None:
            outcome = self.golden.command(Op(cmd["op"]), cmd["pos"])
            if outcome.flushed:
                self.mux.flush()
                self.epoch += 1
                self.flushed_last_cycle = True
            if outcome.submitted:
                self.expected_submits.append(outcome.submitted)
            self.stats[Op(cmd["op"]).name] += 1

        if span is not None:
            self.check(bool(self.expected_submits), f"submission {span} the model never made")
            want = self.expected_submits.popleft()
            self.check((span["start"], span["end"]) == want, f"submission {span} != {want}")
            self.stats["submissions"] += 1
            self.on_submission(want)

    def on_submission(self, span) -> None:
        """Called for every submission taken; a host model replaces it."""

    # endings

    async def settle(self, *, limit: int = 20000) -> None:
        """Flush with INIT(0) and run until nothing is in flight, then check nothing is left."""
        await self.run_until(lambda: not self.host.busy, limit=limit, what="host stream draining")
        self.send_command(Op.INIT, 0)
        self.submit.backpressure = 0.0
        await self.run_until(
            lambda: (not self.host.busy and self.mux.in_flight == 0 and not self.samples
                     and not self.expected_submits and not int(self.dut.submit__valid.value)),
            limit=limit, what="samples in flight being squashed")
        for _ in range(3):
            await self.step()
        self.check(self.host_tokens_delivered == self.host_tokens_sent,
                   f"{self.host_tokens_sent} host tokens sent, "
                   f"{self.host_tokens_delivered} delivered")
        self.check(not self.offered_samples and not self.samples, "samples left unmatched")
        self.check(int(self.dut.in_flight.value) == 0, "the MUX still counts samples in flight")
        self.check(self.golden.error == Error.NONE, f"the KVMU flagged {self.golden.error!r}")


async def start(dut, name: str, **kwargs) -> FrontEndTB:
    tb = FrontEndTB(dut, name=name, **kwargs)
    tb.log.info("%s: COCOTB_RANDOM_SEED=%d capacity=%d", name, tb.seed, tb.capacity)
    await tb.reset()
    return tb


async def wait_for(tb: FrontEndTB, what: str, done) -> None:
    await tb.run_until(done, limit=5000, what=what)


# ---------------------------------------------------------------- directed: the paper's scenarios

@cocotb.test()
async def scenario_accept(dut):
    """Prompt migrated, first token from the host, then drafting from the local sampler."""
    tb = await start(dut, "scenario_accept", step_end_prob=0.0)
    tb.send_command(Op.INIT, 16)
    tb.send_host_tokens(1)
    await wait_for(tb, "drafting", lambda: tb.golden.ahead >= 22)
    assert tb.golden.mode == Mode.SPECULATION and tb.golden.valid == 17
    assert tb.stats["sampler tokens"] >= 5 and tb.stats["squashed"] == 0
    await tb.settle()


@cocotb.test()
async def scenario_reject_refinement(dut):
    """REJECT squashes the draft's in-flight and held samples; host tokens are shadow-ingested."""
    tb = await start(dut, "scenario_reject_refinement", step_end_prob=0.3)
    tb.send_command(Op.INIT, 8)
    tb.send_host_tokens(1)
    await wait_for(tb, "a stall", lambda: tb.golden.stalled)
    await wait_for(tb, "the held sample", lambda: tb.sampler.offered is not None)
    valid = tb.golden.valid
    tb.send_command(Op.REJECT)
    tb.send_host_tokens(6)
    await wait_for(tb, "drafting to resume",
                   lambda: not tb.host.busy and tb.golden.mode == Mode.SPECULATION)
    assert tb.golden.valid == valid + 6
    assert tb.stats["squashed"] >= 1, tb.stats
    await tb.settle()


@cocotb.test()
async def scenario_reject_backtrack(dut):
    """A step is rejected, the refined step fails too, the host backtracks with INIT(pos)."""
    tb = await start(dut, "scenario_reject_backtrack", step_end_prob=0.25)
    tb.send_command(Op.INIT, 8)
    tb.send_host_tokens(1)
    await wait_for(tb, "a submission", lambda: tb.golden.pending)
    tb.send_command(Op.ACCEPT)
    await wait_for(tb, "the next submission", lambda: tb.golden.pending and tb.golden.valid > 9)
    back_to = tb.golden.valid
    tb.send_command(Op.REJECT)
    tb.send_host_tokens(4)
    await wait_for(tb, "the refined step",
                   lambda: not tb.host.busy and tb.golden.mode == Mode.SPECULATION)
    assert tb.golden.valid == back_to + 4
    tb.send_command(Op.INIT, 9)
    tb.send_host_tokens(3)
    await wait_for(tb, "drafting after the backtrack",
                   lambda: not tb.host.busy and tb.golden.mode == Mode.SPECULATION)
    assert tb.golden.valid == 12
    assert back_to > 9
    await tb.settle()


# ---------------------------------------------------------------- constrained random

class RandomHost:
    """Answers every submission after a random delay: ACCEPT, REJECT plus a refined step, or a
    backtrack (INIT to an earlier position plus the regenerated step)."""

    def __init__(self, tb: FrontEndTB):
        self.tb = tb
        self.verdicts: deque[tuple[int, str]] = deque()
        tb.on_submission = self.on_submission
        tb.host.supplier = self.next_command

    def on_submission(self, span) -> None:
        self.verdicts.append((self.tb.cycle + self.tb.rng.randint(0, 40), "verdict"))

    def next_command(self):
        tb, rng, g = self.tb, self.tb.rng, self.tb.golden
        if not self.verdicts or self.verdicts[0][0] > tb.cycle:
            return None
        self.verdicts.popleft()
        if g.ahead > tb.capacity // 2 or rng.random() < 0.05:
            pos = rng.randint(0, min(g.valid, tb.capacity // 2))
            tb.send_host_tokens(rng.randint(1, 12))
            return tb.command_message(Op.INIT, pos)
        if rng.random() < 0.25:
            tb.send_host_tokens(rng.randint(1, 12))
            return tb.command_message(Op.REJECT)
        return tb.command_message(Op.ACCEPT)


@cocotb.test()
@cocotb.parametrize((("idle", "backpressure"), [(0.0, 0.0), (0.5, 0.5), (0.7, 0.8)]))
async def random_traffic(dut, idle, backpressure):
    tokens = stimulus().random_events
    tb = await start(dut, f"random_traffic[idle={idle},bp={backpressure}]", idle=idle,
                     backpressure=backpressure)
    host = RandomHost(tb)
    tb.send_command(Op.INIT, 32)
    tb.send_host_tokens(1)
    await tb.run_until(lambda: tb.stats["host tokens"] + tb.stats["sampler tokens"] >= tokens,
                       limit=tokens * 60, what=f"{tokens} tokens")
    tb.host.supplier = None
    del host
    tb.log.info("COCOTB_RANDOM_SEED=%d: %d cycles, %s", tb.seed, tb.cycle, dict(tb.stats))
    await tb.settle()
    for key in ("ACCEPT", "REJECT", "INIT", "squashed", "forwarded", "submissions"):
        assert tb.stats[key] > 0, f"{key} never happened: {dict(tb.stats)}"
