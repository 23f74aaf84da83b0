"""Architecture facts of the Qwen2-family models in the system (DESIGN §10) and the byte and
operation counts that follow from them: parameters, weight bytes, KV-cache bytes per token,
multiply-accumulates per decoded token."""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["SHAPES", "ModelShape", "shape"]


@dataclass(frozen=True)
class ModelShape:
    name: str
    hidden: int
    layers: int
    heads: int
    kv_heads: int
    head_dim: int
    ffn: int
    vocab: int
    tied_embeddings: bool

    def __post_init__(self):
        for key in ("hidden", "layers", "heads", "kv_heads", "head_dim", "ffn", "vocab"):
            value = getattr(self, key)
            if not isinstance(value, int) or value <= 0:
                raise ValueError(f"{self.name}: {key} must be a positive integer, not {value!r}")
        if self.heads % self.kv_heads:
            raise ValueError(f"{self.name}: kv_heads ({self.kv_heads}) must divide heads "
                             f"({self.heads})")

    @property
    def params_per_layer(self) -> int:
        q = self.hidden * self.heads * self.head_dim + self.heads * self.head_dim
        kv = 2 * (self.hidden * self.kv_heads * self.head_dim + self.kv_heads * self.head_dim)
        o = self.heads * self.head_dim * self.hidden
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
        """Multiply-accumulates to decode one token attending to ``context`` earlier tokens."""
        linear = self.layers * (self.params_per_layer - 2 * self.hidden) + self.vocab * self.hidden
        attention = self.layers * 2 * self.heads * self.head_dim * (context + 1)
        return linear + attention


SHAPES: dict[str, ModelShape] = {s.name: s for s in (
    ModelShape("qwen2.5-0.5b", 896, 24, 14, 2, 64, 4864, 151936, True),
    ModelShape("qwen2.5-1.5b", 1536, 28, 12, 2, 128, 8960, 151936, True),
    ModelShape("qwen2.5-7b", 3584, 28, 28, 4, 128, 18944, 152064, False),
    ModelShape("qwen2.5-math-prm-7b", 3584, 28, 28, 4, 128, 18944, 152064, False),
)}


def shape(name: str) -> ModelShape:
    if name not in SHAPES:
        raise KeyError(f"unknown model {name!r}; choose one of {', '.join(SHAPES)}")
    return SHAPES[name]
