"""The order in which the decoder consumes its weights: one definition for the RTL's
parameterization and the testbench's HBM model.

A linear operator with int8 weights ``W`` (rows x cols) is streamed row by row; each row is
``ceil(cols / lanes)`` beats of ``lanes`` weights, the last one zero-padded, so that a beat
always meets the same ``lanes`` input elements (``x[b*lanes : (b+1)*lanes]``). Each row's
requantization parameters (int32 bias, multiplier, shift) travel beside the row on a narrow
parameter stream, one beat per row. A beat striped over several memory ports is cut into
slices by :func:`slice_bytes` (the testbench's HBM model and the memory plan agree on it).

With ``rows_per_beat`` k > 1 the rows go in groups of k consecutive rows: a beat carries the
same beat of each row of its group side by side (row ``g * k + j`` in lanes ``[j * lanes,
(j + 1) * lanes)``), so a weight beat is ``k * lanes`` wide and meets one vector beat; the rows
must divide into groups.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from heteroreason.model import checks

__all__ = ["LinearSchedule", "linear_schedule", "slice_bytes"]


@dataclass(frozen=True)
class LinearSchedule:
    rows: int
    cols: int
    lanes: int
    beats: np.ndarray  # (rows / rows_per_beat * beats_per_row, rows_per_beat * lanes) int8
    bias: np.ndarray  # (rows,) int32 values
    multiplier: np.ndarray  # (rows,) in [2**30, 2**31)
    shift: np.ndarray  # (rows,)
    rows_per_beat: int = 1

    @property
    def groups(self) -> int:
        """Row groups: the rows a command of a :class:`~heteroreason.rtl.decoder.mvu.
        MatVecUnit` with the same ``rows_per_beat`` counts."""
        return self.rows // self.rows_per_beat

    @property
    def beats_per_row(self) -> int:
        return -(-self.cols // self.lanes)

    @property
    def weight_bytes(self) -> int:
        return self.rows * self.cols

    @property
    def streamed_bytes(self) -> int:
        return self.beats.size


def linear_schedule(weights_q: np.ndarray, *, lanes: int, bias=None, multiplier, shift,
                    rows_per_beat: int = 1) -> LinearSchedule:
    """Beats and row parameters of one linear operator (``weights_q``: int8 values)."""
    w = np.asarray(weights_q)
    if w.ndim != 2:
        raise ValueError(f"weights must be a 2-D (rows, cols) array, not shape {w.shape}")
    checks.integer("lanes", lanes, low=1)
    k = rows_per_beat
    checks.integer("rows_per_beat", k, low=1, divides=(w.shape[0], "the rows"))
    if np.any(w < -128) or np.any(w > 127):
        raise ValueError("weights must be int8 values")
    rows, cols = w.shape
    per_row = -(-cols // lanes)
    padded = np.zeros((rows, per_row * lanes), dtype=np.int64)
    padded[:, :cols] = w
    bias = np.zeros(rows, dtype=np.int64) if bias is None else np.asarray(bias, np.int64)
    mult = np.broadcast_to(np.asarray(multiplier, dtype=np.int64), (rows,)).copy()
    sh = np.broadcast_to(np.asarray(shift, dtype=np.int64), (rows,)).copy()
    if bias.shape != (rows,):
        raise ValueError(f"bias must have {rows} entries, not shape {bias.shape}")
    if np.any(np.abs(bias) >= 2**31):
        raise ValueError("biases must be int32 values")
    if np.any(mult < 2**30) or np.any(mult >= 2**31) or np.any(sh < 1) or np.any(sh > 62):
        raise ValueError("multipliers must lie in [2**30, 2**31) and shifts in [1, 62]")
    # (group, row in group, beat, lane) -> (group, beat, row in group, lane)
    beats = padded.reshape(rows // k, k, per_row, lanes).transpose(0, 2, 1, 3)
    return LinearSchedule(rows, cols, lanes, beats.reshape(rows // k * per_row, k * lanes),
                          bias, mult, sh, k)


def slice_bytes(beat_bytes: int, ports: int) -> tuple[int, ...]:
    """The bytes each of ``ports`` ports carries of a ``beat_bytes`` beat: as even as whole
    bytes allow, the larger slices first (the testbench's striped model splits beats so)."""
    checks.integer("ports", ports, low=1, high=beat_bytes, note="the beat's bytes")
    base, extra = divmod(beat_bytes, ports)
    return tuple(base + 1 if k < extra else base for k in range(ports))
