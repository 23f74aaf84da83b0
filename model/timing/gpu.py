"""GPU specifications and the roofline cross-check of measured timing coefficients.

The roofline of decoding one token is ``max(weight bytes / bandwidth, 2 MACs / peak FLOPS)``
(batch 1: bandwidth-bound); of a prefill it is, per token, ``2 MACs / peak FLOPS`` (the weights
are read once per call: ``weight bytes / bandwidth`` is the per-call floor).
"""

from __future__ import annotations

from dataclasses import dataclass

from heteroreason.model.spec.numerics.qwen2_config import Qwen2Config
from heteroreason.model.timing.device_timing import LlmTiming

__all__ = ["GPUS", "GpuSpec", "RooflineCheck", "gpu", "roofline_check"]


@dataclass(frozen=True)
class GpuSpec:
    name: str
    memory_bandwidth_bytes_per_s: float
    peak_flops: float  # dense FP16/BF16 tensor throughput
    memory_bytes: float
    tdp_w: float


GPUS: dict[str, GpuSpec] = {g.name: g for g in (
    GpuSpec("rtx3090", 936e9, 142e12, 24 * 2**30, 350.0),
)}


def gpu(name: str) -> GpuSpec:
    if name not in GPUS:
        raise KeyError(f"unknown GPU {name!r}; choose one of {', '.join(GPUS)}")
    return GPUS[name]


@dataclass(frozen=True)
class RooflineCheck:
    """Measured coefficient against its roofline bound (ratio = measured / bound)."""

    what: str
    measured_ms: float
    bound_ms: float

    @property
    def ratio(self) -> float:
        return self.measured_ms / self.bound_ms if self.bound_ms else float("inf")


def roofline_check(t: LlmTiming, model: Qwen2Config, spec: GpuSpec, *,
                   bytes_per_weight: float = 2.0, context: int = 512) -> list[RooflineCheck]:
    """How far ``t``'s coefficients sit above the roofline of ``model`` on ``spec``."""
    weights_ms = model.weight_bytes_per_token(bytes_per_weight) / spec.memory_bandwidth_bytes_per_s
    checks = []
    if t.decode_ms_per_token > 0:
        compute_ms = 2 * model.macs_per_token(context) / spec.peak_flops
        bound = 1e3 * max(weights_ms, compute_ms)
        measured = t.decode_ms_per_token + t.decode_ms_per_kv_token * context
        checks.append(RooflineCheck(f"decode ms/token at context {context}", measured, bound))
    if t.prefill_ms_per_token > 0:
        bound = 1e3 * 2 * model.macs_per_token(context) / spec.peak_flops
        checks.append(RooflineCheck("prefill ms/token", t.prefill_ms_per_token, bound))
    if t.prefill_call_ms > 0:
        checks.append(RooflineCheck("prefill ms/call (weights read once)", t.prefill_call_ms,
                                    1e3 * weights_ms))
    return checks
