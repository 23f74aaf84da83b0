"""Verilog export of the project's top-level components, with their parameters checked."""

from __future__ import annotations

import contextlib
import gc
import threading
import warnings
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, fields
from pathlib import Path

import amaranth
from amaranth.back import rtlil, verilog
from amaranth.hdl import Shape, UnusedElaboratable
from amaranth.lib import wiring

from heteroreason.model import checks
from heteroreason.model.files import write_text_atomic
from heteroreason.rtl.decoder.attention import Attention
from heteroreason.rtl.decoder.core import DecoderCore
from heteroreason.rtl.decoder.mvu import MatVecUnit
from heteroreason.rtl.decoder.params import DecoderParams
from heteroreason.rtl.decoder.rmsnorm import RmsNorm
from heteroreason.rtl.decoder.rope import Rope
from heteroreason.rtl.decoder.sampler import ArgmaxSampler
from heteroreason.rtl.decoder.swiglu import SwiGlu
from heteroreason.rtl.draft_engine import DraftEngine
from heteroreason.rtl.input_mux import InputMux
from heteroreason.rtl.kv_frontend import KvFrontEnd
from heteroreason.rtl.kvmu import Kvmu
from heteroreason.rtl.limits import MULTIPLE_LIMIT, SIZE_LIMIT, TOKEN_BITS_LIMIT, WIDTH_LIMIT
from heteroreason.rtl.multi_engine import MultiDraftEngine
from heteroreason.rtl.multi_kvmu import MultiKvmu
from heteroreason.rtl.reset_tree import ResetTree

__all__ = [
    "DECODER_OPTIONS",
    "DECODER_TOPS",
    "TOPS",
    "DecoderDesign",
    "ExportError",
    "Port",
    "TopSpec",
    "build_top",
    "decoder_params",
    "export_verilog",
    "parse_params",
    "ports_of",
    "seeded_model",
    "verilog_text",
    "write_verilog",
    "zero_memory_init_omitted",
]

# the Amaranth backend patched by ``_zero_memory_init_omitted``: one export at a time
_EMITTER_LOCK = threading.Lock()


class ExportError(ValueError):
    """An unknown top or a bad parameter; the message names which and what is allowed."""


@dataclass(frozen=True)
class TopSpec:
    """A component that can be exported: its constructor and default parameters (ints, or
    strings where the default is one)."""

    factory: Callable[..., wiring.Component]
    defaults: Mapping[str, int | str]
    summary: str


def _decoder_defaults() -> dict[str, int | str]:
    """The decoder tops' export parameters: the model (``preset``, ``seed`` of its random
    weights), every :class:`DecoderParams` field with its default (``lanes`` and
    ``stream_bytes`` 8; ``external_kv`` as 0/1), and the sampler's marks as integers
    (``delimiter``, ``delimiter2`` -1 for none, ``eos``)."""
    defaults: dict[str, int | str] = {"preset": "test-tiny", "seed": 1, "lanes": 8,
                                      "stream_bytes": 8}
    for f in fields(DecoderParams):
        if f.name not in defaults and f.name not in ("delimiters", "eos"):
            defaults[f.name] = int(f.default)
    return defaults | {"delimiter": 16, "delimiter2": -1, "eos": 1}


_DECODER_DEFAULTS = _decoder_defaults()


def _decoder_options() -> dict[str, str]:
    """The decoder tops' command-line options (the one table the programs that export or
    measure a decoder top share): ``--name`` for every export parameter, i.e. every
    :class:`DecoderParams` field and the model's (``preset``, ``seed``, the sampler's marks),
    the engine's ``--capacity``, and ``--macs-per-cycle`` for ``lanes``."""
    options = {f"--{name.replace('_', '-')}": name for name in _DECODER_DEFAULTS}
    return options | {"--capacity": "capacity", "--macs-per-cycle": "lanes"}


DECODER_OPTIONS = _decoder_options()


TOPS: dict[str, TopSpec] = {
    "kvmu": TopSpec(Kvmu, {"capacity": 64}, "KV-cache management unit"),
    "multi_kvmu": TopSpec(MultiKvmu, {"contexts": 4, "capacity": 64},
                          "KV-cache management unit of several problems (contexts)"),
    "input_mux": TopSpec(InputMux, {"token_width": 16, "max_in_flight": 4},
                         "decoder input MUX"),
    "kv_frontend": TopSpec(KvFrontEnd, {"capacity": 64, "token_width": 16, "max_in_flight": 4},
                           "KVMU and input MUX wired together"),
    "mvu": TopSpec(MatVecUnit, {"lanes": 8, "max_beats": 8, "max_rows": 64, "rows_per_beat": 1,
                                "vectors": 1},
                   "matrix-vector unit of the decoder"),
    "rmsnorm": TopSpec(RmsNorm, {"max_length": 64, "width": 1, "gains": 1},
                       "RMSNorm unit of the decoder"),
    "rope": TopSpec(
        lambda *, preset, seed, max_position, width: Rope(
            head_dim=seeded_model(preset, seed).config.head_dim,
            increments=seeded_model(preset, seed).rope_inc, max_position=max_position,
            width=width),
        {"preset": "test-tiny", "seed": 1, "max_position": 32767, "width": 1},
        "RoPE unit of the decoder (a preset's head size and frequencies)"),
    "attention": TopSpec(Attention, {"head_dim": 16, "kv_heads": 2, "layers": 2,
                                     "max_context": 48, "heads": 1, "width": 1,
                                     "external_kv": 0, "kv_rows": 1},
                         "attention unit of the decoder (KV cache on chip, or in memory "
                         "with external_kv=1)"),
    "swiglu": TopSpec(SwiGlu, {"width": 1}, "SwiGLU unit of the decoder"),
    "sampler": TopSpec(
        lambda *, vocab, delimiter, eos, width: ArgmaxSampler(
            vocab=vocab, delimiters=(delimiter,), eos=eos, width=width),
        {"vocab": 64, "delimiter": 5, "eos": 2, "width": 1},
        "argmax sampler with step-end/EOS marks"),
    "draft_engine": TopSpec(
        lambda *, capacity, **options: _decoder(
            DraftEngine if options["contexts"] == 1 else MultiDraftEngine,
            extra={"capacity": capacity}, **options),
        {"capacity": 64} | _DECODER_DEFAULTS,
        "DraftEngine: host interface, KVMU, input MUX and decoder for a preset's model "
        "(random seeded W8A8 weights); with contexts=N > 1 the MultiDraftEngine (N problems, "
        "ingest_batch of them a pass)"),
    "decoder_core": TopSpec(
        lambda **options: _decoder(DecoderCore, **options), dict(_DECODER_DEFAULTS),
        "the decoder core alone (one token at a given position through the model)"),
}


def seeded_model(preset: str, seed: int):
    """The quantized model of ``preset`` with random weights from ``seed`` (calibrated on random
    tokens from ``seed + 1``): what the RTL tops are built for and the testbenches check
    against."""
    from heteroreason.model.spec.numerics.qwen2_config import PRESETS, qwen2_config
    from heteroreason.model.spec.numerics.qwen2_float import random_weights
    from heteroreason.model.spec.numerics.qwen2_int8 import activation_scales, quantize

    if preset not in PRESETS:
        raise ValueError(f"unknown preset {preset!r}; choose one of {', '.join(PRESETS)}")
    checks.integer("seed", seed, low=0)
    weights = random_weights(qwen2_config(preset), seed=seed)
    return quantize(weights, activation_scales(weights, seed=seed + 1, sequences=1, length=32))


def decoder_params(*, delimiter: int, delimiter2: int, eos: int, external_kv: int,
                   **options) -> DecoderParams:
    """The :class:`DecoderParams` of a decoder top's export parameters (without ``preset``
    and ``seed``); ``delimiter2`` names a second step delimiter, -1 none."""
    delimiters = (delimiter,) if delimiter2 == -1 else (delimiter, delimiter2)
    if external_kv not in (0, 1):
        raise ValueError(f"external_kv must be 0 or 1, not {external_kv!r}")
    return DecoderParams(delimiters=delimiters, eos=eos, external_kv=bool(external_kv),
                         **options)


DECODER_TOPS = ("decoder_core", "draft_engine")


@dataclass(frozen=True)
class DecoderDesign:
    """A decoder top's build: the model ``preset``, the ``seed`` of its random weights and the
    :class:`DecoderParams` the core is built with. The one form a design crosses the flow,
    the measurement and the testbenches in: its export parameters (:meth:`export_params`,
    the build's key) and its JSON (:meth:`to_json`, :class:`DecoderParams`' own) are made
    from it and read back into it."""

    preset: str
    params: DecoderParams
    seed: int = 1

    def export_params(self) -> dict[str, int | str]:
        """The decoder tops' export parameters of this design (every build parameter, so that
        each design has its own build); the sampler's marks keep the export's defaults unless
        ``params`` names them."""
        top: dict[str, int | str] = {"preset": self.preset, "seed": self.seed}
        for f in fields(self.params):
            if f.name not in ("delimiters", "eos"):
                top[f.name] = int(getattr(self.params, f.name))
        if self.params.delimiters:
            top["delimiter"] = self.params.delimiters[0]
            top["delimiter2"] = self.params.delimiters[1] \
                if len(self.params.delimiters) > 1 else -1
            top["eos"] = self.params.eos
        return top

    @classmethod
    def from_export_params(cls, options: Mapping[str, int | str]) -> DecoderDesign:
        """The design a decoder top's full export parameters build (the engine's
        ``capacity`` is the engine's, not the core's)."""
        options = dict(options)
        preset, seed = str(options.pop("preset")), int(options.pop("seed"))
        options.pop("capacity", None)
        return cls(preset, decoder_params(**options), seed)

    def to_json(self) -> dict:
        return {"preset": self.preset, "seed": self.seed, "params": self.params.to_json()}

    @classmethod
    def from_json(cls, obj: Mapping) -> DecoderDesign:
        return cls(str(obj["preset"]), DecoderParams.from_json(obj["params"]), int(obj["seed"]))

    def model(self):
        """The quantized model the design is built for (:func:`seeded_model`)."""
        return seeded_model(self.preset, self.seed)


def _decoder(component, *, preset: str, seed: int, extra=None, **options):
    """A decoder top for ``preset``'s model with random weights from ``seed``; ``extra`` are
    the component's own keywords (the engine's ``capacity``)."""
    params = decoder_params(**options)  # checked before the (slow) model is built
    return component(model=seeded_model(preset, seed), params=params, **(extra or {}))


@dataclass(frozen=True)
class Port:
    name: str
    direction: str
    width: int


def _spec(top: str) -> TopSpec:
    if top not in TOPS:
        raise ExportError(f"unknown top {top!r}; choose one of {', '.join(sorted(TOPS))}")
    return TOPS[top]


def parse_params(top: str, assignments: Iterable[str]) -> dict[str, int | str]:
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
        if isinstance(spec.defaults[name], str):
            params[name] = value.strip()
            continue
        try:
            params[name] = int(value.strip(), 0)
        except ValueError:
            raise ExportError(
                f"parameter {name!r} of top {top!r} must be an integer, not {value.strip()!r}"
            ) from None
    return params


# upper bounds (heteroreason.rtl.limits says why each), checked before elaboration, which would
# run for minutes or hit Amaranth's own limits far beyond them (seeds are not sizes)
WIDTH_PARAMS = ("lanes", "stream_bytes", "vector_width", "width", "heads", "heads_parallel",
                "gains", "param_width")
MULTIPLE_PARAMS = ("rows_per_beat", "vectors", "ingest_batch")


def check_limits(top: str, params: Mapping[str, int | str]) -> None:
    """Raise ExportError for an integer parameter beyond its bound."""
    for name, value in params.items():
        if isinstance(value, str) or name == "seed":
            continue
        limit = WIDTH_LIMIT if name in WIDTH_PARAMS else \
            MULTIPLE_LIMIT if name in MULTIPLE_PARAMS else \
            TOKEN_BITS_LIMIT if name == "token_width" else SIZE_LIMIT
        if value > limit:
            raise ExportError(f"parameter {name!r} of top {top!r} must be at most {limit:,}, "
                              f"not {value:,}")


def build_top(top: str, params: Mapping[str, int | str] | None = None) -> wiring.Component:
    """Construct the top with ``params``; a constructor's complaint becomes an ExportError.
    A decoder top (:data:`DECODER_TOPS`) comes in a :class:`ResetTree`."""
    spec = _spec(top)
    params = dict(spec.defaults) | dict(params or {})
    unknown = set(params) - set(spec.defaults)
    if unknown:
        raise ExportError(f"unknown parameter(s) {', '.join(sorted(unknown))} for top {top!r}")
    check_limits(top, params)
    # a constructor that refuses its parameters may leave components half built (a front end's
    # KVMU before its MUX refused); they are collected here, without Amaranth's warning that
    # they were never elaborated, rather than warn in whatever code runs when the collector does
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UnusedElaboratable)
        try:
            component = spec.factory(**params)
            # a decoder top's reset reaches thousands of registers: through a tree of copies
            return ResetTree(component) if top in DECODER_TOPS else component
        except (TypeError, ValueError) as exc:
            message = f"top {top!r}: {exc}"
        gc.collect()
    raise ExportError(message)


def verilog_text(top: str, params: Mapping[str, int | str] | None = None) -> str:
    """Verilog of the top; the module is named after the top, with no source paths inside."""
    return verilog.convert(build_top(top, params), name=top, emit_src=False)


def export_verilog(top: str, out_dir: Path,
                   params: Mapping[str, int | str] | None = None, *,
                   omit_zero_memory_init: bool = False) -> Path:
    """Write ``out_dir/<top>.v`` (left untouched when already identical) and return its path
    (``omit_zero_memory_init``: see :func:`write_verilog`)."""
    return write_verilog(build_top(top, params), top, out_dir,
                         omit_zero_memory_init=omit_zero_memory_init)


@contextlib.contextmanager
def _zero_memory_init_omitted() -> Iterator[None]:
    """Amaranth writes every memory's initial contents, all zeros included, as one constant of
    depth x width bits: 58.7 Mbit for the U280 design's weight buffer, about 70 s of Python and
    minutes of Yosys for contents no simulator needs (Verilator zeroes what is not
    initialized). Inside this context a memory whose contents are all zeros gets none."""
    emitter = getattr(rtlil, "ModuleEmitter", None)
    original = getattr(emitter, "emit_memory", None)
    if original is None:
        raise ExportError(f"this Amaranth ({amaranth.__version__}) has no "
                          "amaranth.back.rtlil.ModuleEmitter.emit_memory to leave zero "
                          "contents out of; export without omit_zero_memory_init")

    def emit_memory(self, cell_idx, cell):
        if any(cell.init):
            original(self, cell_idx, cell)

    with _EMITTER_LOCK:
        emitter.emit_memory = emit_memory
        try:
            yield
        finally:
            emitter.emit_memory = original


zero_memory_init_omitted = _zero_memory_init_omitted


def write_verilog(component: wiring.Component, name: str, out_dir: Path, *,
                  omit_zero_memory_init: bool = False) -> Path:
    """Write ``component`` as module ``name`` to ``out_dir/<name>.v`` (kept if identical).

    With ``omit_zero_memory_init`` a memory whose initial contents are all zeros is written
    without them (for Verilator, which zeroes uninitialized state; not for Icarus, which starts
    it at x, nor for synthesis)."""
    with _zero_memory_init_omitted() if omit_zero_memory_init else contextlib.nullcontext():
        text = verilog.convert(component, name=name, emit_src=False)
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / f"{name}.v"
    if not path.exists() or path.read_text() != text:
        write_text_atomic(path, text)  # whole or absent: a simulator never reads half of it
    return path


def ports_of(component: wiring.Component) -> list[Port]:
    """The flattened ports of a component as they appear in its Verilog (plus clk and rst)."""
    ports = [Port("clk", "input", 1), Port("rst", "input", 1)]
    for path, member, _value in component.signature.flatten(component):
        if path in (("clk",), ("rst",)):  # a :class:`ResetTree`'s, listed above
            continue
        name = "__".join(str(part) for part in path)
        direction = "output" if member.flow == wiring.Out else "input"
        ports.append(Port(name, direction, Shape.cast(member.shape).width))
    return ports
