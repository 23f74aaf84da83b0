"""The overlapped modes (``t2``, ``heteroreason``): the draft drafts step ``i+1`` while step
``i`` is verified and stalls at its end until the verdict; the target starts each step as soon
as its context is known (an accept interrupts it and caches its partial tokens, no KV; a reject
lets it run on); a backtrack's regeneration reuses cached tokens of the same position at prefill
instead of decode cost; a reject discards the step-ahead draft, a failed target step everything
speculative. On the FPGA the draft ingests the target's tokens as they stream (shadow
synchronisation) instead of prefilling them."""

from __future__ import annotations

from heteroreason.model.system.event_loop import Priority
from heteroreason.model.system.records import JobKind, Record, Station
from heteroreason.model.system.replay import Replay, ScheduleError
from heteroreason.model.workload.traces import StepOutcome

__all__ = ["PREFETCH_LIMIT_TOKENS", "OverlappedReplay"]

# an accepted step's prefetch runs until interrupted, at most this, unless the trace records the
# length of the target's step (``prefetch_tokens``)
PREFETCH_LIMIT_TOKENS = 2048


class OverlappedReplay(Replay):
    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.pending = False  # a drafted step awaits its verdict
        self.ahead_ready: int | None = None  # the step-ahead draft that is done and stalls
        self.ahead_record: Record | None = None
        self.stall_start = 0.0
        self.rejected: int | None = None  # a rejected step whose target run is still going
        self.target_done: dict[int, float] = {}
        self.cache: dict[int, int] = {}  # chain position -> the target's cached tokens
        self.early_sync: int | None = None  # a step ingested before it was refined
        self.regenerating: int | None = None  # a backtrack's step the target still regenerates

    def start(self) -> None:
        super().start()
        self.prefetch(0)

    def first_draft(self) -> None:
        self.draft_step(0)

    def draft_step(self, j: int) -> None:
        d = self.steps[j].draft_tokens
        kv = self.ctx + (self.steps[self.v].draft_tokens if j == self.v + 1 else 0)
        self.request(Station.DRAFT, JobKind.DRAFT, self.draft_ms(d, kv), j, d, Priority.DRAFT,
                     self.draft_done, j)

    def draft_done(self, j: int) -> None:
        if j == self.v and not self.pending:
            self.submit(j)
        elif j == self.v + 1 and self.pending:
            self.ahead_ready = j
            self.ahead_record = self.records[-1]
            self.stall_start = self.loop.now
        else:  # pragma: no cover - guarded by the state machine
            raise ScheduleError(f"draft of step {j} finished in an unexpected state "
                                f"(v={self.v}, pending={self.pending})")

    def submit(self, j: int) -> None:
        self.pending = True
        d = self.steps[j].draft_tokens
        self.transfer(d, j, self.request, Station.PRM, JobKind.SCORE_DRAFT,
                      self.score_ms(self.ctx + d), j, d, Priority.VERDICT,
                      self.verdict, j)
        if j + 1 < self.n:
            self.draft_step(j + 1)

    def prefetch(self, j: int) -> None:
        step = self.steps[j]
        tokens = step.target_tokens if step.outcome is not StepOutcome.ACCEPT else \
            step.prefetch_tokens or PREFETCH_LIMIT_TOKENS
        self.request(Station.TARGET, JobKind.PREFETCH, self.target_generate_ms(tokens), j,
                     tokens, Priority.TARGET, self.target_finished, j)

    def target_finished(self, j: int) -> None:
        self.target_done[j] = self.loop.now
        if self.rejected == j:
            self.refine(j)

    def verdict(self, j: int) -> None:
        self.pending = False
        step = self.steps[j]
        if step.outcome is StepOutcome.ACCEPT:
            running = self.running[Station.TARGET]
            if running is not None and running.kind is JobKind.PREFETCH and running.step == j:
                # interrupted, not wasted: its tokens are cached for a later regeneration
                self.cache[len(self.chain)] = self.cancel(Station.TARGET, wasted=False).tokens
            elif j in self.target_done:
                self.cache[len(self.chain)] = step.prefetch_tokens or PREFETCH_LIMIT_TOKENS
            else:
                # still queued behind earlier target work: accepted before it began, it never
                # will (it would only delay the target's later steps)
                self.drop_queued(Station.TARGET, JobKind.PREFETCH, j)
            self.commit(step.draft_tokens)
            self.v = j + 1
            if self.v == self.n:
                self.finish()
                return
            self.prefetch(self.v)
            if self.ahead_ready == self.v:
                self.stall(self.stall_start, self.v)
                self.ahead_ready = None
                self.submit(self.v)
            return
        # rejected: the step-ahead draft is squashed; the target's run for step j goes on
        self.squash_draft()
        self.rejected = j
        self.promote(Station.TARGET, j)  # what the step now waits for is no longer ahead
        if self.mode.on_fpga:
            self.shadow_ingest(j, self.steps[j].target_tokens, self.target_end(j))
        if j in self.target_done:
            self.refine(j)

    def squash_draft(self) -> None:
        self.cancel(Station.DRAFT)
        if self.ahead_ready is not None:
            self.ahead_record.wasted = True
            self.stall(self.stall_start, self.ahead_ready)
            self.ahead_ready = None

    def target_end(self, j: int) -> float:
        if j in self.target_done:
            return self.target_done[j]
        running = self.running[Station.TARGET]
        if running is not None and running.step == j:
            return running.end_ms
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
            self.request(Station.DRAFT, JobKind.INGEST, busy, j, tokens, Priority.SYNC,
                         self.synced, j)

    def _delayed_ingest(self, epoch: int, j: int, tokens: int, busy: float) -> None:
        if epoch == self.epoch and self.done_ms is None:
            self.request(Station.DRAFT, JobKind.INGEST, busy, j, tokens, Priority.SYNC,
                         self.synced, j)

    def refine(self, j: int) -> None:
        """The target's step ``j`` is ready: send it, score it (BRSD), resynchronise the draft."""
        self.rejected = None
        t = self.steps[j].target_tokens
        self.transfer(t, j, self.request, Station.PRM, JobKind.SCORE_TARGET,
                      self.score_ms(self.ctx + t), j, t, Priority.VERDICT,
                      self.target_verdict, j)
        if not self.mode.on_fpga:
            self.transfer(t, j, self.request, Station.DRAFT, JobKind.DRAFT_PREFILL,
                          self.work(self.draft_t, prefill=t), j, t, Priority.SYNC, self.synced, j)
        # speculatively, the target's step joins the context; a failed score undoes it
        self.commit(t)
        self.target_kv = self.ctx
        self.v = j + 1
        if self.v < self.n:
            self.prefetch(self.v)
        if self.early_sync == j:
            self.early_sync = None
            self.synced(j)

    def synced(self, j: int) -> None:
        if (j == self.v and self.rejected == j) or self.regenerating == j:
            # ingested before the target's step was refined or regenerated: the ingest's end
            # was placed by an estimate of the target's (in a fleet, batching can stretch the
            # target's step); the draft resumes when the step is ready
            self.early_sync = j
            return
        if j != self.v - 1:
            return
        if self.v < self.n and self.running[Station.DRAFT] is None:
            self.draft_step(self.v)

    def target_verdict(self, j: int) -> None:
        step = self.steps[j]
        if step.outcome is StepOutcome.RESCUE:
            if self.v == self.n and j == self.n - 1:
                self.finish()
            return
        self.backtrack(j)

    def backtrack(self, j: int) -> None:
        step = self.steps[j]
        self.epoch += 1
        for res in Station:  # everything running was started before the failed score
            self.cancel(res)
        self.pending = False
        self.ahead_ready = None
        self.regenerating = None
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
        cost = self.work(self.cfg.target, prefill=reuse or None, decode=r - reuse,
                         kv=self.ctx + reuse)
        self.regenerating = j
        self.request(Station.TARGET, JobKind.REGENERATE, cost, j, r, Priority.TARGET,
                     self.regenerated, j)
        if self.mode.on_fpga:
            self.shadow_ingest(j, r, self.loop.now + self.cost_ms(cost))

    def regenerated(self, j: int) -> None:
        r = self.steps[j].regenerated_tokens
        self.transfer(r, j, self.request, Station.PRM, JobKind.SCORE_REGEN,
                      self.score_ms(self.ctx + r), j, r, Priority.VERDICT,
                      self.regen_scored, j)
        if not self.mode.on_fpga:
            self.transfer(r, j, self.request, Station.DRAFT, JobKind.DRAFT_PREFILL,
                          self.work(self.draft_t, prefill=r), j, r, Priority.SYNC, self.synced, j)
        self.commit(r)
        self.target_kv = self.ctx
        self.regenerating = None
        if self.v < self.n:
            self.prefetch(self.v)
        if self.early_sync == j:
            self.early_sync = None
            self.synced(j)

    def regen_scored(self, j: int) -> None:
        if self.v == self.n and j == self.n - 1:
            self.finish()
