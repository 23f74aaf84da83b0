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

Presets (docs/design.md §8) are named ``<config>/<role>``: roles ``draft`` (the 0.5B draft on a
GPU), ``prm`` and ``target`` for Config1 (7B target) and Config2 (1.5B target) on RTX 3090s, and the
FPGA draft of the artifact's simulator (``fpga/artifact-u280``, ``fpga/artifact-u280-config2``,
``fpga/artifact-v80``), the FPGA default until the RTL-calibrated model exists.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

from heteroreason.model.numerics.qwen2_config import qwen2_config

__all__ = ["PAPER_U280", "PRESETS", "LlmTiming", "timing"]


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

    def __post_init__(self):
        for key in ("decode_ms_per_token", "decode_ms_per_kv_token", "decode_call_ms",
                    "prefill_ms_per_token", "prefill_call_ms"):
            value = getattr(self, key)
            if isinstance(value, bool) or not isinstance(value, int | float) or \
                    not math.isfinite(value) or value < 0:
                raise ValueError(f"{self.name}: {key} must be a finite non-negative number, "
                                 f"not {value!r}")
        ingest = self.ingest_ms_per_token
        if ingest is not None and (isinstance(ingest, bool) or not isinstance(ingest, int | float)
                                   or not math.isfinite(ingest) or ingest < 0):
            raise ValueError(f"{self.name}: ingest_ms_per_token must be a finite non-negative "
                             f"number or None, not {ingest!r}")

    def prefill_ms(self, tokens: int) -> float:
        _check_count("tokens", tokens)
        return self.prefill_call_ms + self.prefill_ms_per_token * tokens

    def decode_ms(self, tokens: int, kv_start: int) -> float:
        _check_count("tokens", tokens)
        _check_count("kv_start", kv_start)
        if tokens == 0:
            return 0.0
        return (self.decode_call_ms + self.decode_ms_per_token * tokens
                + self.decode_ms_per_kv_token * _kv_sum(tokens, kv_start))

    def ingest_ms(self, tokens: int, kv_start: int) -> float:
        if self.ingest_ms_per_token is None:
            return self.decode_ms(tokens, kv_start)
        _check_count("tokens", tokens)
        _check_count("kv_start", kv_start)
        return (self.ingest_ms_per_token * tokens
                + self.decode_ms_per_kv_token * _kv_sum(tokens, kv_start))

    def token_ms(self, context: int) -> float:
        """One decode token after ``context`` cached tokens (it attends to ``context + 1``)."""
        return self.decode_ms(1, context)

    def tokens_per_s(self, kv: int = 0) -> float:
        return 1000.0 / (self.decode_ms_per_token + self.decode_ms_per_kv_token * kv)

    def with_(self, **changes) -> LlmTiming:
        return replace(self, **changes)


def _kv_sum(tokens: int, kv_start: int) -> float:
    return tokens * kv_start + tokens * (tokens + 1) / 2


def _check_count(name: str, value) -> None:
    if type(value) is not int or value < 0:  # (a bool is not a count)
        raise ValueError(f"{name} must be a non-negative integer, not {value!r}")


_ARTIFACT = "artifact simulator configs (Hardware/simulator/configs/config1.json)"
_CONFIG2_FIT = ("least-squares fits of the Config2 per-step profiles, GSM8K/MATH500 midpoints "
                "(docs/design.md §8)")

_MAC_RATIO_1P5B_TO_7B = (qwen2_config("qwen2.5-1.5b").macs_per_token()
                         / qwen2_config("qwen2.5-7b").macs_per_token())

PRESETS: dict[str, LlmTiming] = {t.name: t for t in (
    # Config1: 0.5B draft, 7B PRM, 7B target, three RTX 3090
    LlmTiming("config1/draft", "qwen2.5-0.5b", "rtx3090", decode_ms_per_token=8.0,
              prefill_call_ms=16.123062, prefill_ms_per_token=0.006210,
              source="125 tok/s measured (Config1, RSD, MATH500); prefill: " + _ARTIFACT),
    LlmTiming("config1/prm", "qwen2.5-math-prm-7b", "rtx3090", decode_ms_per_token=0.0,
              prefill_call_ms=14.415958, prefill_ms_per_token=0.194878, source=_ARTIFACT),
    LlmTiming("config1/target", "qwen2.5-7b", "rtx3090", decode_ms_per_token=19.442100,
              decode_ms_per_kv_token=0.000415545, prefill_ms_per_token=0.244993,
              source=_ARTIFACT),
    # Config2: 0.5B draft, 7B PRM, 1.5B target
    LlmTiming("config2/draft", "qwen2.5-0.5b", "rtx3090", decode_call_ms=4.9,
              decode_ms_per_token=4.6, prefill_call_ms=16.123062,
              prefill_ms_per_token=0.006210, source=_CONFIG2_FIT),
    LlmTiming("config2/prm", "qwen2.5-math-prm-7b", "rtx3090", decode_ms_per_token=0.0,
              prefill_call_ms=17.0, prefill_ms_per_token=0.23, source=_CONFIG2_FIT),
    LlmTiming("config2/target", "qwen2.5-1.5b", "rtx3090", decode_call_ms=43.0,
              decode_ms_per_token=6.25,
              prefill_ms_per_token=round(0.244993 * _MAC_RATIO_1P5B_TO_7B, 6),
              source=_CONFIG2_FIT + "; prefill: Config1's 7B prefill scaled by the MAC ratio "
                     "(the artifact's 0.0018 ms/token is below the roofline)"),
    # the FPGA draft of the artifact's simulator (300 MHz U280; V80 projected)
    LlmTiming("fpga/artifact-u280", "qwen2.5-0.5b", "u280-300", decode_ms_per_token=5.74,
              decode_ms_per_kv_token=0.002464, source=_ARTIFACT),
    LlmTiming("fpga/artifact-u280-config2", "qwen2.5-0.5b", "u280-300",
              decode_ms_per_token=5.74,
              decode_ms_per_kv_token=0.004928,
              source="artifact simulator configs (Hardware/simulator/configs/config2.json); "
                     "its KV term is twice config1.json's 0.002464 for the same FPGA and draft "
                     "(an inconsistency of the artifact, kept as it has it: "
                     "--fpga rtl-u280-300 replaces it by the RTL-calibrated model)"),
    LlmTiming("fpga/artifact-v80", "qwen2.5-0.5b", "v80", decode_ms_per_token=2.87,
              source="docs/design.md §8: V80 2.87 ms per token"),
)}


# the paper's U280 draft, the line every FPGA projection is compared with
PAPER_U280 = "fpga/artifact-u280"


def timing(name: str) -> LlmTiming:
    """A preset by name (see :data:`PRESETS`)."""
    if name not in PRESETS:
        raise KeyError(f"unknown timing preset {name!r}; choose one of {', '.join(PRESETS)}")
    return PRESETS[name]
