"""The per-iteration cost of a GPU that serves one model with continuous batching.

One iteration processes a batch: prefill items (``P_i`` prompt tokens each, processed whole) and
decode items (one token each, after ``kv_j`` cached tokens)::

    iteration_ms = max(T_floor * [decodes], prefill_call_ms * [prefills] + alpha * (sum P_i + D))
                   + gamma * sum_j (kv_j + 1) + beta * sum_i P_i**2 + c * (B - 1)
                   + sum of decode_call_ms of the items whose decode starts in it

``D`` decode items, ``B`` items in all. The weight read is shared by the batch (``T_floor``, the
fitted batch-1 decode cost of one token); compute grows with the tokens (``alpha``, the fitted
prefill cost per token); decode attention grows with the cached tokens (``gamma``); a per-item
host overhead ``c`` is paid by batches of more than one. At batch 1 the cost of any call equals
the fitted per-call model the batch-1 scheduler uses
(:class:`~heteroreason.model.timing.device_timing.LlmTiming`): a prefill
``prefill_call_ms + alpha * P``, a decode token ``T_floor + gamma * (kv + 1)`` (``beta`` is 0:
the fits are linear in the tokens, see :func:`attention_share`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from heteroreason.model import checks
from heteroreason.model.spec.numerics.qwen2_config import Qwen2Config, qwen2_config
from heteroreason.model.timing.device_timing import LlmTiming
from heteroreason.model.timing.gpu import GpuSpec, gpu

__all__ = ["GPU_MEMORY_UTILIZATION", "MAX_BATCH_ITEMS", "PER_ITEM_MS", "BatchCost",
           "PublishedCheck",
           "attention_share", "batch_cost", "closed_batch_req_s", "fit_per_item_ms",
           "published_checks"]

# vLLM's defaults (engine arguments ``gpu_memory_utilization`` 0.9, ``max_num_seqs`` 256)
GPU_MEMORY_UTILIZATION = 0.9
MAX_BATCH_ITEMS = 256
# fitted: the cost of each extra sequence of an iteration (host scheduling, sampling, the
# batched kernels' inefficiency), least squares in log throughput over the published batch 4, 16
# and 64 figures of _GIGAGPU (fit_per_item_ms(): 1.02 ms, rms residual 4.3 %); batch 1 held out
PER_ITEM_MS = 1.02


@dataclass(frozen=True)
class BatchCost:
    """The iteration cost of one model on one GPU, with the sources of its coefficients."""

    name: str
    decode_floor_ms: float
    prefill_call_ms: float
    token_compute_ms: float
    kv_token_ms: float
    decode_call_ms: float
    per_item_ms: float
    prefill_sq_ms: float
    kv_capacity_tokens: int
    max_batch_items: int
    sources: tuple[tuple[str, str], ...]

    def __post_init__(self):
        for key in ("decode_floor_ms", "prefill_call_ms", "token_compute_ms", "kv_token_ms",
                    "decode_call_ms", "per_item_ms", "prefill_sq_ms"):
            value = getattr(self, key)
            checks.number(f"{self.name}: {key}", value, low=0)
        if self.decode_floor_ms and self.token_compute_ms > self.decode_floor_ms:
            raise ValueError(f"{self.name}: token_compute_ms {self.token_compute_ms} exceeds "
                             f"decode_floor_ms {self.decode_floor_ms}: one decode token would "
                             "cost more batched than alone")
        if self.kv_capacity_tokens < 1:
            raise ValueError(f"{self.name}: the GPU has no memory left for a KV cache "
                             f"(kv_capacity_tokens {self.kv_capacity_tokens})")
        if self.max_batch_items < 1:
            raise ValueError(f"{self.name}: max_batch_items must be at least 1, not "
                             f"{self.max_batch_items}")

    @property
    def decodes(self) -> bool:
        return self.decode_floor_ms > 0

    def iteration_ms(self, *, prefill_tokens: tuple[int, ...] = (), decode_kv: tuple[int, ...] = (),
                     decode_calls: int = 0) -> float:
        """One iteration's cost: prefills of ``prefill_tokens`` and decode tokens after
        ``decode_kv`` cached ones each, ``decode_calls`` of them the first of their call."""
        if not prefill_tokens and not decode_kv:
            raise ValueError("an iteration needs at least one item")
        return self.iteration_sums_ms(len(prefill_tokens), sum(prefill_tokens),
                                      sum(p * p for p in prefill_tokens), len(decode_kv),
                                      sum(kv + 1 for kv in decode_kv), decode_calls)

    def iteration_sums_ms(self, prefills: int, prefill_tokens: int, prefill_sq_tokens: int,
                          decodes: int, attended_tokens: int, decode_calls: int) -> float:
        """:meth:`iteration_ms` from the batch's sums (the simulator's form): ``prefills``
        items of ``prefill_tokens`` in all (their squares summing to ``prefill_sq_tokens``),
        ``decodes`` decode items attending to ``attended_tokens`` in all."""
        floor = self.decode_floor_ms if decodes else 0.0
        compute = (self.prefill_call_ms if prefills else 0.0) + \
            self.token_compute_ms * (prefill_tokens + decodes)
        return (max(floor, compute) + self.kv_token_ms * attended_tokens
                + self.prefill_sq_ms * prefill_sq_tokens
                + self.per_item_ms * (prefills + decodes - 1) + self.decode_call_ms * decode_calls)


def _model(t: LlmTiming) -> Qwen2Config:
    return qwen2_config(t.model)


def batch_cost(t: LlmTiming, *, device: GpuSpec | str | None = None,
               memory_utilization: float = GPU_MEMORY_UTILIZATION,
               max_batch_items: int = MAX_BATCH_ITEMS, per_item_ms: float = PER_ITEM_MS,
               bytes_per_weight: float = 2.0, kv_bytes_per_element: float = 2.0) -> BatchCost:
    """The batched form of a fitted per-call model ``t`` on its GPU (``t.device`` unless
    ``device`` is given). KV capacity: the memory vLLM would give the cache (``memory_utilization``
    of the GPU's memory less the 16-bit weights) over the model's KV bytes per token."""
    if not 0 < memory_utilization <= 1:
        raise ValueError(f"memory_utilization must be in (0, 1], not {memory_utilization!r}")
    spec = gpu(device or t.device) if not isinstance(device, GpuSpec) else device
    model = _model(t)
    free = spec.memory_bytes * memory_utilization - model.params * bytes_per_weight
    capacity = int(free // model.kv_bytes_per_token(kv_bytes_per_element)) if free > 0 else 0
    fit = t.source or "the preset's fit"
    roofline_ms = 1e3 * model.weight_bytes_per_token(bytes_per_weight) / \
        spec.memory_bandwidth_bytes_per_s
    kv_b = model.kv_bytes_per_token(kv_bytes_per_element)
    sources = (
        ("decode_floor_ms", f"{t.name} decode_ms_per_token ({fit}); weight-read roofline "
         f"{roofline_ms:.2f} ms"),
        ("prefill_call_ms", f"{t.name} prefill_call_ms ({fit})"),
        ("token_compute_ms", f"{t.name} prefill_ms_per_token ({fit})"),
        ("kv_token_ms", f"{t.name} decode_ms_per_kv_token ({fit})"),
        ("decode_call_ms", f"{t.name} decode_call_ms ({fit}); paid by the iteration it starts in"),
        ("per_item_ms", "fitted to published batched throughput (fit_per_item_ms)"),
        ("prefill_sq_ms", "0: the fits are linear in the tokens (attention_share bounds the "
                          "quadratic term)"),
        ("kv_capacity_tokens", f"{spec.name} memory x {memory_utilization} less "
         f"{bytes_per_weight:g}-byte weights, / {kv_b:.0f} B per token"),
        ("max_batch_items", "vLLM's default max_num_seqs"),
    )
    return BatchCost(t.name, t.decode_ms_per_token, t.prefill_call_ms, t.prefill_ms_per_token,
                     t.decode_ms_per_kv_token, t.decode_call_ms, per_item_ms, 0.0, capacity,
                     max_batch_items, sources)


def attention_share(t: LlmTiming, tokens: int, *, device: GpuSpec | str | None = None) -> float:
    """The share of a ``tokens``-long prefill that its quadratic attention would add at the
    GPU's peak (``4 layers hidden L^2`` FLOPs over the linear fit's cost): how much ``beta = 0``
    leaves out."""
    spec = gpu(device or t.device) if not isinstance(device, GpuSpec) else device
    model = _model(t)
    quadratic_ms = 1e3 * 4 * model.layers * model.hidden * tokens ** 2 / spec.peak_flops
    return quadratic_ms / t.prefill_ms(tokens)


@dataclass(frozen=True)
class PublishedCheck:
    what: str
    source: str
    published: float
    modelled: float
    unit: str

    @property
    def ratio(self) -> float:
        return self.modelled / self.published


# gigagpu.com, "RTX 3090: Maximum LLM Throughput (Requests/sec)": vLLM continuous batching,
# 128-token prompts, 256-token outputs, Mistral 7B FP16 (a 7B model of the 3090's class, as
# close to Qwen2.5-7B as the published tables come)
_GIGAGPU = "gigagpu.com/rtx-3090-max-llm-throughput (vLLM, Mistral 7B FP16, 128 in / 256 out)"
_GIGAGPU_REQ_S = {1: 0.18, 4: 0.62, 16: 1.65, 64: 2.55}
_FIT_BATCHES = (4, 16, 64)
# r/LocalLLaMA "Qwen3 throughput benchmarks on 2x 3090" (vLLM bench serve, 4096 in / 1024 out):
# Qwen3-8B FP16 data-parallel on two 3090s, 387 output tok/s, 193.5 per GPU. The concurrency is
# not published: five sequences is what the 8B's KV cache (147 kB/token) holds in the ~4 GB
# vLLM leaves at 0.85 utilization — an estimate, so this check is the looser of the two
_REDDIT = "reddit r/LocalLLaMA 1kkvqti (vLLM, Qwen3-8B FP16 per 3090, 4096 in / 1024 out, ~5 seqs)"


def closed_batch_req_s(cost: BatchCost, *, batch: int, prompt: int, output: int) -> float:
    """Requests per second of ``batch`` requests in lock step: one prefill iteration each
    (batched together), then ``output`` decode iterations of the whole batch."""
    prefill = cost.iteration_ms(prefill_tokens=(prompt,) * batch)
    decode = sum(cost.iteration_ms(decode_kv=(prompt + i,) * batch,
                                   decode_calls=batch if i == 0 else 0) for i in range(output))
    return batch / (1e-3 * (prefill + decode))


def fit_per_item_ms(t: LlmTiming, *, step_ms: float = 0.01, limit_ms: float = 3.0) -> float:
    """The per-item overhead that best fits the published batched figures (least squares in
    log requests/s over :data:`_FIT_BATCHES`, on a ``step_ms`` grid up to ``limit_ms``)."""
    best, best_err = 0.0, math.inf
    for k in range(round(limit_ms / step_ms) + 1):
        c = k * step_ms
        cost = batch_cost(t, per_item_ms=c)
        err = sum(math.log(closed_batch_req_s(cost, batch=b, prompt=128, output=256)
                           / _GIGAGPU_REQ_S[b]) ** 2 for b in _FIT_BATCHES)
        if err < best_err - 1e-15:
            best, best_err = c, err
    return round(best, 6)


def published_checks(t: LlmTiming) -> list[PublishedCheck]:
    """The batched model of a 7B fit (the target's) against published batched throughput:
    the fitted points, the held-out batch 1 and a second source's prefill-heavy run."""
    cost = batch_cost(t)
    checks = [PublishedCheck(f"req/s at batch {b}" + ("" if b in _FIT_BATCHES else " (held out)"),
                             _GIGAGPU, req_s,
                             closed_batch_req_s(cost, batch=b, prompt=128, output=256), "req/s")
              for b, req_s in _GIGAGPU_REQ_S.items()]
    checks.append(PublishedCheck(
        "output tok/s, 5 x (4096 in, 1024 out)", _REDDIT, 387 / 2,
        1024 * closed_batch_req_s(cost, batch=5, prompt=4096, output=1024), "tok/s"))
    return checks
