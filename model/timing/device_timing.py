"""Latency forms of a model running on a device (GPU or FPGA), and the presets of the paper.

A :class:`LlmTiming` prices the three operations the scheduler needs, in milliseconds:

* ``prefill_ms(n)``  = ``prefill_call_ms + prefill_ms_per_token * n``
  (also the PRM's scoring of ``n`` context tokens);
* ``decode_ms(n, kv)`` = ``decode_call_ms + sum over the n tokens of
  (decode_ms_per_token + decode_ms_per_kv_token * kv_i)``, with ``kv`` tokens already cached
  and ``kv_i = kv + i + 1`` the KV entries the i-th token (from 0) attends to, itself included
  (the artifact simulator's convention);
* ``ingest_ms(n, kv)``: tokens processed without sampling (shadow synchronisation); priced as
  decoding unless ``ingest_ms_per_token`` is given.

A token's decode (ingest) term is at least ``decode_floor_ms_per_token``
(``ingest_floor_ms_per_token``): a design bound by its weight stream at short contexts costs
the same per token until its attention grows past it, then rises along the line (0, the
default: no floor).

Presets (docs/design.md §8) are named ``<config>/<role>``: roles ``draft`` (the 0.5B draft on a
GPU), ``prm`` and ``target`` for Config1 (7B target) and Config2 (1.5B target) on RTX 3090s, and the
FPGA draft of the artifact's simulator (``fpga/artifact-u280``, ``fpga/artifact-u280-config2``,
``fpga/artifact-v80``), the FPGA default until the RTL-calibrated model exists.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, replace

from heteroreason.model import checks
from heteroreason.model.files import LoadedOnUse
from heteroreason.model.spec.numerics.qwen2_config import qwen2_config
from heteroreason.model.timing.gpu_fits import FittedRole, load_gpu_fits

__all__ = ["MEASURED_PROFILES", "PAPER_U280", "PRESETS", "LlmTiming", "timing"]


@dataclass(frozen=True)
class LlmTiming:
    name: str
    model: str
    device: str
    decode_ms_per_token: float
    decode_ms_per_kv_token: float = 0.0
    decode_call_ms: float = 0.0
    prefill_ms_per_token: float = 0.0
    prefill_call_ms: float = 0.0
    ingest_ms_per_token: float | None = None
    source: str = ""
    decode_floor_ms_per_token: float = 0.0
    ingest_floor_ms_per_token: float = 0.0
    ingest_ms_per_kv_token: float | None = None  # None: the decode's

    def __post_init__(self):
        for key in ("decode_ms_per_token", "decode_ms_per_kv_token", "decode_call_ms",
                    "prefill_ms_per_token", "prefill_call_ms", "decode_floor_ms_per_token",
                    "ingest_floor_ms_per_token"):
            value = getattr(self, key)
            checks.number(f"{self.name}: {key}", value, low=0)
        for key in ("ingest_ms_per_token", "ingest_ms_per_kv_token"):
            value = getattr(self, key)
            if value is not None:
                checks.number(f"{self.name}: {key}", value, low=0, note="or None")

    def prefill_ms(self, tokens: int) -> float:
        _check_count("tokens", tokens)
        return self.prefill_call_ms + self.prefill_ms_per_token * tokens

    def decode_ms(self, tokens: int, kv_start: int) -> float:
        _check_count("tokens", tokens)
        _check_count("kv_start", kv_start)
        if tokens == 0:
            return 0.0
        a, b = self.decode_ms_per_token, self.decode_ms_per_kv_token
        low = _below_floor(tokens, kv_start, a, b, self.decode_floor_ms_per_token)
        if not low:
            return self.decode_call_ms + a * tokens + b * _kv_sum(tokens, kv_start)
        return self.decode_call_ms + _floored(tokens, kv_start, a, b,
                                              self.decode_floor_ms_per_token, low)

    def ingest_ms(self, tokens: int, kv_start: int) -> float:
        if self.ingest_ms_per_token is None:
            return self.decode_ms(tokens, kv_start)
        _check_count("tokens", tokens)
        _check_count("kv_start", kv_start)
        a, b = self.ingest_ms_per_token, self.decode_ms_per_kv_token
        if self.ingest_ms_per_kv_token is not None:
            b = self.ingest_ms_per_kv_token
        low = _below_floor(tokens, kv_start, a, b, self.ingest_floor_ms_per_token)
        if not low:
            return a * tokens + b * _kv_sum(tokens, kv_start)
        return _floored(tokens, kv_start, a, b, self.ingest_floor_ms_per_token, low)

    def token_ms(self, context: int) -> float:
        """One decode token after ``context`` cached tokens (it attends to ``context + 1``)."""
        return self.decode_ms(1, context)

    @property
    def base_decode_ms_per_token(self) -> float:
        """A decode token's cost before any KV term: the floor where it binds."""
        return max(self.decode_floor_ms_per_token, self.decode_ms_per_token)

    def tokens_per_s(self, kv: int = 0) -> float:
        return 1000.0 / max(self.decode_floor_ms_per_token,
                            self.decode_ms_per_token + self.decode_ms_per_kv_token * kv)

    def with_(self, **changes) -> LlmTiming:
        return replace(self, **changes)


def _kv_sum(tokens: int, kv_start: int) -> float:
    return tokens * kv_start + tokens * (tokens + 1) / 2


def _below_floor(tokens: int, kv_start: int, per_token: float, per_kv: float,
                 floor: float) -> int:
    """How many of ``tokens`` tokens (the i-th, from 1, attending to ``kv_start + i``) cost
    less than ``floor`` on the line ``per_token + per_kv * kv`` (the first ones)."""
    if floor <= per_token + per_kv * (kv_start + 1):
        return 0
    if per_kv <= 0:
        return tokens
    # token i is below the floor while kv_start + i < (floor - per_token) / per_kv
    low = min(tokens, max(0, math.ceil((floor - per_token) / per_kv - kv_start) - 1))
    while low < tokens and per_token + per_kv * (kv_start + low + 1) < floor:
        low += 1  # (a bound rounded at the edge)
    while low > 0 and per_token + per_kv * (kv_start + low) >= floor:
        low -= 1
    return low


def _floored(tokens: int, kv_start: int, per_token: float, per_kv: float, floor: float,
             low: int) -> float:
    """The sum of ``max(floor, line)`` over the tokens, the first ``low`` below the floor."""
    return (floor * low + per_token * (tokens - low)
            + per_kv * (_kv_sum(tokens, kv_start) - _kv_sum(low, kv_start)))


def _check_count(name: str, value) -> None:
    checks.integer(name, value, low=0)


_ARTIFACT = "artifact simulator configs (Hardware/simulator/configs/config1.json)"

_MAC_RATIO_1P5B_TO_7B = (qwen2_config("qwen2.5-1.5b").macs_per_token()
                         / qwen2_config("qwen2.5-7b").macs_per_token())

# the step profiles every measured GPU preset is fitted on (heteroreason devices measured
# --write writes the fits into model/timing/data/gpu_fits.json, which the presets read;
# tests/model/timing/test_measured_gpu.py refits them and checks each preset against the fit)
MEASURED_PROFILES = "the artifact's Config2 step profiles (AE_hardware/inputs/step_profile_csv)"
_DRAFT_PREFILL = "; prefill: " + _ARTIFACT


def _measured_draft(name: str, fit: FittedRole) -> LlmTiming:
    # the same 0.5B draft on the same RTX 3090 in both configurations: one fit
    return LlmTiming(name, "qwen2.5-0.5b", "rtx3090", decode_call_ms=fit.call_ms,
                     decode_ms_per_token=fit.ms_per_token,
                     decode_ms_per_kv_token=fit.ms_per_kv_token,
                     prefill_call_ms=16.123062, prefill_ms_per_token=0.006210,
                     source=fit.source + _DRAFT_PREFILL)


_QWEN_SPEED = ("Qwen2.5 speed benchmark (qwen.readthedocs.io, 'Speed Benchmark'; QwenLM/Qwen2.5 "
               "docs/source/benchmark/speed_benchmark.rst): Qwen2.5-0.5B-Instruct, BF16, one "
               "A100 80GB, batch 1, 2,048 tokens generated")


def _published_draft(name: str, stack: str, tok_s_input_1: float,
                     tok_s_input_6144: float) -> LlmTiming:
    """A GPU draft from two published speeds: a token's cost at input length 1, and the KV
    term from the cost's change at input length 6,144 (the mean context over the 2,048
    generated tokens is 6,143 tokens longer); a rise that is not positive gives no KV term."""
    base = 1e3 / tok_s_input_1
    kv = max(0.0, (1e3 / tok_s_input_6144 - base) / 6143)
    return LlmTiming(name, "qwen2.5-0.5b", "a100-80gb", decode_ms_per_token=round(base, 6),
                     decode_ms_per_kv_token=round(kv, 9), prefill_call_ms=16.123062,
                     prefill_ms_per_token=0.006210,
                     source=f"{_QWEN_SPEED} with {stack}: {tok_s_input_1} tok/s at input 1, "
                            f"{tok_s_input_6144} at input 6,144 (a token {base:.3f} ms + "
                            f"{kv:.3g} ms per KV token); prefill: the artifact's config1/draft; "
                            "power: the configuration's RTX 3090 figure kept (no A100 "
                            "measurement)" )


def _presets() -> dict[str, LlmTiming]:
    """Every preset: the artifact's coefficients (typed from its configuration files, each
    with its file), the paper's claims, and the measured GPU fits read from
    :data:`~heteroreason.model.timing.gpu_fits.GPU_FITS_FILE` (written by the fitter)."""
    fits = load_gpu_fits()
    draft, prm, target = fits["draft"], fits["prm"], fits["target"]
    return {t.name: t for t in (
        # Config1: 0.5B draft, 7B PRM, 7B target, three RTX 3090
        _measured_draft("config1/draft", draft),
        LlmTiming("config1/prm", "qwen2.5-math-prm-7b", "rtx3090", decode_ms_per_token=0.0,
                  prefill_call_ms=14.415958, prefill_ms_per_token=0.194878, source=_ARTIFACT),
        LlmTiming("config1/target", "qwen2.5-7b", "rtx3090", decode_ms_per_token=19.442100,
                  decode_ms_per_kv_token=0.000415545, prefill_ms_per_token=0.244993,
                  source=_ARTIFACT),
        # Config2: 0.5B draft, 7B PRM, 1.5B target
        _measured_draft("config2/draft", draft),
        LlmTiming("config2/prm", "qwen2.5-math-prm-7b", "rtx3090", decode_ms_per_token=0.0,
                  prefill_call_ms=prm.call_ms, prefill_ms_per_token=prm.ms_per_token,
                  source=prm.source),
        LlmTiming("config2/target", "qwen2.5-1.5b", "rtx3090", decode_call_ms=target.call_ms,
                  decode_ms_per_token=target.ms_per_token,
                  decode_ms_per_kv_token=target.ms_per_kv_token,
                  prefill_ms_per_token=round(0.244993 * _MAC_RATIO_1P5B_TO_7B, 6),
                  source=target.source + "; prefill: Config1's 7B prefill scaled by the MAC "
                         "ratio (the artifact's 0.0018 ms/token is below the roofline)"),
        # the paper's claim for the GPU draft (either configuration): a flat 8.0 ms a token
        LlmTiming("gpu/draft-paper", "qwen2.5-0.5b", "rtx3090", decode_ms_per_token=8.0,
                  prefill_call_ms=16.123062, prefill_ms_per_token=0.006210,
                  source="the paper's claim: 125 tok/s (Config1, RSD, MATH500), the "
                         "artifact's config1/draft" + _DRAFT_PREFILL),
        # the same 0.5B draft on an A100 80GB at batch 1, from Qwen's published speed
        # benchmark (2,048 tokens generated after 1 and after 6,144 input tokens)
        _published_draft("gpu/draft-vllm-a100", "vLLM 0.6.3", 311.55, 304.79),
        _published_draft("gpu/draft-hf-a100", "Transformers 4.46.0", 47.40, 47.45),
        # the FPGA draft of the artifact's simulator (300 MHz U280; V80 projected)
        LlmTiming("fpga/artifact-u280", "qwen2.5-0.5b", "u280-300", decode_ms_per_token=5.74,
                  decode_ms_per_kv_token=0.002464, source=_ARTIFACT),
        LlmTiming("fpga/artifact-u280-config2", "qwen2.5-0.5b", "u280-300",
                  decode_ms_per_token=5.74,
                  decode_ms_per_kv_token=0.004928,
                  source="artifact simulator configs (Hardware/simulator/configs/config2.json); "
                         "its KV term is twice config1.json's 0.002464 for the same FPGA and "
                         "draft (an inconsistency of the artifact, kept as it has it: "
                         "--fpga rtl-u280-300 replaces it by the RTL-calibrated model)"),
        LlmTiming("fpga/artifact-v80", "qwen2.5-0.5b", "v80", decode_ms_per_token=2.87,
                  source="docs/design.md §8: V80 2.87 ms per token"),
    )}


# read on first use: no file is read at import
PRESETS: Mapping[str, LlmTiming] = LoadedOnUse(_presets)


# the paper's U280 draft, the line every FPGA projection is compared with
PAPER_U280 = "fpga/artifact-u280"


def timing(name: str) -> LlmTiming:
    """A preset by name (see :data:`PRESETS`)."""
    if name not in PRESETS:
        raise KeyError(f"unknown timing preset {name!r}; choose one of {', '.join(PRESETS)}")
    return PRESETS[name]
