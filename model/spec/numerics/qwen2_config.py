"""Configurations of Qwen2-architecture decoders (docs/design.md §10) and the counts that follow
from them.

:class:`Qwen2Config` holds the shape (hidden size, layers, heads, KV heads, head dim, FFN,
vocabulary), RoPE theta, the RMSNorm epsilon, whether the LM head is tied to the embeddings, and
the longest context. Presets: the Qwen2.5 0.5B, 1.5B and 7B models, Qwen2.5-Math-PRM-7B, and
small test models with the 0.5B's structure (grouped-query attention, SwiGLU, tied LM head).

Counts per decoded token (:meth:`Qwen2Config.decode_counts`) at context ``n`` (tokens already in
the KV cache): multiply-accumulates per operator, weight bytes at 8 bits, KV bytes read and
written, activation bytes moved between operators at 8 bits.
"""

from __future__ import annotations

from dataclasses import dataclass

from heteroreason.model import checks

__all__ = ["PRESETS", "DecodeCounts", "Qwen2Config", "qwen2_config"]


@dataclass(frozen=True)
class DecodeCounts:
    """What decoding one token costs (per the whole model)."""

    macs: dict[str, int]
    weight_bytes: int
    kv_bytes_read: int
    kv_bytes_written: int
    activation_bytes: int

    @property
    def total_macs(self) -> int:
        return sum(self.macs.values())


@dataclass(frozen=True)
class Qwen2Config:
    name: str
    hidden: int
    layers: int
    heads: int
    kv_heads: int
    head_dim: int
    ffn: int
    vocab: int
    tied_embeddings: bool = True
    rope_theta: float = 1_000_000.0
    rms_norm_eps: float = 1e-6
    max_context: int = 32768

    def __post_init__(self):
        for key in ("hidden", "layers", "heads", "kv_heads", "head_dim", "ffn", "vocab",
                    "max_context"):
            value = getattr(self, key)
            checks.integer(f"{self.name}: {key}", value, low=1)
        if not isinstance(self.tied_embeddings, bool):
            raise ValueError(f"{self.name}: tied_embeddings must be a bool, not "
                             f"{self.tied_embeddings!r}")
        if self.hidden % self.heads:
            raise ValueError(f"{self.name}: heads ({self.heads}) must divide hidden "
                             f"({self.hidden})")
        if self.heads * self.head_dim != self.hidden:
            raise ValueError(f"{self.name}: heads x head_dim ({self.heads} x {self.head_dim}) "
                             f"must equal hidden ({self.hidden})")
        if self.heads % self.kv_heads:
            raise ValueError(f"{self.name}: kv_heads ({self.kv_heads}) must divide heads "
                             f"({self.heads})")
        if self.head_dim % 2:
            raise ValueError(f"{self.name}: head_dim must be even for rotary embeddings, "
                             f"not {self.head_dim}")
        if not self.rope_theta > 0 or not self.rms_norm_eps > 0:
            raise ValueError(f"{self.name}: rope_theta and rms_norm_eps must be positive")

    @property
    def q_dim(self) -> int:
        return self.heads * self.head_dim

    @property
    def kv_dim(self) -> int:
        return self.kv_heads * self.head_dim

    @property
    def params_per_layer(self) -> int:
        q = self.hidden * self.q_dim + self.q_dim
        kv = 2 * (self.hidden * self.kv_dim + self.kv_dim)
        o = self.q_dim * self.hidden
        mlp = 3 * self.hidden * self.ffn
        norms = 2 * self.hidden
        return q + kv + o + mlp + norms

    @property
    def embedding_params(self) -> int:
        return self.vocab * self.hidden

    @property
    def params(self) -> int:
        head = 0 if self.tied_embeddings else self.vocab * self.hidden
        return self.layers * self.params_per_layer + self.embedding_params + head + self.hidden

    def weight_bytes_per_token(self, bytes_per_weight: float) -> float:
        """Weight bytes streamed to decode one token (the embedding row is negligible; the
        LM head is the embedding matrix when tied)."""
        streamed = self.layers * self.params_per_layer + self.vocab * self.hidden
        return streamed * bytes_per_weight

    def kv_bytes_per_token(self, bytes_per_element: float) -> float:
        return self.layers * 2 * self.kv_heads * self.head_dim * bytes_per_element

    def macs_per_token(self, context: int = 0) -> int:
        """Multiply-accumulates to decode one token with ``context`` tokens already cached."""
        return self.decode_counts(context).total_macs

    def decode_counts(self, context: int, *, kv_bytes_per_element: int = 1) -> DecodeCounts:
        """Counts for one decoded token after ``context`` cached tokens (W8A8, 8-bit KV by
        default)."""
        checks.integer("context", context, low=0)
        attended = context + 1
        per_layer = {
            "q_proj": self.hidden * self.q_dim,
            "k_proj": self.hidden * self.kv_dim,
            "v_proj": self.hidden * self.kv_dim,
            "attention_scores": self.q_dim * attended,
            "attention_values": self.q_dim * attended,
            "o_proj": self.q_dim * self.hidden,
            "gate_proj": self.hidden * self.ffn,
            "up_proj": self.hidden * self.ffn,
            "down_proj": self.ffn * self.hidden,
        }
        macs = {k: v * self.layers for k, v in per_layer.items()}
        macs["lm_head"] = self.hidden * self.vocab
        kv_row = 2 * self.kv_dim * kv_bytes_per_element
        activations_per_layer = (2 * self.hidden + self.q_dim + 2 * self.kv_dim + self.q_dim
                                 + 3 * self.ffn + self.hidden)
        return DecodeCounts(
            macs=macs,
            weight_bytes=int(self.weight_bytes_per_token(1)),
            kv_bytes_read=self.layers * kv_row * attended,
            kv_bytes_written=self.layers * kv_row,
            activation_bytes=self.layers * activations_per_layer + self.hidden + self.vocab * 4,
        )


PRESETS: dict[str, Qwen2Config] = {c.name: c for c in (
    Qwen2Config("qwen2.5-0.5b", 896, 24, 14, 2, 64, 4864, 151936, True),
    Qwen2Config("qwen2.5-1.5b", 1536, 28, 12, 2, 128, 8960, 151936, True),
    Qwen2Config("qwen2.5-7b", 3584, 28, 28, 4, 128, 18944, 152064, False,
                max_context=131072),
    Qwen2Config("qwen2.5-math-prm-7b", 3584, 28, 28, 4, 128, 18944, 152064, False,
                max_context=4096),
    # test models: grouped-query attention, SwiGLU, tied LM head, like the 0.5B
    Qwen2Config("test-tiny", 64, 2, 4, 2, 16, 128, 256, True, rope_theta=10000.0,
                max_context=512),
    Qwen2Config("test-small", 128, 2, 8, 2, 16, 384, 512, True, rope_theta=10000.0,
                max_context=1024),
    # one Qwen2.5-0.5B layer at full dimensions behind a small vocabulary: the RTL's full-size
    # layer tests and benchmarks
    Qwen2Config("test-0.5b-layer", 896, 1, 14, 2, 64, 4864, 1024, True, max_context=4096),
    # as many layers as the 0.5B and more, at test-tiny's width: sequencing
    Qwen2Config("test-deep", 64, 26, 4, 2, 16, 128, 300, True, rope_theta=10000.0,
                max_context=128),
    # test-tiny behind a vocabulary that is not a power of two (host ids beyond it fit the
    # token field): bad input
    Qwen2Config("test-odd-vocab", 64, 2, 4, 2, 16, 128, 300, True, rope_theta=10000.0,
                max_context=128),
)}


def qwen2_config(name: str) -> Qwen2Config:
    if name not in PRESETS:
        raise KeyError(f"unknown model {name!r}; choose one of {', '.join(PRESETS)}")
    return PRESETS[name]
