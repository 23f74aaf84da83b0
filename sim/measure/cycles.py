"""Cycles of decode tokens measured on the decoder core's RTL (Verilator under cocotb, the
``token_timing`` test of :mod:`heteroreason.sim.verify.tb.core_tb`): the one measurement the
calibration grid, the decoder benchmark and the waveform checks all use."""

from __future__ import annotations

import json
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from heteroreason.rtl.decoder.params import DecoderParams
from heteroreason.sim.flow.export import DecoderDesign
from heteroreason.sim.verify.plan import Stimulus
from heteroreason.sim.verify.runner import run_cocotb

__all__ = ["MeasurementError", "TokenCycles", "TokenMeasurement", "measure_token_cycles"]


class MeasurementError(RuntimeError):
    """The RTL run failed; the message holds the end of its log."""


@dataclass(frozen=True)
class TokenCycles:
    """One decode token on the RTL: cycles from taking it to its sample leaving, the weight
    stream's beats, the cycles an operator waited on an empty buffer and those the stream was
    held back by a full one, and the wall-clock seconds the simulation took."""

    position: int
    cycles: int
    stream_beats: int
    weight_wait: int
    buffer_full: int
    sim_seconds: float


@dataclass(frozen=True)
class TokenMeasurement:
    tokens: tuple[TokenCycles, ...]
    build_dir: Path
    waves: Path | None


def measure_token_cycles(preset: str, params: DecoderParams, positions: Sequence[int], *,
                         latency: int = 0, stall: float = 0.0, waves: bool = False,
                         seed: int = 1, cxx_opt: str | None = None,
                         shared_kv_ports: bool = True,
                         weight_ports: Sequence[tuple[int, float]] = (),
                         port_fifo_depth: int = 8, shared_ports: bool = False,
                         port_gaps: str = "random",
                         port_refresh: tuple[int, ...] = ()) -> TokenMeasurement:
    """Time one decode token at each of ``positions`` (memory ``latency`` cycles, a beat
    skipped with probability ``stall``; an external KV cache's key and value rows on one set of
    ports with ``shared_kv_ports``, as the memory plan places them; the weights striped over
    ``weight_ports``, ``(latency, stall)`` each, ``port_fifo_depth`` slices ahead at most, their
    gaps laid out as ``port_gaps`` and ``port_refresh`` say (:mod:`~heteroreason.sim.verify.tb.
    port_gaps`), when it names any: ``latency`` and ``stall`` then apply to the other streams;
    with ``shared_ports`` the other streams are time-shared on those ports instead); raises
    :class:`MeasurementError` if the run fails.
    ``cxx_opt`` is the Verilator model's C++ optimization (:func:`.run_cocotb`): the cycles do
    not depend on it, the build and simulation times do."""
    with tempfile.TemporaryDirectory() as tmp:
        out, log = Path(tmp) / "timing.json", Path(tmp) / "sim.log"
        stimulus = Stimulus(positions=tuple(positions), latency=latency, stall=stall,
                            result=str(out), shared_kv_ports=shared_kv_ports,
                            weight_ports=tuple(weight_ports),
                            port_fifo_depth=port_fifo_depth, shared_ports=shared_ports,
                            port_gaps=port_gaps, port_refresh=tuple(port_refresh))
        result = run_cocotb("decoder_core", "heteroreason.sim.verify.tb.core_tb",
                            params=DecoderDesign(preset, params, seed).export_params(),
                            testcase="token_timing", seed=1, waves=waves, log_file=log,
                            stimulus=stimulus, cxx_opt=cxx_opt)
        if result.failed or not out.exists():
            raise MeasurementError(f"the RTL run of {preset} with {params} failed "
                                   f"({result.build_dir}):\n{log.read_text()[-3000:]}")
        rows = json.loads(out.read_text())
    tokens = tuple(TokenCycles(**row) for row in rows)
    return TokenMeasurement(tokens, result.build_dir, result.waves)
