"""Host links between the devices: bandwidth plus a fixed latency per transfer.

Token ids cross as 4-byte words; the prompt's draft KV cache crosses once per problem
(``layers x 2 x kv_heads x head_dim x bytes`` per prompt token, 12,288 B for Qwen2.5-0.5B at
16 bits).
"""

from __future__ import annotations

from dataclasses import dataclass

from heteroreason.model.spec.numerics.qwen2_config import Qwen2Config

__all__ = ["BYTES_PER_TOKEN_ID", "LINKS", "LinkConfig", "link"]

BYTES_PER_TOKEN_ID = 4


@dataclass(frozen=True)
class LinkConfig:
    """A host link: its sustained bandwidth in bytes a second and its latency a transfer in ms,
    with their source."""

    name: str
    bandwidth_bytes_per_s: float
    latency_ms: float
    source: str = ""

    def __post_init__(self):
        if self.bandwidth_bytes_per_s <= 0:
            raise ValueError(f"{self.name}: bandwidth_bytes_per_s must be positive, "
                             f"not {self.bandwidth_bytes_per_s!r}")
        if self.latency_ms < 0:
            raise ValueError(f"{self.name}: latency_ms must not be negative")

    def transfer_ms(self, nbytes: float) -> float:
        if nbytes < 0:
            raise ValueError(f"nbytes must not be negative, not {nbytes!r}")
        if nbytes == 0:
            return 0.0
        return self.latency_ms + 1e3 * nbytes / self.bandwidth_bytes_per_s

    def tokens_ms(self, tokens: int) -> float:
        """Time to send ``tokens`` token ids in one transfer."""
        return self.transfer_ms(tokens * BYTES_PER_TOKEN_ID)

    def kv_migration_ms(self, model: Qwen2Config, prompt_tokens: int, *,
                        bytes_per_element: float = 2.0) -> float:
        return self.transfer_ms(model.kv_bytes_per_token(bytes_per_element) * prompt_tokens)


_LINK_SOURCE = ("bandwidth: the effective figure the artifact's simulator and docs/design.md §10 "
                "use; latency: assumed, a DMA round trip's order of magnitude")
LINKS: dict[str, LinkConfig] = {c.name: c for c in (
    LinkConfig("pcie3-x16", 16e9, 0.001, _LINK_SOURCE),
    LinkConfig("pcie4-x16", 32e9, 0.001, _LINK_SOURCE),
    LinkConfig("pcie5-x8", 32e9, 0.001, _LINK_SOURCE),
    LinkConfig("pcie5-x16", 64e9, 0.001, _LINK_SOURCE),
    LinkConfig("ideal", 1e18, 0.0, "assumed: no link cost"),
)}


def link(name: str) -> LinkConfig:
    if name not in LINKS:
        raise KeyError(f"unknown link {name!r}; choose one of {', '.join(LINKS)}")
    return LINKS[name]
