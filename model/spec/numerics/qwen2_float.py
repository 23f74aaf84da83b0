"""Floating-point reference decoder of the Qwen2 architecture, in numpy (float64).

Per layer: ``h = x + o_proj(attention(rope(q_proj(n1)), rope(k_proj(n1)), v_proj(n1)))`` with
``n1 = rmsnorm(x)``, then ``x' = h + down_proj(silu(gate_proj(n2)) * up_proj(n2))`` with
``n2 = rmsnorm(h)``; q/k/v projections carry biases; attention is grouped-query (query head
``h`` reads KV head ``h // (heads / kv_heads)``), scaled by ``1 / sqrt(head_dim)``, causal; RoPE
rotates the two halves of each head (``x * cos + rotate_half(x) * sin``); the final RMSNorm feeds
the LM head, tied to the embedding matrix; sampling is greedy (lowest index on ties).

Weights are random and seeded (no downloads), scaled so that activations keep unit order of
magnitude and the logits are not flat (their spread is about 3 per token).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from heteroreason.model.spec.numerics.qwen2_config import Qwen2Config

__all__ = ["FloatDecoder", "LayerWeights", "Qwen2Weights", "greedy", "random_weights"]


@dataclass(frozen=True)
class LayerWeights:
    q_w: np.ndarray  # (q_dim, hidden): out x in, like torch.nn.Linear
    q_b: np.ndarray
    k_w: np.ndarray
    k_b: np.ndarray
    v_w: np.ndarray
    v_b: np.ndarray
    o_w: np.ndarray
    gate_w: np.ndarray
    up_w: np.ndarray
    down_w: np.ndarray
    input_norm: np.ndarray
    post_attention_norm: np.ndarray


@dataclass(frozen=True)
class Qwen2Weights:
    config: Qwen2Config
    embed: np.ndarray  # (vocab, hidden); the LM head when tied
    layers: tuple[LayerWeights, ...]
    final_norm: np.ndarray
    lm_head: np.ndarray | None = None

    @property
    def head(self) -> np.ndarray:
        return self.embed if self.lm_head is None else self.lm_head

    def state_dict(self) -> dict[str, np.ndarray]:
        """HuggingFace ``Qwen2ForCausalLM`` parameter names."""
        sd = {"model.embed_tokens.weight": self.embed, "model.norm.weight": self.final_norm,
              "lm_head.weight": self.head}
        for i, lw in enumerate(self.layers):
            p = f"model.layers.{i}."
            for name, value in (
                    ("self_attn.q_proj.weight", lw.q_w), ("self_attn.q_proj.bias", lw.q_b),
                    ("self_attn.k_proj.weight", lw.k_w), ("self_attn.k_proj.bias", lw.k_b),
                    ("self_attn.v_proj.weight", lw.v_w), ("self_attn.v_proj.bias", lw.v_b),
                    ("self_attn.o_proj.weight", lw.o_w), ("mlp.gate_proj.weight", lw.gate_w),
                    ("mlp.up_proj.weight", lw.up_w), ("mlp.down_proj.weight", lw.down_w),
                    ("input_layernorm.weight", lw.input_norm),
                    ("post_attention_layernorm.weight", lw.post_attention_norm)):
                sd[p + name] = value
        return sd


def random_weights(config: Qwen2Config, *, seed: int, layers: int | None = None,
                   dtype=np.float32) -> Qwen2Weights:
    """Seeded random weights; ``layers`` builds only the first few (e.g. one full-size layer)."""
    if not isinstance(seed, int) or seed < 0:
        raise ValueError(f"seed must be a non-negative integer, not {seed!r}")
    count = config.layers if layers is None else layers
    if not isinstance(count, int) or not 0 < count <= config.layers:
        raise ValueError(f"layers must be in [1, {config.layers}], not {layers!r}")
    rng = np.random.default_rng(seed)

    def linear(out_dim, in_dim):
        return (rng.standard_normal((out_dim, in_dim)) / np.sqrt(in_dim)).astype(dtype)

    def vec(n, mean=0.0, sd=0.1):
        return (mean + sd * rng.standard_normal(n)).astype(dtype)

    c = config
    layer_weights = tuple(
        LayerWeights(
            q_w=linear(c.q_dim, c.hidden), q_b=vec(c.q_dim), k_w=linear(c.kv_dim, c.hidden),
            k_b=vec(c.kv_dim), v_w=linear(c.kv_dim, c.hidden), v_b=vec(c.kv_dim),
            o_w=linear(c.hidden, c.q_dim), gate_w=linear(c.ffn, c.hidden),
            up_w=linear(c.ffn, c.hidden), down_w=linear(c.hidden, c.ffn),
            input_norm=vec(c.hidden, 1.0), post_attention_norm=vec(c.hidden, 1.0))
        for _ in range(count))
    embed = (rng.standard_normal((c.vocab, c.hidden)) * (3.0 / np.sqrt(c.hidden))).astype(dtype)
    lm_head = None if c.tied_embeddings else linear(c.vocab, c.hidden) * 3.0
    return Qwen2Weights(c, embed, layer_weights, vec(c.hidden, 1.0), lm_head)


def greedy(logits: np.ndarray) -> int:
    """Argmax; the lowest index wins ties."""
    return int(np.argmax(logits))


def rope_tables(config: Qwen2Config, positions: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    half = config.head_dim // 2
    inv_freq = 1.0 / config.rope_theta ** (np.arange(0, half, dtype=np.float64) * 2
                                           / config.head_dim)
    angles = positions.astype(np.float64)[:, None] * inv_freq[None, :]
    return np.cos(angles), np.sin(angles)


def _rope(x: np.ndarray, cos: np.ndarray, sin: np.ndarray) -> np.ndarray:
    """``x``: (n, heads, head_dim); cos/sin: (n, head_dim/2)."""
    half = x.shape[-1] // 2
    x1, x2 = x[..., :half], x[..., half:]
    c, s = cos[:, None, :], sin[:, None, :]
    return np.concatenate([x1 * c - x2 * s, x2 * c + x1 * s], axis=-1)


class FloatDecoder:
    """A decoder with a KV cache: ``prefill``/``decode`` append, ``rollback`` truncates."""

    def __init__(self, weights: Qwen2Weights):
        self.w = weights
        c = weights.config
        self.config = c
        n_layers = len(weights.layers)
        self.k_cache = np.zeros((n_layers, c.max_context, c.kv_heads, c.head_dim))
        self.v_cache = np.zeros_like(self.k_cache)
        self.length = 0
        self._f64 = [{k: np.asarray(v, dtype=np.float64) for k, v in lw.__dict__.items()}
                     for lw in weights.layers]
        self._embed = np.asarray(weights.embed, dtype=np.float64)
        self._head = (self._embed if weights.lm_head is None
                      else np.asarray(weights.lm_head, dtype=np.float64))
        self._final_norm = np.asarray(weights.final_norm, dtype=np.float64)
        self.last_hidden: np.ndarray | None = None
        # called as observer(name, layer, array) at every quantization point (calibration)
        self.observer = None

    def _see(self, name: str, layer: int, value: np.ndarray) -> None:
        if self.observer is not None:
            self.observer(name, layer, value)

    def rollback(self, position: int) -> None:
        if isinstance(position, bool) or not isinstance(position, int) or \
                not 0 <= position <= self.length:
            raise ValueError(f"rollback position must be in [0, {self.length}] (the cached "
                             f"tokens), not {position!r}")
        self.length = position

    def _check_tokens(self, tokens) -> np.ndarray:
        tokens = np.asarray(tokens)
        if tokens.ndim != 1 or tokens.size == 0 or not np.issubdtype(tokens.dtype, np.integer):
            raise ValueError("tokens must be a non-empty 1-D sequence of integers")
        bad = tokens[(tokens < 0) | (tokens >= self.config.vocab)]
        if bad.size:
            raise ValueError(f"token id {int(bad[0])} is outside the vocabulary "
                             f"[0, {self.config.vocab})")
        if self.length + tokens.size > self.config.max_context:
            raise ValueError(f"context of {self.length + tokens.size} tokens exceeds the "
                             f"maximum of {self.config.max_context}")
        return tokens

    def _norm(self, x: np.ndarray, weight: np.ndarray) -> np.ndarray:
        var = np.mean(x * x, axis=-1, keepdims=True)
        return x / np.sqrt(var + self.config.rms_norm_eps) * weight

    def forward(self, tokens) -> np.ndarray:
        """Process ``tokens`` after the cached ones; returns their logits (n, vocab)."""
        tokens = self._check_tokens(tokens)
        c = self.config
        n, start = tokens.size, self.length
        positions = np.arange(start, start + n)
        cos, sin = rope_tables(c, positions)
        group = c.heads // c.kv_heads
        x = self._embed[tokens]
        total = start + n
        mask = positions[:, None] >= np.arange(total)[None, :]  # (n, total)
        see = self._see
        see("residual", -1, x)
        for layer, lw in enumerate(self._f64):
            h = self._norm(x, lw["input_norm"])
            see("norm1", layer, h)
            q = (h @ lw["q_w"].T + lw["q_b"]).reshape(n, c.heads, c.head_dim)
            k = (h @ lw["k_w"].T + lw["k_b"]).reshape(n, c.kv_heads, c.head_dim)
            v = (h @ lw["v_w"].T + lw["v_b"]).reshape(n, c.kv_heads, c.head_dim)
            see("q", layer, q)
            see("k", layer, k)
            see("v", layer, v)
            q, k = _rope(q, cos, sin), _rope(k, cos, sin)
            see("q", layer, q)
            see("k", layer, k)
            self.k_cache[layer, start:total] = k
            self.v_cache[layer, start:total] = v
            keys = np.repeat(self.k_cache[layer, :total], group, axis=1)  # (total, heads, hd)
            values = np.repeat(self.v_cache[layer, :total], group, axis=1)
            scores = np.einsum("nhd,thd->hnt", q, keys) / np.sqrt(c.head_dim)
            scores = np.where(mask[None], scores, -np.inf)
            scores -= scores.max(axis=-1, keepdims=True)
            p = np.exp(scores)
            p /= p.sum(axis=-1, keepdims=True)
            attn = np.einsum("hnt,thd->nhd", p, values).reshape(n, c.q_dim)
            see("attn", layer, attn)
            x = x + attn @ lw["o_w"].T
            see("residual", layer, x)
            h = self._norm(x, lw["post_attention_norm"])
            see("norm2", layer, h)
            gate = h @ lw["gate_w"].T
            up = h @ lw["up_w"].T
            act = gate / (1.0 + np.exp(-gate)) * up
            see("gate", layer, gate)
            see("up", layer, up)
            see("act", layer, act)
            x = x + act @ lw["down_w"].T
            see("residual", layer, x)
        self.length = total
        self.last_hidden = self._norm(x, self._final_norm)
        see("final_norm", -1, self.last_hidden)
        logits = self.last_hidden @ self._head.T
        see("logits", -1, logits)
        return logits

    def prefill(self, tokens) -> np.ndarray:
        return self.forward(tokens)

    def decode(self, token: int) -> np.ndarray:
        return self.forward([token])[0]
