"""RTL measurements for the timing model's calibration: cycles of decode tokens of the decoder
core on Verilator (:mod:`heteroreason.sim.tb.core_tb`), over a grid of presets,
parameterizations, memory latencies and positions."""

from __future__ import annotations

import json
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

from heteroreason.model.calibration import Point
from heteroreason.model.fpga_timing import CoreParams
from heteroreason.sim.cocotb_run import run_cocotb

__all__ = ["FULL_GRID", "QUICK_GRID", "GridEntry", "git_revision", "measure"]


@dataclass(frozen=True)
class GridEntry:
    preset: str
    params: CoreParams
    positions: tuple[int, ...]
    held_out: bool = False


def _entry(preset, lanes, stream_bytes, heads_parallel, weight_buffer, latency, positions,
           held_out=False, external_kv=False, vector_width=1):
    return GridEntry(preset, CoreParams(lanes, stream_bytes, heads_parallel, weight_buffer,
                                        external_kv, latency, vector_width), tuple(positions),
                     held_out)


# fitted on test-tiny and test-small at several widths, vector widths, buffer depths and
# latencies; held out: other parameterizations, the KV cache in memory and full-size
# Qwen2.5-0.5B layers (one at the width of the design chosen for the U280)
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
    _entry("test-small", 32, 32, 4, 64, 30, (16, 300), vector_width=4),
    _entry("test-small", 32, 8, 1, 512, 32, (64, 700), held_out=True),
    _entry("test-small", 16, 16, 4, 64, 40, (300,), held_out=True, external_kv=True,
           vector_width=8),
    _entry("test-0.5b-layer", 128, 64, 7, 2048, 64, (16, 512), held_out=True),
    _entry("test-0.5b-layer", 896, 896, 7, 512, 90, (16, 1000), held_out=True,
           external_kv=True, vector_width=32),
)


def measure(entry: GridEntry, *, waves: bool = False) -> tuple[list[Point], Path]:
    """Run one grid entry on the RTL; returns its points and the build directory (which holds
    the waveform with ``waves``)."""
    p = entry.params
    params = {"preset": entry.preset, "seed": 1, "lanes": p.lanes,
              "stream_bytes": p.stream_bytes, "heads_parallel": p.heads_parallel,
              "weight_buffer": p.weight_buffer, "external_kv": int(p.external_kv),
              "vector_width": p.vector_width}
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "timing.json"
        result = run_cocotb(
            "decoder_core", "heteroreason.sim.tb.core_tb", params=params,
            testcase="token_timing", seed=1, waves=waves, log_file=Path(tmp) / "sim.log",
            extra_env={"HR_POSITIONS": ",".join(map(str, entry.positions)),
                       "HR_LATENCY": str(p.memory_latency_cycles), "HR_STALL": "0",
                       "HR_RESULT": str(out)})
        if result.failed or not out.exists():
            raise RuntimeError(f"the RTL run of {entry} failed:\n"
                               f"{(Path(tmp) / 'sim.log').read_text()[-3000:]}")
        rows = json.loads(out.read_text())
    points = [Point(entry.preset, p, r["position"], r["cycles"]) for r in rows]
    return points, result.build_dir


def git_revision() -> str:
    """The repository's revision (with ``+dirty`` when the RTL has local changes), or
    ``unknown`` outside a git checkout."""
    root = Path(__file__).resolve().parent.parent
    try:
        rev = subprocess.run(["git", "rev-parse", "HEAD"], cwd=root, capture_output=True,
                             text=True, check=True).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "rtl", "model/decode_schedule.py"],
                               cwd=root, capture_output=True, text=True, check=True).stdout
    except (OSError, subprocess.CalledProcessError):
        return "unknown"
    return rev + ("+dirty" if dirty.strip() else "")
