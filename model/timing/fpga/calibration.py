"""Calibration of :mod:`heteroreason.model.timing.fpga.core_cycles` from RTL simulation:
measured points, the fit of the per-operator overheads, and the committed calibration file.

A calibration file (JSON, ``model/timing/fpga/data/decoder_core.json``) holds the fitted
overheads, the points they were fitted on and the held-out points with their errors, and the
hash of the RTL sources it came from: :func:`load_calibration` refuses a file whose hash differs
from the sources installed (recalibrate with ``scripts/calibrate.py``) or that lacks a field.
The hash is over the sources' code (their syntax trees without docstrings), so comments and
documentation can change without a recalibration; any change to the code cannot.
"""

from __future__ import annotations

import ast
import hashlib
import json
from dataclasses import asdict, dataclass, fields, replace
from pathlib import Path

from heteroreason.model.files import InputError, loads_json, read_text
from heteroreason.model.numerics.qwen2_config import qwen2_config
from heteroreason.model.timing.fpga.core_cycles import OVERHEADS, CoreTiming, Overheads
from heteroreason.rtl.decoder.params import DecoderParams

__all__ = ["CALIBRATION_FILE", "RTL_DIR", "RTL_SOURCES", "Calibration", "CalibrationError", "Point",
           "fit_overheads", "load_calibration", "rtl_hash", "save_calibration"]

CALIBRATION_FILE = Path(__file__).parent / "data" / "decoder_core.json"
RTL_DIR = Path(__file__).resolve().parents[3] / "rtl"
# the decoder's behaviour: its units, its sequencer and operator table, the memory map it reads
RTL_SOURCES = ("compare.py", "decoder/arith.py", "decoder/attention.py", "decoder/core.py",
                "decoder/decode_schedule.py", "decoder/mvu.py", "decoder/operators.py",
                "decoder/params.py", "decoder/pipeline.py", "decoder/rmsnorm.py", "decoder/rope.py",
                "decoder/sampler.py", "decoder/sequencer.py", "decoder/swiglu.py",
                "decoder/weight_schedule.py")


class CalibrationError(ValueError):
    """A calibration file that cannot be used; the message says which file and why."""


def _code(source: str) -> str:
    """The source's syntax tree without docstrings: what the code does, not how it reads."""
    tree = ast.parse(source)
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        documented = isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef,
                                       ast.AsyncFunctionDef)) and body \
            and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant) \
            and isinstance(body[0].value.value, str)
        if documented:
            node.body = body[1:] or [ast.Pass()]
    return ast.dump(tree, include_attributes=False)


def rtl_hash(rtl_dir: Path = RTL_DIR) -> str:
    """SHA-256 over the code of the decoder's RTL sources (and the memory map they follow)."""
    digest = hashlib.sha256()
    for name in RTL_SOURCES:
        digest.update(name.encode())
        digest.update(_code((Path(rtl_dir) / name).read_text(encoding="utf-8")).encode())
    return digest.hexdigest()


@dataclass(frozen=True)
class Point:
    """One RTL measurement: cycles of one decode token at ``position``."""

    preset: str
    params: DecoderParams
    memory_latency_cycles: int
    position: int
    cycles: int

    def timing(self, overheads: Overheads) -> CoreTiming:
        return CoreTiming(qwen2_config(self.preset), self.params,
                          memory_latency_cycles=self.memory_latency_cycles, overheads=overheads)

    def error(self, overheads: Overheads) -> float:
        """Relative error of the model against the RTL."""
        return self.timing(overheads).token_cycles(self.position) / self.cycles - 1.0

    def to_json(self) -> dict:
        return {"preset": self.preset, "params": self.params.to_json(),
                "memory_latency_cycles": self.memory_latency_cycles,
                "position": self.position, "cycles": self.cycles}

    @classmethod
    def from_json(cls, obj: dict, where: str) -> Point:
        try:
            return cls(str(obj["preset"]), DecoderParams.from_json(obj["params"]),
                       int(obj["memory_latency_cycles"]), int(obj["position"]),
                       int(obj["cycles"]))
        except (KeyError, TypeError, ValueError) as exc:
            raise CalibrationError(f"{where}: a point is malformed ({exc})") from None


def _objective(points: list[Point], overheads: Overheads) -> float:
    return sum(p.error(overheads) ** 2 for p in points)


def fit_overheads(points: list[Point], start: Overheads = OVERHEADS, *, rounds: int = 6
                  ) -> Overheads:
    """Per-operator overheads minimizing the squared relative error over ``points``
    (coordinate descent with shrinking steps; the model is piecewise linear in them)."""
    if not points:
        raise ValueError("fitting needs at least one point")
    best, score = start, _objective(points, start)
    for step in (32.0, 16.0, 8.0, 4.0, 2.0, 1.0, 0.5)[:rounds + 1]:
        improved = True
        while improved:
            improved = False
            for name in Overheads.names():
                for delta in (step, -step):
                    value = getattr(best, name) + delta
                    if value < 0:
                        continue
                    candidate = replace(best, **{name: value})
                    s = _objective(points, candidate)
                    if s < score - 1e-15:
                        best, score, improved = candidate, s, True
    return best


@dataclass(frozen=True)
class Calibration:
    overheads: Overheads
    rtl_hash: str
    rtl_revision: str
    train: tuple[Point, ...]
    held_out: tuple[Point, ...]

    def to_json(self) -> dict:
        return {"format": "heteroreason-calibration/2", "rtl_hash": self.rtl_hash,
                "rtl_revision": self.rtl_revision, "overheads": asdict(self.overheads),
                "train": [p.to_json() for p in self.train],
                "held_out": [p.to_json() | {"model_error": round(p.error(self.overheads), 6)}
                             for p in self.held_out]}


def save_calibration(calibration: Calibration, path: Path = CALIBRATION_FILE) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(calibration.to_json(), indent=1) + "\n")
    return path


def load_calibration(path: Path = CALIBRATION_FILE, *, check_rtl: bool = True) -> Calibration:
    """Read a calibration file; with ``check_rtl`` it must come from the installed RTL."""
    path = Path(path)
    if not path.exists():
        raise CalibrationError(f"{path}: no calibration file (run scripts/calibrate.py)")
    try:
        obj = loads_json(read_text(path), str(path))
    except InputError as exc:
        raise CalibrationError(str(exc)) from None
    if not isinstance(obj, dict):
        raise CalibrationError(f"{path}: must hold a JSON object, not {type(obj).__name__}")
    missing = [k for k in ("format", "rtl_hash", "rtl_revision", "overheads", "train",
                           "held_out") if k not in obj]
    if missing:
        raise CalibrationError(f"{path}: field {missing[0]!r} is missing")
    if obj["format"] != "heteroreason-calibration/2":
        raise CalibrationError(f"{path}: field 'format' must be heteroreason-calibration/2, "
                               f"not {obj['format']!r}")
    names = set(Overheads.names())
    got = obj["overheads"]
    if not isinstance(got, dict) or set(got) != names:
        raise CalibrationError(f"{path}: field 'overheads' must name exactly "
                               f"{sorted(names)}")
    if check_rtl and obj["rtl_hash"] != rtl_hash():
        raise CalibrationError(
            f"{path}: calibrated on RTL {obj['rtl_hash'][:12]} (revision "
            f"{obj['rtl_revision'][:12]}), but the RTL here is {rtl_hash()[:12]}: "
            "recalibrate with scripts/calibrate.py")
    overheads = Overheads(**{f.name: float(got[f.name]) for f in fields(Overheads)})
    return Calibration(overheads, obj["rtl_hash"], obj["rtl_revision"],
                       tuple(Point.from_json(p, str(path)) for p in obj["train"]),
                       tuple(Point.from_json(p, str(path)) for p in obj["held_out"]))
