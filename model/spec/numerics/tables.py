"""The lookup tables of the integer reference (:mod:`heteroreason.model.spec.numerics.qwen2_int8`)
that the RTL holds in ROM: the inverse square root of the RMSNorm, RoPE's cosine and sine, the
softmax's exponential. Their rules are the reference's docstring's."""

from __future__ import annotations

import math

import numpy as np

__all__ = ["COS", "EXP", "EXP_STEPS_PER_UNIT", "ROPE_BITS", "RSQRT", "SIN"]

RSQRT = np.array([0] * 64 + [round(2**23 / math.sqrt(m)) for m in range(64, 256)],
                 dtype=np.int64)
ROPE_BITS = 10
COS = np.array([round(math.cos(2 * math.pi * i / 2**ROPE_BITS) * 2**14)
                for i in range(2**ROPE_BITS)], dtype=np.int64)
SIN = np.array([round(math.sin(2 * math.pi * i / 2**ROPE_BITS) * 2**14)
                for i in range(2**ROPE_BITS)], dtype=np.int64)
EXP_STEPS_PER_UNIT = 32
EXP = np.array([round(math.exp(-j / EXP_STEPS_PER_UNIT) * 2**15) for j in range(256)],
               dtype=np.int64)
