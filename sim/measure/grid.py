"""RTL measurements for the timing model's calibration: cycles of decode tokens of the decoder
core on Verilator (:mod:`heteroreason.sim.verify.tb.core_tb`), over a grid of presets,
parameterizations, memory latencies and positions."""

from __future__ import annotations

import subprocess
from dataclasses import dataclass
from pathlib import Path

from heteroreason.rtl.decoder.params import DecoderParams
from heteroreason.sim.measure.cycles import measure_token_cycles
from heteroreason.sim.measure.measured import Measured

__all__ = ["FULL_GRID", "QUICK_GRID", "GridEntry", "Measured", "git_revision", "measure"]


@dataclass(frozen=True)
class GridEntry:
    """One design of the calibration grid: the model preset, the decoder's parameters, the
    memory latency it is measured at, the positions measured, and whether it is held out."""

    preset: str
    params: DecoderParams
    memory_latency_cycles: int
    positions: tuple[int, ...]
    held_out: bool = False


def _entry(preset, lanes, stream_bytes, heads_parallel, weight_buffer, latency, positions,
           held_out=False, external_kv=False, vector_width=1, param_width=1, rows_per_beat=1,
           kv_rows=1):
    params = DecoderParams(lanes, stream_bytes, heads_parallel=heads_parallel,
                           weight_buffer=weight_buffer, external_kv=external_kv,
                           vector_width=vector_width, param_width=param_width,
                           rows_per_beat=rows_per_beat, kv_rows=kv_rows)
    return GridEntry(preset, params, latency, tuple(positions), held_out)


# fitted on test-tiny and test-small at several widths, vector widths, parameter widths, rows a
# beat, KV rows a cycle, buffer depths and latencies; held out: other parameterizations, the KV
# cache in memory and full-size Qwen2.5-0.5B layers (one at the design chosen for the U280 at
# 300 MHz, to context 4,095)
QUICK_GRID = (
    _entry("test-tiny", 16, 8, 2, 1024, 64, (16, 300)),
    _entry("test-tiny", 8, 4, 2, 64, 20, (100,), held_out=True, vector_width=4),
)
FULL_GRID = (
    *QUICK_GRID,
    _entry("test-tiny", 8, 8, 1, 64, 0, (16, 200, 500)),
    _entry("test-tiny", 32, 8, 2, 256, 20, (16, 500), vector_width=8),
    _entry("test-small", 16, 8, 4, 2048, 64, (16, 512, 1000)),
    _entry("test-small", 8, 8, 4, 2048, 64, (16, 512), vector_width=2),
    _entry("test-small", 32, 16, 2, 128, 0, (64, 700), vector_width=8),
    _entry("test-small", 32, 16, 2, 128, 0, (64, 700), vector_width=8, param_width=8),
    _entry("test-small", 32, 16, 2, 128, 0, (64, 700), vector_width=8, param_width=8,
           rows_per_beat=2),
    _entry("test-small", 32, 32, 4, 64, 30, (16, 300), vector_width=4),
    _entry("test-small", 32, 16, 2, 128, 40, (64, 700), external_kv=True, vector_width=8,
           param_width=8, kv_rows=4),
    _entry("test-tiny", 16, 8, 2, 256, 20, (16, 300), vector_width=4, kv_rows=2),
    _entry("test-small", 32, 8, 1, 512, 32, (64, 700), held_out=True),
    _entry("test-tiny", 16, 16, 1, 64, 20, (100,), held_out=True, vector_width=4,
           param_width=2),
    _entry("test-tiny", 16, 16, 1, 64, 20, (100,), held_out=True, vector_width=2,
           param_width=2, rows_per_beat=2),
    _entry("test-small", 16, 32, 2, 256, 40, (300,), held_out=True, external_kv=True,
           vector_width=8, param_width=4, rows_per_beat=4),
    _entry("test-small", 16, 16, 4, 64, 40, (300,), held_out=True, external_kv=True,
           vector_width=8),
    _entry("test-small", 16, 16, 2, 256, 40, (1000,), held_out=True, external_kv=True,
           vector_width=4, kv_rows=8),
    _entry("test-0.5b-layer", 128, 64, 7, 2048, 64, (16, 512), held_out=True),
    _entry("test-0.5b-layer", 448, 1792, 7, 4096, 90, (16, 1000), held_out=True,
           external_kv=True, vector_width=32, param_width=4, rows_per_beat=4),
    _entry("test-0.5b-layer", 448, 1792, 7, 4096, 90, (16, 2048, 4095), held_out=True,
           external_kv=True, vector_width=32, param_width=8, rows_per_beat=4, kv_rows=4),
)


def measure(entry: GridEntry, *, waves: bool = False,
            cxx_opt: str | None = None) -> tuple[list[Measured], Path]:
    """Run one grid entry on the RTL; returns its points and the build directory (which holds
    the waveform with ``waves``); ``cxx_opt`` as in :func:`.measure_token_cycles`."""
    run = measure_token_cycles(entry.preset, entry.params, entry.positions,
                               latency=entry.memory_latency_cycles, waves=waves,
                               cxx_opt=cxx_opt)
    points = [Measured(entry.preset, entry.params, entry.memory_latency_cycles, t.position,
                    t.cycles) for t in run.tokens]
    return points, run.build_dir


def git_revision() -> str:
    """The repository's revision (with ``+dirty`` when the RTL has local changes), or
    ``unknown`` outside a git checkout."""
    root = Path(__file__).resolve().parents[2]
    try:
        rev = subprocess.run(["git", "rev-parse", "HEAD"], cwd=root, capture_output=True,
                             text=True, check=True).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "rtl"],
                               cwd=root, capture_output=True, text=True, check=True).stdout
    except (OSError, subprocess.CalledProcessError):
        return "unknown"
    return rev + ("+dirty" if dirty.strip() else "")
