"""The order in which the decoder consumes its weights: one definition for the RTL's
parameterization and the testbench's HBM model.

A linear operator with int8 weights ``W`` (rows x cols) is streamed row by row; each row is
``ceil(cols / lanes)`` beats of ``lanes`` weights, the last one zero-padded, so that a beat
always meets the same ``lanes`` input elements (``x[b*lanes : (b+1)*lanes]``). Each row's
requantization parameters (int32 bias, multiplier, shift) travel beside the row on a narrow
parameter stream, one beat per row.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

__all__ = ["LinearSchedule", "linear_schedule"]


@dataclass(frozen=True)
class LinearSchedule:
    rows: int
    cols: int
    lanes: int
    beats: np.ndarray  # (rows * beats_per_row, lanes) int8 values
    bias: np.ndarray  # (rows,) int32 values
    multiplier: np.ndarray  # (rows,) in [2**30, 2**31)
    shift: np.ndarray  # (rows,)

    @property
    def beats_per_row(self) -> int:
        return -(-self.cols // self.lanes)

    @property
    def weight_bytes(self) -> int:
        return self.rows * self.cols

    @property
    def streamed_bytes(self) -> int:
        return self.beats.size


def linear_schedule(weights_q: np.ndarray, *, lanes: int, bias=None, multiplier, shift
                    ) -> LinearSchedule:
    """Beats and row parameters of one linear operator (``weights_q``: int8 values)."""
    w = np.asarray(weights_q)
    if w.ndim != 2:
        raise ValueError(f"weights must be a 2-D (rows, cols) array, not shape {w.shape}")
    if isinstance(lanes, bool) or not isinstance(lanes, int) or lanes <= 0:
        raise ValueError(f"lanes must be a positive integer, not {lanes!r}")
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
    return LinearSchedule(rows, cols, lanes, padded.reshape(rows * per_row, lanes), bias,
                          mult, sh)
