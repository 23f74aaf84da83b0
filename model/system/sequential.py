"""The sequential modes (``rsd``, ``baseline``): one activity at a time — draft, transfer, PRM,
and on a reject the target, transfer, PRM of the target's step (not in ``rsd``), a backtrack's
regeneration and its scoring, and the draft's catch-up."""

from __future__ import annotations

from heteroreason.model.system.config import ServingMode
from heteroreason.model.system.event_loop import Priority
from heteroreason.model.system.records import JobKind, Station
from heteroreason.model.system.replay import Replay
from heteroreason.model.workload.traces import StepOutcome

__all__ = ["SequentialReplay"]


class SequentialReplay(Replay):
    def first_draft(self) -> None:
        self.draft(0)

    def draft(self, j: int) -> None:
        d = self.steps[j].draft_tokens
        self.request(Station.DRAFT, JobKind.DRAFT, self.draft_ms(d, self.ctx), j, d,
                     Priority.DRAFT, self.transfer, d, j, self.score, j)

    def score(self, j: int) -> None:
        d = self.steps[j].draft_tokens
        self.request(Station.PRM, JobKind.SCORE_DRAFT, self.score_ms(self.ctx + d),
                     j, d, Priority.VERDICT, self.verdict, j)

    def verdict(self, j: int) -> None:
        step = self.steps[j]
        if step.outcome is StepOutcome.ACCEPT:
            self.commit(step.draft_tokens)
            self.next_step(j)
            return
        t = step.target_tokens
        self.request(Station.TARGET, JobKind.GENERATE, self.target_generate_ms(t), j, t,
                     Priority.TARGET, self.transfer, t, j, self.target_done, j)

    def target_done(self, j: int) -> None:
        step = self.steps[j]
        if self.mode is ServingMode.RSD:
            self.catch_up(j, step.target_tokens)
            return
        t = step.target_tokens
        self.request(Station.PRM, JobKind.SCORE_TARGET, self.score_ms(self.ctx + t),
                     j, t, Priority.VERDICT, self.target_verdict, j)

    def target_verdict(self, j: int) -> None:
        step = self.steps[j]
        if step.outcome is StepOutcome.RESCUE:
            self.catch_up(j, step.target_tokens)
            return
        self.target_kv = min(self.target_kv, self.ctx)
        self.drop(step.backtrack_steps)
        r = step.regenerated_tokens
        if not r:
            self.next_step(j)
            return
        self.request(Station.TARGET, JobKind.REGENERATE, self.target_generate_ms(r), j, r,
                     Priority.TARGET, self.transfer, r, j, self.regen_score, j)

    def regen_score(self, j: int) -> None:
        r = self.steps[j].regenerated_tokens
        self.request(Station.PRM, JobKind.SCORE_REGEN, self.score_ms(self.ctx + r),
                     j, r, Priority.VERDICT, self.catch_up, j, r)

    def catch_up(self, j: int, tokens: int) -> None:
        """The target's tokens join the validated context; the draft GPU prefills them."""
        self.commit(tokens)
        self.target_kv = self.ctx
        if j + 1 == self.n:
            self.finish()
            return
        self.request(Station.DRAFT, JobKind.DRAFT_PREFILL,
                     self.work(self.draft_t, prefill=tokens), j, tokens, Priority.SYNC,
                     self.next_step, j)

    def next_step(self, j: int) -> None:
        if j + 1 < self.n:
            self.draft(j + 1)
        else:
            self.finish()
