"""The decoder's whole weight schedule: the order in which one token consumes the model's weight
and parameter beats, as one definition for the RTL sequencer, the testbench's HBM model and the
timing model.

The order is the operator table's (:data:`heteroreason.rtl.decoder.operators.OPERATORS`): each
operator's weight region and parameter region, in turn. Per token: the token's embedding row;
then per layer ``q_proj, k_proj, v_proj, o_proj, gate_proj, up_proj, down_proj`` (each as
:func:`~heteroreason.rtl.decoder.weight_schedule.linear_schedule` beats, rows in order); then,
when the token's logits are kept, the LM head (the tied embedding matrix). Parameter beats travel
on their own stream in the order the operators take them: the embedding row's multiplier; per
layer the input RMSNorm's per-channel multipliers, the q/k/v/o row parameters, the
post-attention RMSNorm's multipliers, the gate row parameters, the 256-entry SiLU table (loaded
between gate and up, whose outputs feed SwiGLU directly), the up and down row parameters; then
the final RMSNorm's and the LM head's.

A parameter beat holds ``param_width`` entries: an RMSNorm's gains fill them (``param_width``
channels a beat), a matrix-vector operator's row parameters take ``rows_per_beat`` (the rows of
a weight beat), every other operator's entry is a beat's first; the rest are zeros
(:func:`entries_per_param_beat`).

A weight beat is ``lanes * rows_per_beat`` bytes: a matrix's beat carries ``rows_per_beat`` rows
side by side (:func:`~heteroreason.rtl.decoder.weight_schedule.linear_schedule`), an embedding
row fills whole beats, its tail zero-padded (``embed_row_beats`` a row).

:func:`decode_schedule` lays both images out in exactly that order, so that apart from the
token's embedding row and its multiplier everything a token reads is one contiguous range per
image (:meth:`DecodeSchedule.fetch_plan`, what the decoder's prefetcher requests);
:meth:`DecodeSchedule.token_regions` lists the named regions a token reads, in order, for HBM
models and timing models.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from heteroreason.model import checks
from heteroreason.model.spec.numerics.qwen2_int8 import QuantizedModel
from heteroreason.rtl.decoder.operators import EMBED, Unit, token_operators
from heteroreason.rtl.decoder.weight_schedule import linear_schedule

__all__ = ["DecodeSchedule", "Region", "decode_schedule", "entries_per_param_beat"]


@dataclass(frozen=True)
class Region:
    """``count`` beats from ``start`` in the weight image (``kind`` weights) or in the
    parameter image (``kind`` params)."""

    name: str
    kind: str
    start: int
    count: int


def _region_names(op, layer: int) -> tuple[str | None, str | None]:
    """The weight and parameter region names of ``op`` in ``layer`` (-1 outside the layers)."""
    prefix = f"layer{layer}." if op.per_layer else ""
    return (prefix + op.weights if op.weights else None,
            prefix + op.params if op.params else None)


@dataclass(frozen=True)
class DecodeSchedule:
    lanes: int
    weight_image: np.ndarray  # (beats, lanes * rows_per_beat) int8 values
    param_image: np.ndarray  # (beats, param_width, 3): bias/value, multiplier, shift
    regions: dict[str, Region]
    layers: int
    embed_row_beats: int

    @property
    def param_width(self) -> int:
        """Entries per parameter beat."""
        return self.param_image.shape[1]

    @property
    def beat_bytes(self) -> int:
        """Bytes of a weight beat (a row of the weight image)."""
        return self.weight_image.shape[1]

    @property
    def rows_per_beat(self) -> int:
        """Rows of a matrix a weight beat carries."""
        return self.beat_bytes // self.lanes

    def token_regions(self, token: int, *, keep_logits: bool) -> list[Region]:
        """The regions one token reads, in the order the decoder consumes them."""
        vocab = self.regions["embed_params"].count
        if not 0 <= token < vocab:
            raise ValueError(f"token id {token} is outside the vocabulary [0, {vocab})")
        embed, params = self.regions[EMBED.weights], self.regions[EMBED.params]
        out = [Region("embed_row", "weights", embed.start + token * self.embed_row_beats,
                      self.embed_row_beats),
               Region("embed_row_param", "params", params.start + token, 1)]
        for layer, op in token_operators(self.layers, keep_logits=keep_logits)[1:]:
            out += [self.regions[name] for name in _region_names(op, layer) if name]
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
        """The weight image as beats of ``stream_bytes`` (a divisor of :attr:`beat_bytes`):
        beat ``a * (beat_bytes // stream_bytes) + k`` is part ``k`` of the image's beat ``a``."""
        checks.integer("stream_bytes", stream_bytes, low=1,
                       divides=(self.beat_bytes, "a weight beat's bytes"))
        return self.weight_image.reshape(-1, stream_bytes)

    def weight_beats_per_token(self, *, keep_logits: bool = True) -> int:
        return sum(r.count for r in self.token_regions(0, keep_logits=keep_logits)
                   if r.kind == "weights")

    def param_beats_per_token(self, *, keep_logits: bool = True) -> int:
        return sum(r.count for r in self.token_regions(0, keep_logits=keep_logits)
                   if r.kind == "params")


def entries_per_param_beat(unit: Unit, param_width: int, rows_per_beat: int = 1) -> int:
    """The parameter entries a beat of ``unit``'s region carries: ``param_width`` for an
    RMSNorm's gains, ``rows_per_beat`` for a matrix-vector operator's row parameters, one for
    every other unit."""
    return param_width if unit is Unit.NORM else rows_per_beat if unit is Unit.MATVEC else 1


def _beats(entries: np.ndarray, per_beat: int, param_width: int) -> np.ndarray:
    """``entries`` (n, 3) as parameter beats of ``param_width`` entries, ``per_beat`` of them
    used (the rest zeros)."""
    beats = np.zeros((len(entries) // per_beat, param_width, 3), dtype=np.int64)
    beats[:, :per_beat] = entries.reshape(-1, per_beat, 3)
    return beats


def _per_channel(req) -> np.ndarray:
    mult, shift = (np.asarray(x, dtype=np.int64) for x in req)
    mult, shift = np.broadcast_arrays(mult, shift)
    return np.stack([np.zeros_like(mult), mult, shift], axis=1)


def _norm_params(model: QuantizedModel, layer: int, name: str) -> np.ndarray:
    if layer < 0:
        return _per_channel(model.final_req)
    ql = model.layers[layer]
    return _per_channel(ql.norm1_req if name == "norm1" else ql.norm2_req)


def _linear_data(model: QuantizedModel, layer: int, name: str):
    """(float weights, bias or None, requantization) of a matrix-vector operator."""
    if layer < 0:  # the LM head: the tied embedding matrix
        return model.embed_w, None, model.head_req
    ql = model.layers[layer]
    short = name.removesuffix("_proj")
    return getattr(ql, f"{short}_w"), getattr(ql, f"{short}_b", None), getattr(ql, f"{short}_req")


def decode_schedule(model: QuantizedModel, *, lanes: int, param_width: int = 1,
                    rows_per_beat: int = 1) -> DecodeSchedule:
    """Lay the model's weights and parameters out in consumption order, parameter beats of
    ``param_width`` entries, weight beats of ``rows_per_beat`` rows of ``lanes``."""
    checks.integer("lanes", lanes, low=1)
    c = model.config
    g = param_width
    checks.integer("param_width", g, low=1, divides=(c.hidden, "the hidden size"))
    if c.hidden % lanes:
        raise ValueError(f"lanes ({lanes}) must divide the hidden size ({c.hidden}) so that "
                         "embedding rows stream whole")
    r = rows_per_beat
    checks.integer("rows_per_beat", r, low=1, divides=(g, "param_width"))
    beat = lanes * r
    embed_row_beats = -(-c.hidden // beat)
    weights: list[np.ndarray] = []
    params: list[np.ndarray] = []
    regions: dict[str, Region] = {}
    at = {"weights": 0, "params": 0}

    def add(kind, name, rows, unit=None):
        if kind == "params":
            rows = _beats(rows, entries_per_param_beat(unit, g, r), g)
        regions[name] = Region(name, kind, at[kind], len(rows))
        (weights if kind == "weights" else params).append(rows)
        at[kind] += len(rows)

    for layer, op in token_operators(len(model.layers), keep_logits=True):
        w_name, p_name = _region_names(op, layer)
        if op.unit is Unit.EMBED:
            rows = np.zeros((c.vocab, embed_row_beats * beat), dtype=np.int64)
            rows[:, :c.hidden] = model.embed_q
            add("weights", w_name, rows.reshape(-1, beat))
            add("params", p_name, _per_channel(model.embed_req), op.unit)
        elif op.unit is Unit.NORM:
            add("params", p_name, _norm_params(model, layer, op.params), op.unit)
        elif op.unit is Unit.SILU_TABLE:
            silu = np.zeros((256, 3), dtype=np.int64)
            silu[:, 0] = model.layers[layer].silu
            add("params", p_name, silu, op.unit)
        elif op.unit is Unit.MATVEC:
            w_float, bias, req = _linear_data(model, layer, op.weights)
            sched = linear_schedule(np.rint(w_float).astype(np.int64), lanes=lanes,
                                    bias=bias, multiplier=req[0], shift=req[1],
                                    rows_per_beat=r)
            add("weights", w_name, sched.beats)
            add("params", p_name, np.stack([sched.bias, sched.multiplier, sched.shift],
                                           axis=1), op.unit)
    return DecodeSchedule(lanes, np.concatenate(weights), np.concatenate(params), regions,
                          len(model.layers), embed_row_beats)
