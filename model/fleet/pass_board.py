"""An FPGA board that drafts for several problems a pass of its weights (:class:`PassBoard`):
the MultiDraftEngine (rtl/multi_engine.py), priced by the calibrated pass
(:mod:`heteroreason.model.timing.fpga.passes`).

Up to ``per_pass`` draft jobs share the passes, a token each a pass: a *segment* is a run of
passes with the same drafts, up to the first draft's last token, each pass priced by the
board's :class:`~heteroreason.model.timing.fpga.passes.PassTable` at the drafts' positions then
(one further each pass). A draft that arrives, is cancelled or promoted waits for the end of the
pass in flight: the run is cut there and planned again. Any other job (an ingest, a prefill)
runs alone between passes at its batch-1 cost, the drafts in progress paused meanwhile (the
RTL lets an ingest share passes with drafts; the model does not: a cost it overstates).
Critical work goes before step-ahead drafts, then in order of
submission, as on the GPUs (:mod:`~heteroreason.model.fleet.batched_gpu`).
"""

from __future__ import annotations

import bisect
import itertools

from heteroreason.model.fleet.devices import GpuWork, Item, SharedDevice, job_name, rank
from heteroreason.model.system.event_loop import EventLoop
from heteroreason.model.timing.fpga.passes import PassTable

__all__ = ["PassBoard"]


class PassBoard(SharedDevice):
    """A board drafting up to ``table.per_pass`` problems' tokens a pass."""

    takes_plain = True  # its drafts come shaped (their tokens and positions), other jobs plain

    def __init__(self, name: str, pool: str, loop: EventLoop, table: PassTable):
        super().__init__(name, pool, loop)
        self.table = table
        # _seg: ("alone", start_ms, (ms,)) or ("passes", start_ms, cumulative ms of each pass)
        self.iterations = 0  # passes run

    # ------------------------------------------------------------------ the owners' side

    def submit(self, item: Item, work: GpuWork | None) -> None:
        """``item`` joins the waiting jobs: a draft of ``work.decode`` tokens after
        ``work.kv``, or (``work`` None, or no tokens) a job run alone."""
        alone = work is None or work.decode == 0
        item.foreign = alone
        item.decode_left = 0 if alone else work.decode
        item.kv = 0 if alone else work.kv
        item.kv_tokens = item.decode_left  # the draft's tokens, for its share of progress
        self._seq += 1
        item.seq = self._seq
        self.outstanding_ms += item.work_ms
        self._queue_change(+1)
        self.waiting.append(item)
        self._changed()

    # ------------------------------------------------------------------ planning

    def _changed(self) -> None:
        if self._in_callbacks:
            return
        if self._seg is None:
            self._plan()
            return
        kind, start, cum = self._seg
        if kind != "passes":
            return  # a job alone runs to its end
        elapsed = self.loop.now - start
        if elapsed <= 0:
            self._token += 1
            self._seg = None
            self._plan()
            return
        done = bisect.bisect_right(cum, elapsed)  # passes complete by now
        cut = done if done and cum[done - 1] >= elapsed else done + 1
        if cut < len(cum):
            self._token += 1
            self._seg = (kind, start, cum[:cut])
            self.loop.at(start + cum[cut - 1], self._priority, self._end, self._token)

    def _plan(self) -> None:
        waiting = self.waiting
        if waiting:
            if len(waiting) > 1:
                waiting.sort(key=rank)
            candidates = sorted(self.batch + waiting, key=rank)
            if candidates[0].foreign:
                chosen = [candidates[0]]
            else:
                chosen = [i for i in candidates if not i.foreign][:self.table.per_pass]
            taken = set(map(id, chosen))
            rest = [i for i in candidates if id(i) not in taken]
            now = self.loop.now
            for item in chosen:
                if not item.started:
                    item.started = True
                    item.start_ms = now
                    self._queue_change(-1)
                    self.wait_ms += now - item.submit_ms
                    self.items_served += 1
            self.batch, self.waiting = chosen, rest
        elif not self.batch:
            return
        chosen = self.batch
        now = self.loop.now
        priority = min(i.priority for i in chosen)
        if chosen[0].foreign:
            self._seg = ("alone", now, (chosen[0].work_ms - chosen[0].done_ms,))
        else:
            n = len(chosen)
            positions = sum(i.kv for i in chosen)
            passes = min(i.decode_left for i in chosen)
            ms_at = self.table.ms_at
            self._seg = ("passes", now, tuple(itertools.accumulate(
                ms_at(n, positions + n * j) for j in range(passes))))
        self._token += 1
        self._priority = priority
        self.loop.at(now + self._seg[2][-1], priority, self._end, self._token)

    # ------------------------------------------------------------------ progress

    def _close_emptied(self) -> None:
        self._close_segment(self.loop.now, 1, self._passes_by_now())

    def _passes_by_now(self) -> int:
        kind, start, cum = self._seg
        return bisect.bisect_right(cum, self.loop.now - start) if kind == "passes" else 1

    def _partial_ms(self, item: Item) -> float:
        """Batch-1 work the running segment has done for ``item`` by now."""
        kind, start, cum = self._seg
        elapsed = self.loop.now - start
        if kind == "alone":
            return min(elapsed, cum[0])
        done = bisect.bisect_right(cum, elapsed)
        tokens = float(done)
        if done < len(cum):
            before = cum[done - 1] if done else 0.0
            tokens += (elapsed - before) / (cum[done] - before)
        return item.work_ms * tokens / item.kv_tokens

    def _close_segment(self, now: float, items: int, passes: int) -> None:
        kind, start, _ = self._seg
        self.busy_ms += now - start
        if self.activity is not None:
            what = job_name(self.batch[0]) if kind == "alone" and self.batch else kind
            self._log(start, what, items, passes,
                      self.batch[0].owner.index if kind == "alone" and self.batch else -1)
        self.iterations += passes if kind == "passes" else 0
        self._seg = None
        self._token += 1

    def _end(self, token: int) -> None:
        if token != self._token:
            return
        kind, _start, cum = self._seg
        finished = []
        for item in self.batch:
            if kind == "alone":
                finished.append(item)
                continue
            k = len(cum)
            item.kv += k
            item.decode_left -= k
            item.done_ms += item.work_ms * k / item.kv_tokens
            if item.decode_left == 0:
                finished.append(item)
        self._close_segment(self.loop.now, len(self.batch), len(cum))
        self._finish(finished)
