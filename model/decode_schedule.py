"""The decoder's whole weight schedule: the order in which one token consumes the model's weight
and parameter beats, as one definition for the RTL sequencer and the testbench's HBM model.

Per token: the token's embedding row; then per layer ``q_proj, k_proj, v_proj, o_proj,
gate_proj, up_proj, down_proj`` (each as :func:`~heteroreason.model.weight_schedule.
linear_schedule` beats, rows in order); then, when the token's logits are kept, the LM head
(the tied embedding matrix). Parameter beats travel on their own stream in the order the
operators take them: the embedding row's multiplier; per layer the input RMSNorm's per-channel
multipliers, the q/k/v/o row parameters, the post-attention RMSNorm's multipliers, the gate row
parameters, the 256-entry SiLU table (loaded between gate and up, whose outputs feed SwiGLU
directly), the up and down row parameters; then the final RMSNorm's and the LM head's.

:func:`decode_schedule` lays both images out in exactly that order, so that apart from the
token's embedding row and its multiplier everything a token reads is one contiguous range per
image (:meth:`DecodeSchedule.fetch_plan`, what the decoder's prefetcher requests);
:meth:`DecodeSchedule.token_regions` lists the named regions a token reads, in order, for HBM
models and timing models.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from heteroreason.model.qwen2_int8 import QuantizedModel
from heteroreason.model.weight_schedule import linear_schedule

__all__ = ["DecodeSchedule", "Region", "decode_schedule"]

LAYER_OPERATORS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")


@dataclass(frozen=True)
class Region:
    """``count`` beats from ``start`` in the weight image (``kind`` weights) or in the
    parameter image (``kind`` params)."""

    name: str
    kind: str
    start: int
    count: int


@dataclass(frozen=True)
class DecodeSchedule:
    lanes: int
    weight_image: np.ndarray  # (beats, lanes) int8 values
    param_image: np.ndarray  # (beats, 3): bias/value, multiplier, shift
    regions: dict[str, Region]
    layers: int
    embed_row_beats: int

    def token_regions(self, token: int, *, keep_logits: bool) -> list[Region]:
        """The regions one token reads, in the order the decoder consumes them."""
        if not 0 <= token < self.regions["embed_params"].count:
            raise ValueError(f"token id {token} is outside the vocabulary "
                             f"[0, {self.regions['embed_params'].count})")
        embed = self.regions["embed"]
        params = self.regions["embed_params"]
        out = [Region("embed_row", "weights", embed.start + token * self.embed_row_beats,
                      self.embed_row_beats),
               Region("embed_row_param", "params", params.start + token, 1)]
        for layer in range(self.layers):
            p = f"layer{layer}."
            out.append(self.regions[p + "norm1"])
            for op in LAYER_OPERATORS:
                if op == "gate_proj":
                    out.append(self.regions[p + "norm2"])
                out.append(self.regions[p + op])
                if op == "up_proj":
                    out.append(self.regions[p + "silu"])
                out.append(self.regions[p + op + ".params"])
        out.append(self.regions["final_norm"])
        if keep_logits:
            out.append(self.regions["lm_head"])
            out.append(self.regions["lm_head.params"])
        return out

    def fetch_plan(self, token: int, *, keep_logits: bool) -> tuple[list[Region], list[Region]]:
        """The token's reads as the fewest requests: (weight requests, parameter requests), each
        the token's embedding entry, then everything up to the final norm, then the LM head's
        when the logits are kept."""
        weights, params = [], []
        separate = ("embed_row", "embed_row_param", "lm_head", "lm_head.params")
        for region in self.token_regions(token, keep_logits=keep_logits):
            out = weights if region.kind == "weights" else params
            if out and out[-1].name not in separate and region.name not in separate:
                last = out.pop()
                assert last.start + last.count == region.start, "images are in consumption order"
                region = Region(last.name, region.kind, last.start, last.count + region.count)
            out.append(region)
        return weights, params

    def stream_image(self, stream_bytes: int) -> np.ndarray:
        """The weight image as beats of ``stream_bytes`` (a divisor of ``lanes``): beat
        ``a * (lanes // stream_bytes) + k`` is part ``k`` of the image's beat ``a``."""
        if isinstance(stream_bytes, bool) or not isinstance(stream_bytes, int) or \
                stream_bytes <= 0 or self.lanes % stream_bytes:
            raise ValueError(f"stream_bytes must be a positive divisor of lanes ({self.lanes}), "
                             f"not {stream_bytes!r}")
        return self.weight_image.reshape(-1, stream_bytes)

    def weight_beats_per_token(self, *, keep_logits: bool = True) -> int:
        return sum(r.count for r in self.token_regions(0, keep_logits=keep_logits)
                   if r.kind == "weights")

    def param_beats_per_token(self, *, keep_logits: bool = True) -> int:
        return sum(r.count for r in self.token_regions(0, keep_logits=keep_logits)
                   if r.kind == "params")


def decode_schedule(model: QuantizedModel, *, lanes: int) -> DecodeSchedule:
    """Lay the model's weights and parameters out in consumption order."""
    if isinstance(lanes, bool) or not isinstance(lanes, int) or lanes <= 0:
        raise ValueError(f"lanes must be a positive integer, not {lanes!r}")
    c = model.config
    if c.hidden % lanes:
        raise ValueError(f"lanes ({lanes}) must divide the hidden size ({c.hidden}) so that "
                         "embedding rows stream whole")
    weights: list[np.ndarray] = []
    params: list[np.ndarray] = []
    regions: dict[str, Region] = {}
    w_at = p_at = 0

    def add_weights(name, beats):
        nonlocal w_at
        regions[name] = Region(name, "weights", w_at, len(beats))
        weights.append(beats)
        w_at += len(beats)

    def add_params(name, rows):
        nonlocal p_at
        rows = np.asarray(rows, dtype=np.int64).reshape(-1, 3)
        regions[name] = Region(name, "params", p_at, len(rows))
        params.append(rows)
        p_at += len(rows)

    def per_channel(req):
        mult, shift = (np.asarray(x, dtype=np.int64) for x in req)
        mult, shift = np.broadcast_arrays(mult, shift)
        return np.stack([np.zeros_like(mult), mult, shift], axis=1)

    def linear(name, w_float, bias, req):
        sched = linear_schedule(np.rint(w_float).astype(np.int64), lanes=lanes, bias=bias,
                                multiplier=req[0], shift=req[1])
        add_weights(name, sched.beats)
        add_params(name + ".params",
                   np.stack([sched.bias, sched.multiplier, sched.shift], axis=1))

    embed = model.embed_q.astype(np.int64)
    add_weights("embed", embed.reshape(-1, lanes))
    add_params("embed_params", per_channel(model.embed_req))
    for i, ql in enumerate(model.layers):
        p = f"layer{i}."
        add_params(p + "norm1", per_channel(ql.norm1_req))
        linear(p + "q_proj", ql.q_w, ql.q_b, ql.q_req)
        linear(p + "k_proj", ql.k_w, ql.k_b, ql.k_req)
        linear(p + "v_proj", ql.v_w, ql.v_b, ql.v_req)
        linear(p + "o_proj", ql.o_w, None, ql.o_req)
        add_params(p + "norm2", per_channel(ql.norm2_req))
        linear(p + "gate_proj", ql.gate_w, None, ql.gate_req)
        silu = np.zeros((256, 3), dtype=np.int64)
        silu[:, 0] = ql.silu
        add_params(p + "silu", silu)
        linear(p + "up_proj", ql.up_w, None, ql.up_req)
        linear(p + "down_proj", ql.down_w, None, ql.down_req)
    add_params("final_norm", per_channel(model.final_req))
    linear("lm_head", model.embed_w, None, model.head_req)
    return DecodeSchedule(lanes, np.concatenate(weights), np.concatenate(params), regions,
                          len(model.layers), c.hidden // lanes)
