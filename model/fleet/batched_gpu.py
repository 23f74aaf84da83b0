"""The fleet's GPUs that batch continuously (:class:`BatchedGpu`).

A GPU runs *segments*: a special iteration (one with prefills or a decode call's overhead; or a
job of another model, alone), or a run of identical decode iterations up to the next item's
last token, priced in closed form with :class:`~heteroreason.model.timing.batch_cost.BatchCost`. A
new item, a cancelled one or a preemption waits for the end of the iteration in progress: the
run is cut there and the batch planned again — by priority (critical work before step-ahead
prefetches, which are paused when the batch is full, or beyond ``max_prefetch_items`` of them),
then in order of submission, as long as the items' KV fits the GPU's cache.
"""

from __future__ import annotations

import math

from heteroreason.model.fleet.devices import FleetError, GpuWork, Item, SharedDevice, rank
from heteroreason.model.system.event_loop import EventLoop
from heteroreason.model.timing.batch_cost import BatchCost

__all__ = ["BatchedGpu"]


class BatchedGpu(SharedDevice):
    """A GPU serving ``cost``'s model with continuous batching."""

    batches = True
    takes_plain = False  # every job comes shaped

    def __init__(self, name: str, pool: str, loop: EventLoop, cost: BatchCost, *,
                 max_prefetch_items: int | None = None):
        super().__init__(name, pool, loop)
        self.cost = cost
        self.max_prefetch_items = max_prefetch_items  # None: as many as the batch has room for
        # _seg: (kind, start_ms, k, a_ms, g_ms) of the running segment
        self.iterations = 0

    # ------------------------------------------------------------------ the owners' side

    def submit(self, item: Item, work: GpuWork) -> None:
        """``item`` joins the waiting items, shaped as ``work`` (for its pricing)."""
        prefill, decode, kv = work.prefill, work.decode, work.kv
        item.prefill = prefill
        item.decode_left = decode
        item.kv = kv
        item.call_pending = decode > 0 and work.model.decode_call_ms > 0
        item.kv_tokens = kv + decode if prefill is None or prefill < kv + decode else prefill
        item.foreign = work.model.name != self.cost.name
        if not item.foreign:
            if item.kv_tokens > self.cost.kv_capacity_tokens:
                raise FleetError(
                    f"{self.name}: a call needs {item.kv_tokens} KV tokens, the GPU's cache "
                    f"holds {self.cost.kv_capacity_tokens} (kv_capacity_tokens): raise the GPU's "
                    "memory or shorten the traces")
            if item.decode_left and not self.cost.decodes:
                raise FleetError(f"{self.name}: {self.cost.name} has no decode fit "
                                 "(decode_ms_per_token 0) but was asked to decode")
        self._seq += 1
        item.seq = self._seq
        self.outstanding_ms += item.work_ms
        now = self.loop.now  # (_queue_change(+1))
        self.queue_area_ms += self.queued * (now - self._queue_t)
        self._queue_t = now
        self.queued += 1
        self.waiting.append(item)
        self._changed()

    # ------------------------------------------------------------------ planning

    def _changed(self) -> None:
        if self._in_callbacks:
            return  # planned when the callbacks are done
        if self._seg is None:
            self._plan()
            return
        kind, start, k, a, g = self._seg
        if kind != "run":
            return  # a special iteration runs to its end, then the batch is planned again
        elapsed = self.loop.now - start
        if elapsed <= 0:
            self._token += 1
            self._seg = None
            self._plan()
            return
        done = _iterations_within(elapsed, a, g, k)
        cut = done + 1 if done * a + g * done * (done - 1) / 2 < elapsed else done
        if cut < k:
            self._token += 1
            self._seg = (kind, start, cut, a, g)
            self.loop.at(start + (cut * a + g * cut * (cut - 1) / 2), self._priority, self._end,
                         self._token)

    def _plan(self) -> None:
        cost = self.cost
        if self.waiting:
            waiting, batch = self.waiting, self.batch
            if len(waiting) > 1:
                waiting.sort(key=rank)
            if batch and rank(waiting[0]) < rank(batch[-1]):
                candidates = sorted(batch + waiting, key=rank)
            else:
                candidates = batch + waiting  # both in rank order, the batch first
            chosen, rest = [], []
            if candidates[0].foreign:
                chosen.append(candidates[0])
                rest = candidates[1:]
            else:
                kv, room, most = 0, cost.kv_capacity_tokens, cost.max_batch_items
                prefetch_room = self.max_prefetch_items
                for item in candidates:
                    if item.foreign or len(chosen) == most or kv + item.kv_tokens > room or \
                            (item.speculative and prefetch_room == 0):
                        rest.append(item)
                    else:
                        chosen.append(item)
                        kv += item.kv_tokens
                        if item.speculative and prefetch_room is not None:
                            prefetch_room -= 1
            now = self.loop.now
            for item in chosen:
                if not item.started:
                    item.started = True
                    item.start_ms = now
                    self.queue_area_ms += self.queued * (now - self._queue_t)  # _queue_change
                    self._queue_t = now
                    self.queued -= 1
                    self.wait_ms += now - item.submit_ms
                    self.items_served += 1
            self.batch, self.waiting = chosen, rest
            if not chosen:  # only prefetches wait, and none may run
                return
        elif self.batch:
            # nothing waits: the batch (in rank order, every item fitting, all served) goes on
            chosen = self.batch
        else:
            return
        now = self.loop.now
        first = chosen[0]
        priority = first.priority
        if first.foreign:
            seg = ("foreign", now, 1, first.work_ms - first.done_ms, 0.0)
            duration = seg[3]  # _run_ms(1, a, 0.0)
        else:
            special = False
            kv_sum = 0
            decode_left = first.decode_left
            for i in chosen:
                if i.prefill is not None or i.call_pending:
                    special = True
                kv_sum += i.kv
                if i.decode_left < decode_left:
                    decode_left = i.decode_left
                if i.priority < priority:
                    priority = i.priority
            if special:
                seg = ("special", now, 1, self._special_ms(chosen), 0.0)
                duration = seg[3]
            else:
                d = len(chosen)
                a = (max(cost.decode_floor_ms, cost.token_compute_ms * d)
                     + cost.kv_token_ms * (kv_sum + d) + cost.per_item_ms * (d - 1))
                seg = ("run", now, decode_left, a, cost.kv_token_ms * d)
                duration = _run_ms(decode_left, a, seg[4])
        self._seg = seg
        self._token += 1
        self._priority = priority
        self.loop.at(now + duration, priority, self._end, self._token)

    def _special_ms(self, items: list[Item]) -> float:
        prefills = prefill_tokens = prefill_sq = decodes = attended = calls = 0
        for i in items:
            if i.prefill is not None:
                prefills += 1
                prefill_tokens += i.prefill
                prefill_sq += i.prefill * i.prefill
            else:
                decodes += 1
                attended += i.kv + 1
                calls += i.call_pending
        return self.cost.iteration_sums_ms(prefills, prefill_tokens, prefill_sq, decodes,
                                           attended, calls)

    # ------------------------------------------------------------------ progress

    def _own_ms(self, item: Item) -> float:
        """The item's batch-1 cost of its next iteration."""
        cost = self.cost
        if item.prefill is not None:
            return cost.prefill_call_ms + cost.token_compute_ms * item.prefill + \
                cost.prefill_sq_ms * item.prefill ** 2
        return cost.decode_floor_ms + cost.kv_token_ms * (item.kv + 1) + \
            (cost.decode_call_ms if item.call_pending else 0.0)

    def _run_own_ms(self, item: Item, k: int) -> float:
        cost = self.cost
        return k * cost.decode_floor_ms + cost.kv_token_ms * (k * (item.kv + 1) + k * (k - 1) / 2)

    def _partial_ms(self, item: Item) -> float:
        """Batch-1 work the running segment has done for ``item`` by now."""
        kind, start, k, a, g = self._seg
        elapsed = self.loop.now - start
        if kind == "foreign":
            return min(elapsed, a)
        if kind == "special":
            total = _run_ms(1, a, g)
            return self._own_ms(item) * (elapsed / total if total > 0 else 1.0)
        done = _iterations_within(elapsed, a, g, k)
        ms = self._run_own_ms(item, done)
        if done < k:
            it_ms = a + g * done
            frac = (elapsed - _run_ms(done, a, g)) / it_ms if it_ms > 0 else 0.0
            ms += frac * (self.cost.decode_floor_ms + self.cost.kv_token_ms * (item.kv + done + 1))
        return ms

    def _close_emptied(self) -> None:
        self._close_segment(self.loop.now, 1)

    def _close_segment(self, now: float, items: int) -> None:
        kind, start, k, _a, _g = self._seg
        self.busy_ms += now - start
        if self.activity is not None:
            self._log(start, kind, items, k, -1)
        self.iterations += k
        self._seg = None
        self._token += 1

    def _end(self, token: int) -> None:
        if token != self._token:
            return
        kind, _start, k, _a, _g = self._seg
        finished = []
        if kind == "run":  # each item's batch-1 cost of k iterations (_run_own_ms, written out)
            floor_ms, kv_ms, pairs = k * self.cost.decode_floor_ms, self.cost.kv_token_ms, \
                k * (k - 1) / 2
        for item in self.batch:
            if kind == "foreign":
                item.done_ms = item.work_ms
                item.prefill, item.decode_left = None, 0
            elif kind == "special":
                item.done_ms += self._own_ms(item)
                if item.prefill is not None:
                    item.prefill = None
                else:
                    item.kv += 1
                    item.decode_left -= 1
                    item.call_pending = False
            else:
                item.done_ms += floor_ms + kv_ms * (k * (item.kv + 1) + pairs)
                item.kv += k
                item.decode_left -= k
            if item.prefill is None and item.decode_left == 0:
                finished.append(item)
        self._close_segment(self.loop.now, len(self.batch))
        self._finish(finished)


def _run_ms(k: int, a: float, g: float) -> float:
    """``k`` iterations costing ``a``, ``a + g``, ``a + 2g``, ..."""
    return k * a + g * k * (k - 1) / 2


def _iterations_within(elapsed: float, a: float, g: float, k: int) -> int:
    """The iterations of a run complete within ``elapsed`` (at most ``k``)."""
    if g > 0:
        # k a + g k (k - 1) / 2 <= elapsed
        b = a - g / 2
        n = int((-b + math.sqrt(b * b + 2 * g * elapsed)) / g)
    else:
        n = int(elapsed / a) if a > 0 else k
    n = max(0, min(n, k))
    # the closed form's rounding corrected against _run_ms (written out: a run is cut every
    # time an item joins its GPU)
    while n < k and (n + 1) * a + g * (n + 1) * n / 2 <= elapsed:
        n += 1
    while n > 0 and n * a + g * n * (n - 1) / 2 > elapsed:
        n -= 1
    return n
