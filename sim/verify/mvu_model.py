"""Transaction model of the matrix-vector unit's vector buffers, for its testbenches: what a
job's results are when it loads some of the unit's vectors and finds the others as earlier jobs
left them. Written from the unit's documented behaviour, with the integer reference's
``requant``."""

from __future__ import annotations

import numpy as np

from heteroreason.model.spec.numerics.qwen2_int8 import requant

__all__ = ["VectorBuffers"]


class VectorBuffers:
    """``vectors`` buffers of ``max_beats * lanes`` int8 values. A job's loads overwrite its
    first vectors' first ``beats`` beats (zero past the vector's end); the others keep what they
    held. A reset does not clear them: what a simulation starts with is known (zeros) only for
    a unit that was never run before.

    Parameters
    ----------
    vectors, max_beats, lanes : int
        The unit's parameters of the same names.
    zeros : bool
        The buffers hold zeros (a fresh simulation); otherwise their contents are unknown until
        loaded, and so are the results that read them.
    """

    def __init__(self, *, vectors: int, max_beats: int, lanes: int, zeros: bool = True):
        self.lanes = lanes
        self.contents = np.zeros((vectors, max_beats * lanes), dtype=np.int64)
        self.known = np.full(self.contents.shape, zeros)

    def load(self, xs, beats: int) -> None:
        """A job loads the vectors ``xs`` (each at most ``beats * lanes`` long)."""
        for v, x in enumerate(xs):
            self.contents[v, :beats * self.lanes] = 0
            self.contents[v, :len(x)] = x
            self.known[v, :beats * self.lanes] = True

    def results(self, w, bias, mult, shift, bits: int, beats: int, rows_per_beat: int):
        """The results of a job of weights ``w`` (rows x columns) over ``beats`` beats a row,
        in the order ``out`` carries them: row group by row group, vector by vector, the
        group's ``rows_per_beat`` rows; ``None`` for a vector whose buffer is not known."""
        cols, k, used = w.shape[1], rows_per_beat, beats * self.lanes
        per_vector = [requant(w @ x[:cols] + bias, (mult, shift), bits)
                      if known[:used].all() else None
                      for x, known in zip(self.contents, self.known, strict=True)]
        return [None if per_vector[v] is None else int(per_vector[v][g * k + j])
                for g in range(w.shape[0] // k) for v in range(len(per_vector))
                for j in range(k)]
