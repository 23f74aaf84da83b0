"""Verilog export of the project's top-level components, with their parameters checked."""

from __future__ import annotations

import inspect
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

from amaranth.back import verilog
from amaranth.hdl import Shape
from amaranth.lib import wiring

from heteroreason.rtl.draft_engine import DraftEngine
from heteroreason.rtl.input_mux import InputMux
from heteroreason.rtl.kv_frontend import KvFrontEnd
from heteroreason.rtl.kvmu import Kvmu
from heteroreason.rtl.mvu import MatVecUnit

__all__ = [
    "TOPS",
    "ExportError",
    "Port",
    "TopSpec",
    "build_top",
    "export_verilog",
    "parse_params",
    "ports_of",
    "verilog_text",
    "write_verilog",
]


class ExportError(ValueError):
    """An unknown top or a bad parameter; the message names which and what is allowed."""


@dataclass(frozen=True)
class TopSpec:
    """A component that can be exported: its constructor and default parameters (ints)."""

    factory: Callable[..., wiring.Component]
    defaults: Mapping[str, int]
    summary: str


TOPS: dict[str, TopSpec] = {
    "kvmu": TopSpec(Kvmu, {"capacity": 64}, "KV-cache management unit"),
    "input_mux": TopSpec(InputMux, {"token_width": 16, "max_in_flight": 4},
                         "decoder input MUX"),
    "kv_frontend": TopSpec(KvFrontEnd, {"capacity": 64, "token_width": 16, "max_in_flight": 4},
                           "KVMU and input MUX wired together"),
    "mvu": TopSpec(MatVecUnit, {"lanes": 8, "max_beats": 8, "max_rows": 64},
                   "matrix-vector unit of the decoder"),
    "draft_engine": TopSpec(
        lambda *, lanes, capacity, seed: _draft_engine(lanes=lanes, capacity=capacity,
                                                       seed=seed),
        {"lanes": 8, "capacity": 64, "seed": 1},
        "DraftEngine for the test-tiny preset (random seeded W8A8 weights)"),
}


def _draft_engine(*, lanes: int, capacity: int, seed: int) -> DraftEngine:
    from heteroreason.model.qwen2_config import qwen2_config
    from heteroreason.model.qwen2_float import random_weights
    from heteroreason.model.qwen2_int8 import calibrate, quantize

    if seed < 0:
        raise ValueError(f"seed must be a non-negative integer, not {seed}")
    weights = random_weights(qwen2_config("test-tiny"), seed=seed)
    model = quantize(weights, calibrate(weights, seed=seed + 1, sequences=1, length=32))
    return DraftEngine(model=model, lanes=lanes, capacity=capacity, delimiters=(16,), eos=1)


@dataclass(frozen=True)
class Port:
    name: str
    direction: str
    width: int


def _spec(top: str) -> TopSpec:
    if top not in TOPS:
        raise ExportError(f"unknown top {top!r}; choose one of {', '.join(sorted(TOPS))}")
    return TOPS[top]


def parse_params(top: str, assignments: Iterable[str]) -> dict[str, int]:
    """Turn ``NAME=VALUE`` strings into the top's full parameter set (defaults filled in)."""
    spec = _spec(top)
    params = dict(spec.defaults)
    for text in assignments:
        name, sep, value = text.partition("=")
        name = name.strip()
        if not sep or not name:
            raise ExportError(f"parameter {text!r} must be written NAME=VALUE")
        if name not in spec.defaults:
            raise ExportError(
                f"unknown parameter {name!r} for top {top!r}; its parameters are "
                f"{', '.join(sorted(spec.defaults))}")
        try:
            params[name] = int(value.strip(), 0)
        except ValueError:
            raise ExportError(
                f"parameter {name!r} of top {top!r} must be an integer, not {value.strip()!r}"
            ) from None
    return params


def build_top(top: str, params: Mapping[str, int] | None = None) -> wiring.Component:
    """Construct the top with ``params``; a constructor's complaint becomes an ExportError."""
    spec = _spec(top)
    params = dict(spec.defaults) | dict(params or {})
    unknown = set(params) - set(inspect.signature(spec.factory).parameters)
    if unknown:
        raise ExportError(f"unknown parameter(s) {', '.join(sorted(unknown))} for top {top!r}")
    try:
        return spec.factory(**params)
    except (TypeError, ValueError) as exc:
        raise ExportError(f"top {top!r}: {exc}") from None


def verilog_text(top: str, params: Mapping[str, int] | None = None) -> str:
    """Verilog of the top; the module is named after the top, with no source paths inside."""
    return verilog.convert(build_top(top, params), name=top, emit_src=False)


def export_verilog(top: str, out_dir: Path, params: Mapping[str, int] | None = None) -> Path:
    """Write ``out_dir/<top>.v`` (left untouched when already identical) and return its path."""
    return write_verilog(build_top(top, params), top, out_dir)


def write_verilog(component: wiring.Component, name: str, out_dir: Path) -> Path:
    """Write ``component`` as module ``name`` to ``out_dir/<name>.v`` (kept if identical)."""
    text = verilog.convert(component, name=name, emit_src=False)
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / f"{name}.v"
    if not path.exists() or path.read_text() != text:
        path.write_text(text)
    return path


def ports_of(component: wiring.Component) -> list[Port]:
    """The flattened ports of a component as they appear in its Verilog (plus clk and rst)."""
    ports = [Port("clk", "input", 1), Port("rst", "input", 1)]
    for path, member, _value in component.signature.flatten(component):
        name = "__".join(str(part) for part in path)
        direction = "output" if member.flow == wiring.Out else "input"
        ports.append(Port(name, direction, Shape.cast(member.shape).width))
    return ports
