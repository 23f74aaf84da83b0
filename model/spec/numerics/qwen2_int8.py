"""Integer W8A8 reference decoder of the Qwen2 architecture: the arithmetic the RTL reproduces.

Everything below is integer arithmetic on numpy int64 (matrix products are evaluated in
floating point only where that is exact, see *Matrix products*). Real values are ``q * scale``.
One module of some 400 lines on purpose: the specification the RTL is checked against, every
rounding rule and the code that applies it read together (its ROM tables: ``tables``).

Rounding and saturation
    ``rshift_round(x, k) = (x + 2**(k-1)) >> k`` for ``k >= 1`` (round half up, arithmetic
    shift), ``x << -k`` for ``k <= 0``. ``sat(x, bits)`` clamps to the signed range.
Requantization
    A real factor ``f`` is a multiplier ``M`` in ``[2**30, 2**31)`` and a shift ``k`` with
    ``f ~ M / 2**k`` (:func:`quant_multiplier`); ``requant(acc) = sat(rshift_round(acc * M, k))``.
Weights
    int8, symmetric, per output channel: ``w_c = max|W[c, :]| / 127``, ``Wq = round(W / w_c)``.
    q/k/v biases become int32 at the accumulator's scale: ``round(b_c / (s_x * w_c))``.
    Before quantization, the SwiGLU product's channels are smoothed (SmoothQuant, alpha 1/2):
    ``up_proj`` row ``j`` is divided and ``down_proj`` column ``j`` multiplied by
    ``sqrt(max|act_j| / max|W_down[:, j]|)``, which leaves the float function unchanged and
    costs the hardware nothing.
Activations
    int8 with static per-tensor scales ``s = max|x| / 127`` from float runs on calibration
    tokens (:func:`activation_scales`); the residual stream is int16 with one scale for the
    whole model (``max|x| * 1.25 / 32767``), additions saturate.
Embedding
    a token's int8 embedding row (a scale per row), requantized per row to the residual scale.
RMSNorm (reciprocal square root by table)
    ``var = (sum r_i**2) // hidden + eps_q`` (``eps_q = max(1, round(eps / s_res**2))``); with
    ``e = bit_length(var)`` and the even shift ``s = e - 8`` rounded up to even, ``m = var >> s``
    (``<<`` when negative) lies in ``[64, 256)``; ``RSQRT[m] = round(2**23 / sqrt(m))``;
    ``n_i = shift_round(r_i * RSQRT[m], 23 + s/2 - 15)`` is ``r_i / sqrt(var)`` in Q.15; the
    output ``y_i = sat8(rshift_round(n_i * M_i, k_i))`` folds the gain ``g_i`` into a
    per-channel multiplier (``M_i / 2**k_i ~ g_i / (2**15 * s_out)``).
RoPE (phase accumulator and 1024-entry tables)
    frequency ``f`` advances ``inc_f = round(inv_freq_f / 2pi * 2**32) mod 2**32`` per position;
    ``phase = (pos * inc_f) mod 2**32``; ``idx = ((phase + 2**21) >> 22) & 1023``;
    ``C = COS[idx]``, ``S = SIN[idx]`` are ``round(cos / sin(2pi idx / 1024) * 2**14)``;
    ``x1' = sat8(rshift_round(x1*C - x2*S, 14))``, ``x2' = sat8(rshift_round(x2*C + x1*S, 14))``
    for the two halves of each head; the scale is kept.
Attention scores and softmax (exp table, one division per row)
    ``a_t = sum q'k'_t`` (int32), ``d_t = a_t - max_t a_t``; ``j_t = min(255,
    -rshift_round(d_t * M_e, k_e))`` maps ``d_t`` to sixteenths (``M_e / 2**k_e ~ s_q s_k /
    (sqrt(head_dim) / 16)``); ``EXP[j] = round(exp(-j / 16) * 2**15)``; ``e_t = EXP[j_t]``,
    ``S = sum e_t``, ``r = 2**46 // S``, ``p_t = (e_t * r + 2**29) >> 30`` (Q0.16); the head's
    output ``sum p_t v_t`` is requantized to int8 (``M ~ s_v / (2**16 s_attn)``).
SwiGLU (SiLU by table)
    ``SILU[g] = sat16(round(silu(g s_gate) / s_silu))`` for int8 ``g`` (256 entries of 16
    bits), ``s_silu = max|silu(g s_gate)| / 32767``; ``h = requant8(SILU[g] * u)`` with
    ``M ~ s_silu s_up / s_act``.
Residual updates
    o_proj and down_proj accumulators are requantized per output channel to the residual
    scale (int16) and added with saturation.
LM head and sampling
    int32 logits ``requant32(acc_v)`` with ``M_v / 2**k_v ~ s_final w_v / s_logit`` (``s_logit
    = max|logit| / 2**24``); greedy sampling is the argmax, lowest index on ties.
Matrix products
    int8 x int8 products summed over ``n`` inputs are exact in float32 while ``n * 2**14 <
    2**24`` (``n <= 1024``) and in float64 beyond; BLAS evaluates them, the results are
    converted back to int64 exactly.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from heteroreason.model.spec.numerics.qwen2_config import Qwen2Config
from heteroreason.model.spec.numerics.qwen2_float import FloatDecoder, Qwen2Weights
from heteroreason.model.spec.numerics.tables import (
    COS,
    EXP,
    EXP_STEPS_PER_UNIT,
    ROPE_BITS,
    RSQRT,
    SIN,
)

__all__ = ["ActivationScales", "IntDecoder", "QuantizedModel", "activation_scales", "attend",
           "int_rmsnorm", "int_rope", "quant_multiplier", "quantize", "requant", "rshift_round"]

def rshift_round(x, k):
    """Round-half-up right shift by ``k`` (a left shift when ``k <= 0``); arrays broadcast."""
    x = np.asarray(x, dtype=np.int64)
    k = np.asarray(k, dtype=np.int64)
    right = np.maximum(k, 1)
    shifted = (x + (np.int64(1) << (right - 1))) >> right
    return np.where(k >= 1, shifted, x << np.maximum(-k, 0))


def sat(x, bits: int):
    lo, hi = -(1 << (bits - 1)), (1 << (bits - 1)) - 1
    return np.clip(x, lo, hi)


def quant_multiplier(factor) -> tuple[np.ndarray, np.ndarray]:
    """``factor ~ M / 2**k`` with ``M`` in ``[2**30, 2**31)``; factor must be in (0, 2**30)."""
    f = np.asarray(factor, dtype=np.float64)
    if np.any(~(f > 0)) or np.any(f >= 2.0**30):
        raise ValueError("requantization factors must lie in (0, 2**30)")
    mant, exp = np.frexp(f)  # f = mant * 2**exp, mant in [0.5, 1)
    m = np.round(mant * 2.0**31).astype(np.int64)
    k = (31 - exp).astype(np.int64)
    carry = m == 2**31
    m = np.where(carry, m // 2, m)
    k = np.where(carry, k - 1, k)
    return m, k


def requant(acc, mk, bits: int):
    m, k = mk
    return sat(rshift_round(np.asarray(acc, dtype=np.int64) * m, k), bits)


def _matmul(x_q: np.ndarray, w_f: np.ndarray) -> np.ndarray:
    """Exact integer product of int activations (n, in) and the float-held int8 weights."""
    return np.rint(x_q.astype(w_f.dtype) @ w_f.T).astype(np.int64)


@dataclass(frozen=True)
class ActivationScales:
    residual: float
    norm1: tuple[float, ...]
    q: tuple[float, ...]
    k: tuple[float, ...]
    v: tuple[float, ...]
    attn: tuple[float, ...]
    norm2: tuple[float, ...]
    gate: tuple[float, ...]
    up: tuple[float, ...]
    act: tuple[float, ...]
    smooth: tuple[np.ndarray, ...]
    final_norm: float
    logits: float


def activation_scales(weights: Qwen2Weights, *, seed: int = 0, sequences: int = 4,
              length: int = 256) -> ActivationScales:
    """Static scales from float runs on seeded random token sequences."""
    c = weights.config
    maxima: dict[tuple[str, int], float] = {}

    channel_max: dict[tuple[str, int], np.ndarray] = {}

    def observe(name, layer, value):
        key = (name, layer)
        magnitude = np.abs(value)
        maxima[key] = max(maxima.get(key, 0.0), float(np.max(magnitude)))
        if name in ("act", "up"):
            peak = magnitude.reshape(-1, magnitude.shape[-1]).max(axis=0)
            channel_max[key] = np.maximum(channel_max.get(key, 0.0), peak)

    rng = np.random.default_rng(seed)
    for _ in range(sequences):
        dec = FloatDecoder(weights)
        dec.observer = observe
        dec.prefill(rng.integers(0, c.vocab, min(length, c.max_context)))
    n_layers = len(weights.layers)

    def per_layer(name):
        return tuple(max(maxima[(name, i)], 1e-9) / 127 for i in range(n_layers))

    residual = max(v for (name, _), v in maxima.items() if name == "residual")
    # SmoothQuant (alpha = 1/2) for the down projection's input: channel j of the SwiGLU
    # product is divided by smooth_j (folded into up_proj's row j) and down_proj's column j
    # multiplied by it, so that the int8 product has no outlier channels
    smooth = []
    for i, lw in enumerate(weights.layers):
        w_max = np.maximum(np.abs(np.asarray(lw.down_w, dtype=np.float64)).max(axis=0), 1e-9)
        a_max = np.maximum(channel_max[("act", i)], 1e-9)
        smooth.append(np.sqrt(a_max / w_max))
    act = tuple(float(np.max(channel_max[("act", i)] / smooth[i])) / 127
                for i in range(n_layers))
    up = tuple(float(np.max(channel_max[("up", i)] / smooth[i])) / 127 for i in range(n_layers))
    return ActivationScales(
        residual=residual * 1.25 / 32767, norm1=per_layer("norm1"), q=per_layer("q"),
        k=per_layer("k"), v=per_layer("v"), attn=per_layer("attn"), norm2=per_layer("norm2"),
        gate=per_layer("gate"), up=up, act=act, smooth=tuple(smooth),
        final_norm=maxima[("final_norm", -1)] / 127, logits=maxima[("logits", -1)] / 2**24)


def _quantize_rows(w: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    w = np.asarray(w, dtype=np.float64)
    scale = np.maximum(np.max(np.abs(w), axis=1), 1e-12) / 127
    q = np.clip(np.rint(w / scale[:, None]), -127, 127)
    return q, scale


def _weights_for_matmul(q: np.ndarray) -> np.ndarray:
    return q.astype(np.float32 if q.shape[1] * 2**14 < 2**24 else np.float64)


@dataclass
class _Layer:
    q_w: np.ndarray
    k_w: np.ndarray
    v_w: np.ndarray
    o_w: np.ndarray
    gate_w: np.ndarray
    up_w: np.ndarray
    down_w: np.ndarray
    q_b: np.ndarray
    k_b: np.ndarray
    v_b: np.ndarray
    q_req: tuple
    k_req: tuple
    v_req: tuple
    o_req: tuple
    gate_req: tuple
    up_req: tuple
    down_req: tuple
    act_req: tuple
    attn_req: tuple
    exp_req: tuple
    norm1_req: tuple
    norm2_req: tuple
    silu: np.ndarray


@dataclass
class QuantizedModel:
    """Integer weights, biases, tables and requantization multipliers of a whole model."""

    config: Qwen2Config
    scales: ActivationScales
    layers: list
    embed_w: np.ndarray  # the LM head's int8 values held as floats for the exact product
    embed_q: np.ndarray  # int8 embedding rows
    embed_req: tuple
    head_req: tuple
    final_req: tuple
    eps_q: int
    rope_inc: np.ndarray


def quantize(weights: Qwen2Weights, scales: ActivationScales) -> QuantizedModel:
    c = weights.config
    s = scales

    def linear(w):
        q, w_c = _quantize_rows(w)
        return _weights_for_matmul(q), w_c

    def norm_req(gain, s_out):
        return quant_multiplier(np.asarray(gain, dtype=np.float64) / (2**15 * s_out))

    layers = []
    for i, lw in enumerate(weights.layers):
        q_w, q_c = linear(lw.q_w)
        k_w, k_c = linear(lw.k_w)
        v_w, v_c = linear(lw.v_w)
        o_w, o_c = linear(lw.o_w)
        gate_w, gate_c = linear(lw.gate_w)
        up_w, up_c = linear(np.asarray(lw.up_w, dtype=np.float64) / s.smooth[i][:, None])
        down_w, down_c = linear(np.asarray(lw.down_w, dtype=np.float64) * s.smooth[i][None, :])
        grid = np.arange(-128, 128, dtype=np.float64) * s.gate[i]
        silu_real = grid / (1.0 + np.exp(-grid))
        s_silu = max(abs(silu_real).max(), 1e-12) / 32767
        silu = sat(np.rint(silu_real / s_silu), 16).astype(np.int64)

        def bias(b, acc_scale):
            q = np.rint(np.asarray(b, dtype=np.float64) / acc_scale)
            if np.any(np.abs(q) >= 2**31):
                raise ValueError("a bias does not fit in int32 at its accumulator's scale")
            return q.astype(np.int64)

        layers.append(_Layer(
            q_w=q_w, k_w=k_w, v_w=v_w, o_w=o_w, gate_w=gate_w, up_w=up_w, down_w=down_w,
            q_b=bias(lw.q_b, s.norm1[i] * q_c), k_b=bias(lw.k_b, s.norm1[i] * k_c),
            v_b=bias(lw.v_b, s.norm1[i] * v_c),
            q_req=quant_multiplier(s.norm1[i] * q_c / s.q[i]),
            k_req=quant_multiplier(s.norm1[i] * k_c / s.k[i]),
            v_req=quant_multiplier(s.norm1[i] * v_c / s.v[i]),
            o_req=quant_multiplier(s.attn[i] * o_c / s.residual),
            gate_req=quant_multiplier(s.norm2[i] * gate_c / s.gate[i]),
            up_req=quant_multiplier(s.norm2[i] * up_c / s.up[i]),
            down_req=quant_multiplier(s.act[i] * down_c / s.residual),
            act_req=quant_multiplier(s_silu * s.up[i] / s.act[i]),
            attn_req=quant_multiplier(s.v[i] / (2**16 * s.attn[i])),
            exp_req=quant_multiplier(s.q[i] * s.k[i] / math.sqrt(c.head_dim)
                                     * EXP_STEPS_PER_UNIT),
            norm1_req=norm_req(lw.input_norm, s.norm1[i]),
            norm2_req=norm_req(lw.post_attention_norm, s.norm2[i]),
            silu=silu))
    embed_q, embed_c = _quantize_rows(weights.embed)
    head_q, head_c = ((embed_q, embed_c) if weights.lm_head is None
                      else _quantize_rows(weights.lm_head))
    half = c.head_dim // 2
    inv_freq = 1.0 / c.rope_theta ** (np.arange(half, dtype=np.float64) * 2 / c.head_dim)
    rope_inc = np.array([round(f / (2 * math.pi) * 2**32) % 2**32 for f in inv_freq],
                        dtype=np.int64)
    return QuantizedModel(
        config=c, scales=s, layers=layers, embed_w=_weights_for_matmul(head_q),
        embed_q=embed_q.astype(np.int8), embed_req=quant_multiplier(embed_c / s.residual),
        head_req=quant_multiplier(s.final_norm * head_c / s.logits),
        final_req=norm_req(weights.final_norm, s.final_norm),
        eps_q=max(1, round(c.rms_norm_eps / s.residual**2)), rope_inc=rope_inc)


def int_rmsnorm(r: np.ndarray, req, eps_q: int) -> np.ndarray:
    """int16 residual rows (n, hidden) -> int8 normalized rows, per the module's rules."""
    hidden = r.shape[-1]
    var = (r * r).sum(axis=-1) // hidden + eps_q
    e = np.array([int(v).bit_length() for v in var], dtype=np.int64)
    s = e - 8
    s = s + (s & 1)
    m = np.where(s >= 0, var >> np.maximum(s, 0), var << np.maximum(-s, 0))
    inv = RSQRT[m]
    norm = rshift_round(r * inv[:, None], (23 + s // 2 - 15)[:, None])
    return requant(norm, req, 8)


def int_rope(x: np.ndarray, positions: np.ndarray, inc: np.ndarray) -> np.ndarray:
    """int8 (n, heads, head_dim) rotated by the integer phase tables."""
    phase = (positions[:, None] * inc[None, :]) % 2**32
    idx = ((phase + 2**21) >> 22) & (2**ROPE_BITS - 1)
    cos, sin = COS[idx][:, None, :], SIN[idx][:, None, :]
    half = x.shape[-1] // 2
    x1, x2 = x[..., :half], x[..., half:]
    return np.concatenate([sat(rshift_round(x1 * cos - x2 * sin, 14), 8),
                           sat(rshift_round(x2 * cos + x1 * sin, 14), 8)], axis=-1)


def attend(q, keys, values, causal, exp_req, attn_req) -> np.ndarray:
    """Integer attention of queries ``q`` (n, heads, d) over ``keys``/``values`` (t, heads, d)
    where ``causal`` (n, t) allows; returns int8 outputs (n, heads, d)."""
    scores = np.einsum("nhd,thd->hnt", q, keys.astype(np.int64))
    scores = np.where(causal[None], scores, np.iinfo(np.int64).min // 4)
    d = scores - scores.max(axis=-1, keepdims=True)
    j = np.minimum(255, -rshift_round(d * exp_req[0], exp_req[1]))
    e = np.where(causal[None], EXP[np.maximum(j, 0)], 0)
    recip = (np.int64(1) << 46) // e.sum(axis=-1, keepdims=True)
    p = (e * recip + (1 << 29)) >> 30
    acc = np.einsum("hnt,thd->nhd", p, values.astype(np.int64))
    return requant(acc, attn_req, 8)


class IntDecoder:
    """The integer model with an int8 KV cache; the same API as
    :class:`~heteroreason.model.spec.numerics.qwen2_float.FloatDecoder` (logits are int32
    values)."""

    def __init__(self, model: QuantizedModel):
        self.m = model
        c = model.config
        self.config = c
        n_layers = len(model.layers)
        self.k_cache = np.zeros((n_layers, c.max_context, c.kv_heads, c.head_dim), np.int8)
        self.v_cache = np.zeros_like(self.k_cache)
        self.length = 0
        self.last_hidden: np.ndarray | None = None  # final-norm output, int8 values

    rollback = FloatDecoder.rollback
    _check_tokens = FloatDecoder._check_tokens

    def forward(self, tokens) -> np.ndarray:
        tokens = self._check_tokens(tokens)
        m, c = self.m, self.config
        n, start = tokens.size, self.length
        total = start + n
        positions = np.arange(start, total, dtype=np.int64)
        group = c.heads // c.kv_heads
        em, ek = m.embed_req
        rows = m.embed_q[tokens].astype(np.int64)
        r = sat(rshift_round(rows * em[tokens][:, None], ek[tokens][:, None]), 16)
        causal = positions[:, None] >= np.arange(total)[None, :]
        for layer, ql in enumerate(m.layers):
            h = int_rmsnorm(r, ql.norm1_req, m.eps_q)
            q = requant(_matmul(h, ql.q_w) + ql.q_b, ql.q_req, 8).reshape(n, c.heads, -1)
            k = requant(_matmul(h, ql.k_w) + ql.k_b, ql.k_req, 8).reshape(n, c.kv_heads, -1)
            v = requant(_matmul(h, ql.v_w) + ql.v_b, ql.v_req, 8).reshape(n, c.kv_heads, -1)
            q, k = int_rope(q, positions, m.rope_inc), int_rope(k, positions, m.rope_inc)
            self.k_cache[layer, start:total] = k
            self.v_cache[layer, start:total] = v
            keys = np.repeat(self.k_cache[layer, :total], group, axis=1)
            values = np.repeat(self.v_cache[layer, :total], group, axis=1)
            attn = attend(q, keys, values, causal, ql.exp_req, ql.attn_req).reshape(n, c.q_dim)
            r = sat(r + requant(_matmul(attn, ql.o_w), ql.o_req, 16), 16)
            h = int_rmsnorm(r, ql.norm2_req, m.eps_q)
            gate = requant(_matmul(h, ql.gate_w), ql.gate_req, 8)
            up = requant(_matmul(h, ql.up_w), ql.up_req, 8)
            act = requant(ql.silu[gate + 128] * up, ql.act_req, 8)
            r = sat(r + requant(_matmul(act, ql.down_w), ql.down_req, 16), 16)
        self.length = total
        x = int_rmsnorm(r, m.final_req, m.eps_q)
        self.last_hidden = x
        return requant(_matmul(x, m.embed_w), m.head_req, 32)

    def prefill(self, tokens) -> np.ndarray:
        return self.forward(tokens)

    def decode(self, token: int) -> np.ndarray:
        return self.forward([token])[0]

    def dequantized_hidden(self) -> np.ndarray:
        return self.last_hidden * self.m.scales.final_norm

    def dequantized_logits(self, logits: np.ndarray) -> np.ndarray:
        return logits * self.m.scales.logits
