"""Calibration of :mod:`heteroreason.model.timing.fpga.core_cycles` from RTL simulation:
measured points, the fit of the per-operator overheads, and the committed calibration file.

A calibration file (JSON, ``model/timing/fpga/data/decoder_core.json``) holds the fitted
overheads, the points they were fitted on and the held-out points with their errors, and the
hash of the RTL sources it came from: :func:`load_calibration` refuses a file whose hash differs
from the sources installed (recalibrate with ``heteroreason calibrate``) or that lacks a field.
The sources are every file under ``rtl/`` and the specification's modules they import
(:func:`rtl_sources`). The hash is over the sources' code (their syntax trees without
docstrings), so comments and documentation can change without a recalibration; any change
to the code cannot.
"""

from __future__ import annotations

import ast
import hashlib
import json
from dataclasses import asdict, dataclass, fields, replace
from pathlib import Path

from heteroreason.model.files import InputError, loads_json, read_text, write_text_atomic
from heteroreason.model.spec.numerics.qwen2_config import qwen2_config
from heteroreason.model.timing.fpga.core_cycles import OVERHEADS, CoreTiming, Overheads
from heteroreason.rtl.decoder.params import DecoderParams
from heteroreason.sim.measure.measured import Measured

__all__ = ["CALIBRATION_FILE", "RTL_DIR", "SPEC_DIR", "Calibration", "CalibrationError", "Point",
           "fit_overheads", "load_calibration", "rtl_hash", "rtl_sources", "save_calibration"]

CALIBRATION_FILE = Path(__file__).parent / "data" / "decoder_core.json"
PROJECT_DIR = Path(__file__).resolve().parents[3]
RTL_DIR = PROJECT_DIR / "rtl"
# the specification's modules the RTL imports (its tables and encodings) are part of what it
# does: ``heteroreason.model.spec.X`` lives in ``model/spec/X.py`` (or ``X/__init__.py``)
SPEC_PACKAGE = "heteroreason.model.spec"
SPEC_DIR = PROJECT_DIR / "model" / "spec"


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


def _spec_imports(source: str) -> set[str]:
    """The specification's modules that ``source`` imports (dotted, below ``model.spec``)."""
    found = set()
    for node in ast.walk(ast.parse(source)):
        names = [node.module] if isinstance(node, ast.ImportFrom) and node.module else \
            [a.name for a in node.names] if isinstance(node, ast.Import) else []
        for name in names:
            if name == SPEC_PACKAGE or name.startswith(SPEC_PACKAGE + "."):
                found.add(name[len(SPEC_PACKAGE):].lstrip("."))
    return found


def _spec_file(module: str, spec_dir: Path) -> Path | None:
    base = spec_dir.joinpath(*module.split(".")) if module else spec_dir
    for path in (base.with_suffix(".py"), base / "__init__.py"):
        if path.is_file():
            return path
    return None


def rtl_sources(rtl_dir: Path = RTL_DIR, spec_dir: Path = SPEC_DIR) -> dict[str, Path]:
    """Every source the RTL's behaviour follows, by the name it is hashed under: every Python
    file under ``rtl_dir`` (found by walking it, ``rtl/...``) and the specification's modules
    they import, directly or through each other (``model/spec/...``)."""
    rtl_dir, spec_dir = Path(rtl_dir), Path(spec_dir)
    sources = {f"rtl/{p.relative_to(rtl_dir).as_posix()}": p
               for p in sorted(rtl_dir.rglob("*.py"))}
    todo = list(sources.values())
    while todo:
        for module in sorted(_spec_imports(todo.pop().read_text(encoding="utf-8"))):
            path = _spec_file(module, spec_dir)
            name = path and f"model/spec/{path.relative_to(spec_dir).as_posix()}"
            if path is not None and name not in sources:
                sources[name] = path
                todo.append(path)
    return dict(sorted(sources.items()))


def rtl_hash(rtl_dir: Path = RTL_DIR, spec_dir: Path = SPEC_DIR) -> str:
    """SHA-256 over the code of every RTL source and the specification it imports
    (:func:`rtl_sources`)."""
    digest = hashlib.sha256()
    for name, path in rtl_sources(rtl_dir, spec_dir).items():
        digest.update(name.encode())
        digest.update(_code(path.read_text(encoding="utf-8")).encode())
    return digest.hexdigest()


@dataclass(frozen=True)
class Point(Measured):
    """One RTL measurement (:class:`~heteroreason.sim.measure.grid.Measured`: cycles of one
    decode token at ``position``), priced by the cycle model."""

    @classmethod
    def of(cls, measured: Measured) -> Point:
        """The point of a measurement."""
        return cls(**{f.name: getattr(measured, f.name) for f in fields(Measured)})

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
    """A calibration: the fitted overheads, the RTL they came from (its hash and revision),
    the points they were fitted on and the points held out."""

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
    write_text_atomic(path, json.dumps(calibration.to_json(), indent=1) + "\n")
    return path


def load_calibration(path: Path = CALIBRATION_FILE, *, check_rtl: bool = True) -> Calibration:
    """Read a calibration file; with ``check_rtl`` it must come from the installed RTL."""
    path = Path(path)
    if not path.exists():
        raise CalibrationError(f"{path}: no calibration file (run heteroreason calibrate)")
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
            "recalibrate with heteroreason calibrate")
    overheads = Overheads(**{f.name: float(got[f.name]) for f in fields(Overheads)})
    return Calibration(overheads, obj["rtl_hash"], obj["rtl_revision"],
                       tuple(Point.from_json(p, str(path)) for p in obj["train"]),
                       tuple(Point.from_json(p, str(path)) for p in obj["held_out"]))
