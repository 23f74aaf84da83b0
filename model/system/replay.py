"""The machinery every replay shares: the four resources with their queues, the event loop, the
reasoning state (the validated chain and the target's KV) and the costs of common work. The
modes' state machines subclass :class:`Replay` (:mod:`~heteroreason.model.system.sequential`,
:mod:`~heteroreason.model.system.overlapped`)."""

from __future__ import annotations

from collections import deque
from collections.abc import Callable

from heteroreason.model.system.config import ServingMode, SystemConfig
from heteroreason.model.system.event_loop import EventLoop, Priority
from heteroreason.model.system.records import (
    STATIONS,
    Job,
    JobKind,
    ProblemRun,
    Record,
    Station,
)
from heteroreason.model.timing.device_timing import LlmTiming
from heteroreason.model.workload.traces import ProblemTrace

__all__ = ["Replay", "ScheduleError"]


class ScheduleError(ValueError):
    """A trace that the chosen mode cannot replay, or a broken invariant."""


class Replay:
    """One problem's replay on one system in one mode; :meth:`run` returns its timeline."""

    def __init__(self, trace: ProblemTrace, config: SystemConfig, mode: ServingMode):
        self.trace = trace
        self.cfg = config
        self.mode = mode
        self.steps = trace.steps
        self.n = len(trace.steps)
        self.loop = EventLoop()
        self.draft_t = config.draft(mode).timing
        self.records: list[Record] = []
        self.running: dict[Station, Record | None] = dict.fromkeys(STATIONS)
        self.queues: dict[Station, deque[Job]] = {r: deque() for r in STATIONS}
        self.job_id = 0
        self.epoch = 0
        self.chain: list[int] = []  # tokens of each validated step
        # validated tokens: the prompt (unless the configuration's convention leaves it out)
        # and the chain
        self.ctx = trace.prompt_tokens if config.prompt_in_contexts else 0
        self.target_kv = 0
        self.v = 0  # the step being decided
        self.done_ms: float | None = None
        self.stalled_steps = 0
        self.reused = 0

    # ------------------------------------------------------------------ resources

    def request(self, res: Station, kind: JobKind, duration: float, step: int, tokens: int,
                priority: Priority, done: Callable[..., None] | None = None, *args) -> None:
        if self.running[res] is None:
            self._start(res, kind, duration, step, tokens, priority, done, args, self.epoch)
        else:
            self.queues[res].append(Job(kind, duration, step, tokens, priority, done, args,
                                        self.epoch))

    def _start(self, res: Station, kind: JobKind, duration, step: int, tokens: int,
               priority: Priority, done, args: tuple, epoch: int) -> None:
        """Start a job (the fields of :class:`Job`) on the free resource ``res``."""
        now = self.loop.now
        self.job_id += 1
        self.running[res] = Record(res, kind, now, now + duration, step, tokens, False,
                                   self.job_id, epoch)
        self.loop.at(now + duration, priority, self._finish, res, self.job_id, done, args)

    def _finish(self, res: Station, job_id: int, done, args) -> None:
        record = self.running[res]
        if record is None or record.job_id != job_id:
            return  # cancelled
        self.records.append(record)
        self._next(res)
        if done is not None:
            done(*args)

    def _next(self, res: Station) -> None:
        self.running[res] = None
        queue = self.queues[res]
        while queue:
            job = queue.popleft()
            if job.epoch == self.epoch:
                self._start(res, *job)
                return
            # a stale job (from before a backtrack) never starts

    def cancel(self, res: Station, *, wasted: bool = True) -> Record | None:
        """Stop the running job now, recording its partial work (as wasted by default)."""
        record = self.running[res]
        if record is None:
            return None
        now = self.loop.now
        if record.end_ms > record.start_ms:
            record.tokens = int(record.tokens * (now - record.start_ms)
                                / (record.end_ms - record.start_ms))
        record.end_ms = now
        record.wasted = wasted
        self.records.append(record)
        self._next(res)
        return record

    def transfer(self, tokens: int, step: int, done, *args) -> None:
        self.request(Station.LINK, JobKind.TOKENS, self.cfg.link.tokens_ms(tokens), step,
                     tokens, Priority.TRANSFER, done, *args)

    def drop_queued(self, res: Station, kind: JobKind, step: int) -> None:
        """Forget the jobs of ``kind`` for ``step`` still waiting for ``res``."""
        queue = self.queues[res]
        for job in [job for job in queue if job.kind is kind and job.step == step]:
            queue.remove(job)

    def promote(self, res: Station, step: int) -> None:
        """Step ``step``'s work on ``res``, begun ahead of a verdict, is now what the problem
        waits for. (One problem alone on its devices: nothing to do. The fleet's shared devices
        serve it before speculative work from then on.)"""

    def stall(self, start_ms: float, step: int) -> None:
        """The step-ahead draft of ``step`` waited from ``start_ms`` until now."""
        self.records.append(Record(Station.DRAFT, JobKind.STALL, start_ms, self.loop.now, step,
                                   0, False, 0, self.epoch))
        self.stalled_steps += 1

    # ------------------------------------------------------------------ common costs

    def work(self, model: LlmTiming, *, prefill: int | None = None, decode: int = 0,
             kv: int = 0) -> float:
        """The batch-1 cost of one call of ``model``: a prefill of ``prefill`` tokens (none when
        ``None``), then ``decode`` tokens after ``kv`` cached ones. (The fleet simulator
        overrides this to keep the call's shape for its batched devices.)"""
        ms = model.prefill_ms(prefill) if prefill is not None else 0.0
        return ms + model.decode_ms(decode, kv) if decode else ms

    @staticmethod
    def cost_ms(work) -> float:
        """The milliseconds of what :meth:`work` returned."""
        return work

    def draft_ms(self, tokens: int, kv: int) -> float:
        return self.work(self.draft_t, decode=tokens, kv=kv)

    def score_ms(self, tokens: int) -> float:
        """The PRM scores ``tokens`` of context and step (a prefill of them all)."""
        return self.work(self.cfg.prm, prefill=tokens)

    def target_generate_ms(self, tokens: int) -> float:
        new = max(self.ctx - self.target_kv, 0)
        self.target_kv = self.ctx
        return self.work(self.cfg.target, prefill=new or None, decode=tokens, kv=self.ctx)

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
        for res in STATIONS:
            self.queues[res].clear()
            self.cancel(res)

    # ------------------------------------------------------------------ start

    def start(self) -> None:
        prompt = self.trace.prompt_tokens
        if self.mode.on_fpga:
            # the GPU prefills the prompt with the draft model, then the KV migrates
            self.request(Station.TARGET, JobKind.DRAFT_PROMPT_PREFILL,
                         self.work(self.cfg.draft_gpu, prefill=prompt), -1, prompt, Priority.TARGET,
                         self._migrate)
        else:
            self.request(Station.DRAFT, JobKind.PROMPT_PREFILL,
                         self.work(self.draft_t, prefill=prompt), -1, prompt, Priority.SYNC,
                         self.first_draft)

    def _migrate(self) -> None:
        kv_ms = self.cfg.link.kv_migration_ms(self.cfg.draft_model, self.trace.prompt_tokens,
                                              bytes_per_element=self.cfg.kv_bytes_per_element)
        self.request(Station.LINK, JobKind.KV_MIGRATION, kv_ms, -1, self.trace.prompt_tokens,
                     Priority.TRANSFER, self._first_token)

    def _first_token(self) -> None:
        # INIT(pos) and the GPU's first token with ``last``: one ingested token
        self.request(Station.DRAFT, JobKind.INGEST, self.draft_t.ingest_ms(1, self.ctx), -1, 1,
                     Priority.SYNC, self.first_draft)

    def first_draft(self) -> None:
        """The draft device holds the prompt: draft the first step."""
        raise NotImplementedError

    # ------------------------------------------------------------------ run

    def run(self) -> ProblemRun:
        self.start()
        self.loop.run()
        if self.done_ms is None:
            raise ScheduleError(f"problem {self.trace.problem_id}: the replay stopped at step "
                                f"{self.v} of {self.n} (mode {self.mode.value})")
        return ProblemRun(self.trace, self.cfg, self.mode,
                          tuple(r.interval() for r in self.records), self.done_ms,
                          sum(self.chain), self.stalled_steps, self.reused, self.loop.events)
