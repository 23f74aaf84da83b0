"""Trace-driven discrete-event simulation of FPGA-GPU co-execution (DESIGN §6), one problem at a
time (batch 1), on four resources: the draft device, the PRM GPU, the target GPU and the link.

Every step event of a trace is replayed 1:1. Costs come from :class:`SystemConfig`:

* drafting step ``j`` with ``kv`` validated tokens before it: ``draft.decode_ms(d_j, kv)``;
* each transfer of token ids: ``link.tokens_ms(n)``; the FPGA's prompt KV: ``kv_migration_ms``;
* PRM scoring of a step: ``prm.prefill_ms(context + step)`` (the whole ``[z_i, y_i]``);
* target generation: ``target.prefill_ms(new context tokens)`` for what its KV cache lacks,
  then ``target.decode_ms(t_j, kv)``;
* the GPU draft after a refinement: ``draft.prefill_ms(t_j)``; the FPGA draft instead ingests
  the target's tokens as they stream (shadow synchronisation), finishing at
  ``max(start + ingest_ms(t_j), last token's arrival + ingest of one token)``.

Sequential modes (``rsd``, ``baseline``) run one activity at a time: draft, transfer, PRM, and
on a reject the target, transfer, PRM of the target's step (not in ``rsd``), a backtrack's
regeneration and its scoring, and the draft's catch-up. Overlapped modes (``t2``,
``heteroreason``) add: the draft drafts step ``i+1`` while step ``i`` is verified and stalls at
its end until the verdict; the target starts each step as soon as its context is known (an
accept interrupts it and caches its partial tokens, no KV; a reject lets it run on); a
backtrack's regeneration reuses cached tokens of the same position at prefill instead of decode
cost; a reject discards the step-ahead draft, a failed target step everything speculative.

The result is a timeline of intervals; :mod:`heteroreason.model.metrics` derives every metric
from it. Invariants are checked on every run (:func:`check_timeline`).
"""

from __future__ import annotations

import itertools
from collections import deque
from dataclasses import dataclass

from heteroreason.model.event_loop import EventLoop, Priority
from heteroreason.model.system import Mode, SystemConfig
from heteroreason.model.traces import ProblemTrace

__all__ = ["RESOURCES", "Interval", "ProblemRun", "ScheduleError", "check_timeline",
           "simulate_problem"]

RESOURCES = ("draft", "prm", "target", "link")
# an accepted step's prefetch runs until interrupted, at most this, unless the trace records the
# length of the target's step (``prefetch_tokens``)
PREFETCH_LIMIT_TOKENS = 2048
_EPS = 1e-9


class ScheduleError(ValueError):
    """A trace that the chosen mode cannot replay, or a broken invariant."""


@dataclass(frozen=True)
class Interval:
    """One activity on one resource. ``wasted``: discarded work (squashed step-ahead drafts,
    work invalidated by a backtrack, speculative work still running when the problem ends). A
    prefetch interrupted by an accept is not wasted: its tokens are cached (``kind`` prefetch,
    cut short)."""

    resource: str
    kind: str
    start_ms: float
    end_ms: float
    step: int
    tokens: int
    wasted: bool = False

    @property
    def duration_ms(self) -> float:
        return self.end_ms - self.start_ms


@dataclass(frozen=True)
class ProblemRun:
    trace: ProblemTrace
    config: str
    mode: Mode
    intervals: tuple[Interval, ...]
    latency_ms: float
    output_tokens: int
    stalled_steps: int
    cached_tokens_reused: int
    events: int


class _Problem:
    """The state machine of one problem's replay."""

    def __init__(self, trace: ProblemTrace, config: SystemConfig, mode: Mode):
        self.trace = trace
        self.cfg = config
        self.mode = mode
        self.steps = trace.steps
        self.n = len(trace.steps)
        self.loop = EventLoop()
        self.draft_t = config.fpga if mode.on_fpga else config.draft_gpu
        self.intervals: list[list] = []
        self.running: dict[str, list | None] = dict.fromkeys(RESOURCES)
        self.queues: dict[str, deque] = {r: deque() for r in RESOURCES}
        self.job_id = 0
        self.epoch = 0
        # reasoning state
        self.chain: list[int] = []
        self.ctx = trace.prompt_tokens  # validated tokens (prompt + chain)
        self.target_kv = 0
        self.v = 0
        self.done_ms: float | None = None
        # overlapped-mode state
        self.pending = False
        self.ahead_ready: int | None = None
        self.ahead_interval: list | None = None
        self.stall_start = 0.0
        self.stalled_steps = 0
        self.rejected: int | None = None
        self.target_done: dict[int, float] = {}
        self.cache: dict[int, int] = {}
        self.reused = 0

    # ------------------------------------------------------------------ resources

    def request(self, res: str, kind: str, duration: float, step: int, tokens: int,
                priority: Priority, done=None, *args) -> None:
        job = [kind, duration, step, tokens, priority, done, args, self.epoch]
        if self.running[res] is None:
            self._start(res, job)
        else:
            self.queues[res].append(job)

    def _start(self, res: str, job: list) -> None:
        kind, duration, step, tokens, priority, done, args, epoch = job
        now = self.loop.now
        self.job_id += 1
        record = [res, kind, now, now + duration, step, tokens, False, self.job_id, epoch]
        self.running[res] = record
        self.loop.at(now + duration, priority, self._finish, res, self.job_id, done, args)

    def _finish(self, res: str, job_id: int, done, args) -> None:
        record = self.running[res]
        if record is None or record[7] != job_id:
            return  # cancelled
        self.intervals.append(record)
        self._next(res)
        if done is not None:
            done(*args)

    def _next(self, res: str) -> None:
        self.running[res] = None
        queue = self.queues[res]
        while queue:
            job = queue.popleft()
            if job[7] == self.epoch:
                self._start(res, job)
                return
            # a stale job (from before a backtrack) never starts

    def cancel(self, res: str, *, wasted: bool = True) -> list | None:
        """Stop the running job now, recording its partial work (as wasted by default)."""
        record = self.running[res]
        if record is None:
            return None
        now = self.loop.now
        start, end = record[2], record[3]
        if end > start:
            record[5] = int(record[5] * (now - start) / (end - start))
        record[3] = now
        record[6] = wasted
        self.intervals.append(record)
        self._next(res)
        return record

    def transfer(self, tokens: int, step: int, done, *args) -> None:
        self.request("link", "tokens", self.cfg.link.tokens_ms(tokens), step, tokens,
                     Priority.TRANSFER, done, *args)

    # ------------------------------------------------------------------ common costs

    def draft_ms(self, tokens: int, kv: int) -> float:
        return self.draft_t.decode_ms(tokens, kv)

    def target_generate_ms(self, tokens: int) -> float:
        new = max(self.ctx - self.target_kv, 0)
        self.target_kv = self.ctx
        prefill = self.cfg.target.prefill_ms(new) if new else 0.0
        return prefill + self.cfg.target.decode_ms(tokens, self.ctx)

    def commit(self, tokens: int) -> None:
        self.chain.append(tokens)
        self.ctx += tokens

    def drop(self, steps: int) -> None:
        removed = self.chain[len(self.chain) - steps:]
        del self.chain[len(self.chain) - steps:]
        self.ctx -= sum(removed)
        self.target_kv = min(self.target_kv, self.ctx)

    def finish(self) -> None:
        self.done_ms = self.loop.now
        for res in RESOURCES:
            self.queues[res].clear()
            self.cancel(res)

    # ------------------------------------------------------------------ start

    def start(self) -> None:
        prompt = self.trace.prompt_tokens
        if self.mode.on_fpga:
            # the GPU prefills the prompt with the draft model, then the KV migrates
            self.request("target", "draft_prompt_prefill", self.cfg.draft_gpu.prefill_ms(prompt),
                         -1, prompt, Priority.TARGET, self._migrate)
        else:
            self.request("draft", "prompt_prefill", self.draft_t.prefill_ms(prompt), -1, prompt,
                         Priority.SYNC, self._first_draft)
        if self.mode.overlapped:
            self.prefetch(0)

    def _migrate(self) -> None:
        kv_ms = self.cfg.link.kv_migration_ms(self.cfg.draft_model, self.trace.prompt_tokens,
                                              bytes_per_element=self.cfg.kv_bytes_per_element)
        self.request("link", "kv_migration", kv_ms, -1, self.trace.prompt_tokens,
                     Priority.TRANSFER, self._first_token)

    def _first_token(self) -> None:
        # INIT(pos) and the GPU's first token with ``last``: one ingested token
        self.request("draft", "ingest", self.draft_t.ingest_ms(1, self.ctx), -1, 1,
                     Priority.SYNC, self._first_draft)

    def _first_draft(self) -> None:
        if self.mode.overlapped:
            self.draft_step(0)
        else:
            self.seq_draft(0)

    # ------------------------------------------------------------------ sequential modes

    def seq_draft(self, j: int) -> None:
        d = self.steps[j].draft_tokens
        self.request("draft", "draft", self.draft_ms(d, self.ctx), j, d, Priority.DRAFT,
                     self.transfer, d, j, self.seq_score, j)

    def seq_score(self, j: int) -> None:
        d = self.steps[j].draft_tokens
        self.request("prm", "score_draft", self.cfg.prm.prefill_ms(self.ctx + d), j, d,
                     Priority.VERDICT, self.seq_verdict, j)

    def seq_verdict(self, j: int) -> None:
        step = self.steps[j]
        if step.outcome == "accept":
            self.commit(step.draft_tokens)
            self.seq_next(j)
            return
        t = step.target_tokens
        self.request("target", "generate", self.target_generate_ms(t), j, t, Priority.TARGET,
                     self.transfer, t, j, self.seq_target_done, j)

    def seq_target_done(self, j: int) -> None:
        step = self.steps[j]
        if self.mode is Mode.RSD:
            self.seq_catch_up(j, step.target_tokens)
            return
        t = step.target_tokens
        self.request("prm", "score_target", self.cfg.prm.prefill_ms(self.ctx + t), j, t,
                     Priority.VERDICT, self.seq_target_verdict, j)

    def seq_target_verdict(self, j: int) -> None:
        step = self.steps[j]
        if step.outcome == "rescue":
            self.seq_catch_up(j, step.target_tokens)
            return
        self.target_kv = min(self.target_kv, self.ctx)
        self.drop(step.backtrack_steps)
        r = step.regenerated_tokens
        if not r:
            self.seq_next(j)
            return
        self.request("target", "regenerate", self.target_generate_ms(r), j, r,
                     Priority.TARGET, self.transfer, r, j, self.seq_regen_score, j)

    def seq_regen_score(self, j: int) -> None:
        r = self.steps[j].regenerated_tokens
        self.request("prm", "score_regen", self.cfg.prm.prefill_ms(self.ctx + r), j, r,
                     Priority.VERDICT, self.seq_catch_up, j, r)

    def seq_catch_up(self, j: int, tokens: int) -> None:
        """The target's tokens join the validated context; the draft GPU prefills them."""
        self.commit(tokens)
        self.target_kv = self.ctx
        if j + 1 == self.n:
            self.finish()
            return
        self.request("draft", "draft_prefill", self.draft_t.prefill_ms(tokens), j, tokens,
                     Priority.SYNC, self.seq_next, j)

    def seq_next(self, j: int) -> None:
        if j + 1 < self.n:
            self.seq_draft(j + 1)
        else:
            self.finish()

    # ------------------------------------------------------------------ overlapped modes

    def draft_step(self, j: int) -> None:
        d = self.steps[j].draft_tokens
        kv = self.ctx + (self.steps[self.v].draft_tokens if j == self.v + 1 else 0)
        self.request("draft", "draft", self.draft_ms(d, kv), j, d, Priority.DRAFT,
                     self.draft_done, j)

    def draft_done(self, j: int) -> None:
        if j == self.v and not self.pending:
            self.submit(j)
        elif j == self.v + 1 and self.pending:
            self.ahead_ready = j
            self.ahead_interval = self.intervals[-1]
            self.stall_start = self.loop.now
        else:  # pragma: no cover - guarded by the state machine
            raise ScheduleError(f"draft of step {j} finished in an unexpected state "
                                f"(v={self.v}, pending={self.pending})")

    def submit(self, j: int) -> None:
        self.pending = True
        d = self.steps[j].draft_tokens
        self.transfer(d, j, self.request, "prm", "score_draft",
                      self.cfg.prm.prefill_ms(self.ctx + d), j, d, Priority.VERDICT,
                      self.verdict, j)
        if j + 1 < self.n:
            self.draft_step(j + 1)

    def prefetch(self, j: int) -> None:
        step = self.steps[j]
        tokens = step.target_tokens if step.outcome != "accept" else \
            step.prefetch_tokens or PREFETCH_LIMIT_TOKENS
        self.request("target", "prefetch", self.target_generate_ms(tokens), j, tokens,
                     Priority.TARGET, self.target_done_handler, j)

    def target_done_handler(self, j: int) -> None:
        self.target_done[j] = self.loop.now
        if self.rejected == j:
            self.refine(j)

    def verdict(self, j: int) -> None:
        self.pending = False
        step = self.steps[j]
        if step.outcome == "accept":
            running = self.running["target"]
            if running is not None and running[1] == "prefetch" and running[4] == j:
                # interrupted, not wasted: its tokens are cached for a later regeneration
                self.cache[len(self.chain)] = self.cancel("target", wasted=False)[5]
            elif j in self.target_done:
                self.cache[len(self.chain)] = step.prefetch_tokens or PREFETCH_LIMIT_TOKENS
            self.commit(step.draft_tokens)
            self.v = j + 1
            if self.v == self.n:
                self.finish()
                return
            self.prefetch(self.v)
            if self.ahead_ready == self.v:
                self.intervals.append(["draft", "stall", self.stall_start, self.loop.now,
                                       self.v, 0, False, 0, self.epoch])
                self.stalled_steps += 1
                self.ahead_ready = None
                self.submit(self.v)
            return
        # rejected: the step-ahead draft is squashed; the target's run for step j goes on
        self.squash_draft()
        self.rejected = j
        if self.mode.on_fpga:
            self.shadow_ingest(j, self.steps[j].target_tokens, self.target_end(j))
        if j in self.target_done:
            self.refine(j)

    def squash_draft(self) -> None:
        self.cancel("draft")
        if self.ahead_ready is not None:
            self.ahead_interval[6] = True
            self.intervals.append(["draft", "stall", self.stall_start, self.loop.now,
                                   self.ahead_ready, 0, False, 0, self.epoch])
            self.stalled_steps += 1
            self.ahead_ready = None

    def target_end(self, j: int) -> float:
        if j in self.target_done:
            return self.target_done[j]
        running = self.running["target"]
        if running is not None and running[4] == j:
            return running[3]
        # queued behind other target work: it ends no earlier than now
        return self.loop.now

    def shadow_ingest(self, j: int, tokens: int, last_token_ms: float) -> None:
        """The FPGA ingests the target's tokens as they stream in.

        Ingestion keeps pace with the stream, so it ends when the last token has arrived and
        been ingested, or ``ingest_ms(tokens)`` after it could begin, whichever is later. The
        FPGA is busy for ``ingest_ms(tokens)`` of that: the busy interval is placed at its end
        (the device waits for tokens, idle, before it).
        """
        busy = self.draft_t.ingest_ms(tokens, self.ctx)
        one = self.cfg.link.tokens_ms(1) + self.draft_t.ingest_ms(1, self.ctx + tokens - 1)
        start = max(self.loop.now, last_token_ms + one - busy)
        if start > self.loop.now:
            self.loop.at(start, Priority.START, self._delayed_ingest, self.epoch, j, tokens,
                         busy)
        else:
            self.request("draft", "ingest", busy, j, tokens, Priority.SYNC, self.synced, j)

    def _delayed_ingest(self, epoch: int, j: int, tokens: int, busy: float) -> None:
        if epoch == self.epoch and self.done_ms is None:
            self.request("draft", "ingest", busy, j, tokens, Priority.SYNC, self.synced, j)

    def refine(self, j: int) -> None:
        """The target's step ``j`` is ready: send it, score it (BRSD), resynchronise the draft."""
        self.rejected = None
        t = self.steps[j].target_tokens
        self.transfer(t, j, self.request, "prm", "score_target",
                      self.cfg.prm.prefill_ms(self.ctx + t), j, t, Priority.VERDICT,
                      self.target_verdict, j)
        if not self.mode.on_fpga:
            self.transfer(t, j, self.request, "draft", "draft_prefill",
                          self.draft_t.prefill_ms(t), j, t, Priority.SYNC, self.synced, j)
        # speculatively, the target's step joins the context; a failed score undoes it
        self.commit(t)
        self.target_kv = self.ctx
        self.v = j + 1
        if self.v < self.n:
            self.prefetch(self.v)

    def synced(self, j: int) -> None:
        if j != self.v - 1:
            return
        if self.v < self.n and self.running["draft"] is None:
            self.draft_step(self.v)

    def target_verdict(self, j: int) -> None:
        step = self.steps[j]
        if step.outcome == "rescue":
            if self.v == self.n and j == self.n - 1:
                self.finish()
            return
        self.backtrack(j)

    def backtrack(self, j: int) -> None:
        step = self.steps[j]
        self.epoch += 1
        for res in RESOURCES:  # everything running was started before the failed score
            self.cancel(res)
        self.pending = False
        self.ahead_ready = None
        self.drop(1 + step.backtrack_steps)  # the failed target step and the dropped steps
        self.v = j + 1
        r = step.regenerated_tokens
        if not r:
            if self.v == self.n:
                self.finish()
            else:
                self.draft_step(self.v)
                self.prefetch(self.v)
            return
        position = len(self.chain)
        reuse = min(self.cache.pop(position, 0), r)
        self.reused += reuse
        cost = (self.cfg.target.prefill_ms(reuse) if reuse else 0.0) + \
            self.cfg.target.decode_ms(r - reuse, self.ctx + reuse)
        self.request("target", "regenerate", cost, j, r, Priority.TARGET, self.regenerated, j)
        if self.mode.on_fpga:
            self.shadow_ingest(j, r, self.loop.now + cost)

    def regenerated(self, j: int) -> None:
        r = self.steps[j].regenerated_tokens
        self.transfer(r, j, self.request, "prm", "score_regen",
                      self.cfg.prm.prefill_ms(self.ctx + r), j, r, Priority.VERDICT,
                      self.regen_scored, j)
        if not self.mode.on_fpga:
            self.transfer(r, j, self.request, "draft", "draft_prefill",
                          self.draft_t.prefill_ms(r), j, r, Priority.SYNC, self.synced, j)
        self.commit(r)
        self.target_kv = self.ctx
        if self.v < self.n:
            self.prefetch(self.v)

    def regen_scored(self, j: int) -> None:
        if self.v == self.n and j == self.n - 1:
            self.finish()

    # ------------------------------------------------------------------ run

    def run(self) -> ProblemRun:
        self.start()
        self.loop.run()
        if self.done_ms is None:
            raise ScheduleError(f"problem {self.trace.problem_id}: the replay stopped at step "
                                f"{self.v} of {self.n} (mode {self.mode.value})")
        intervals = tuple(Interval(r[0], r[1], r[2], r[3], r[4], r[5], r[6])
                          for r in self.intervals)
        return ProblemRun(self.trace, self.cfg.name, self.mode, intervals, self.done_ms,
                          sum(self.chain), self.stalled_steps, self.reused, self.loop.events)


def simulate_problem(trace: ProblemTrace, config: SystemConfig, mode: Mode) -> ProblemRun:
    """Replay one problem; raises :class:`ScheduleError` if the mode cannot replay it."""
    if not mode.backtracking and trace.backtracks:
        raise ScheduleError(f"problem {trace.problem_id} ({trace.dataset}) has "
                            f"{trace.backtracks} backtrack(s): mode {mode.value} replays "
                            "traces without backtracking")
    run = _Problem(trace, config, mode).run()
    check_timeline(run)
    return run


def check_timeline(run: ProblemRun) -> None:
    """Invariants: no resource busy twice at once, no interval backwards or past the end,
    every accepted token accounted for exactly once."""
    where = f"problem {run.trace.problem_id} ({run.trace.dataset}, {run.mode.value})"
    by_resource: dict[str, list[Interval]] = {r: [] for r in RESOURCES}
    for iv in run.intervals:
        if iv.end_ms < iv.start_ms - _EPS:
            raise ScheduleError(f"{where}: {iv} ends before it starts")
        if iv.end_ms > run.latency_ms + _EPS:
            raise ScheduleError(f"{where}: {iv} ends after the problem ({run.latency_ms} ms)")
        if iv.kind != "stall":
            by_resource[iv.resource].append(iv)
    for res, items in by_resource.items():
        items.sort(key=lambda iv: (iv.start_ms, iv.end_ms))
        for a, b in itertools.pairwise(items):
            if b.start_ms < a.end_ms - _EPS:
                raise ScheduleError(f"{where}: {res} busy twice at once: {a} and {b}")
    if run.output_tokens != run.trace.output_tokens:
        raise ScheduleError(f"{where}: {run.output_tokens} tokens accepted, the trace's chain "
                            f"has {run.trace.output_tokens}")
