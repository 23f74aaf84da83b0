"""The boards' designs against their boards, from synthesis: the committed fit evidence
(``data/fit_evidence.json``, written by ``heteroreason fit --synthesize --write-evidence``)
read into per-unit resources, the floorplan per SLR (:mod:`.floorplan`), the largest nets
against the fanout bound, the crossings' registers, and the analytic estimate's error.

A file from other RTL is reported as stale, never used silently, as the timing evidence is.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from heteroreason.model.files import InputError, loads_json, read_text
from heteroreason.model.timing.fpga.calibration import rtl_hash
from heteroreason.model.timing.fpga.floorplan import (
    RESOURCES,
    SLR_FILE,
    Floorplan,
    board_floor,
    place,
)
from heteroreason.sim.flow.export import DecoderDesign
from heteroreason.sim.flow.fit import FIT_FORMAT
from heteroreason.sim.flow.hierarchy import Link

__all__ = ["FIT_FILE", "DesignFit", "FitEvidence", "load_fit_evidence", "parse_fit_evidence"]

FIT_FILE = Path(__file__).parent / "data" / "fit_evidence.json"


@dataclass(frozen=True)
class DesignFit:
    """One synthesized design as the evidence holds it."""

    name: str
    top: str
    design: DecoderDesign
    units: Mapping[str, Mapping[str, int]]
    total: Mapping[str, int]
    links: Mapping[Link, int]
    largest_nets: tuple[Mapping, ...]
    registration: Mapping[str, Mapping[str, int]]
    yosys_s: float
    # the digest of the RTLIL Yosys read (None: synthesized before digests were kept), and the
    # RTL it was synthesized on where the evidence carried it to later RTL that gives the same
    # RTLIL (None: synthesized on the evidence's own RTL)
    source_sha256: str | None = None
    synthesized_rtl_hash: str | None = None

    @property
    def unit_links(self) -> dict[frozenset, int]:
        """The bits between each set of units."""
        bits: dict[frozenset, int] = {}
        for link, n in self.links.items():
            bits[link.units] = bits.get(link.units, 0) + n
        return bits

    def floorplan(self, board: str, path: Path = SLR_FILE) -> Floorplan | None:
        """The best assignment of this design's units to ``board``'s SLRs (None when the SLR
        data has no entry for the board)."""
        floor = board_floor(board, path)
        return None if floor is None else place(
            floor, self.units, self.unit_links,
            lambda where: sum(self._unregistered(where).values()))

    def unregistered_crossing_bits(self, plan: Floorplan) -> dict[str, int]:
        """Per driving unit, the bits that cross an SLR boundary without a flip-flop on both
        sides (the driver's Q, every load across the boundary a D input)."""
        return self._unregistered(plan.where)

    def _unregistered(self, where: Mapping[str, int]) -> dict[str, int]:
        out: dict[str, int] = {}
        for link, n in self.links.items():
            home = where[link.driver]
            away = {u for u in link.units if where[u] != home}
            if away and (not link.driver_registered or away & link.unregistered_loads):
                out[link.driver] = out.get(link.driver, 0) + n
        return out

    def over_fanout(self, bound: int) -> tuple[Mapping, ...]:
        return tuple(n for n in self.largest_nets if n["loads"] > bound)

    def estimate_error(self, estimate) -> dict[str, float | None]:
        """``(estimate - synthesized) / synthesized`` per resource (None where both are 0)."""
        errors = {}
        for r in RESOURCES:
            synth, est = self.total[r], getattr(estimate, r)
            errors[r] = None if synth == 0 and est == 0 else \
                (float("inf") if synth == 0 else (est - synth) / synth)
        return errors


@dataclass(frozen=True)
class FitEvidence:
    rtl_hash: str
    rtl_revision: str
    method: str
    designs: tuple[DesignFit, ...]

    @property
    def stale(self) -> bool:
        return self.rtl_hash != rtl_hash()

    def design(self, name: str) -> DesignFit | None:
        return next((d for d in self.designs if d.name == name), None)


def _design(entry: Mapping) -> DesignFit:
    return DesignFit(
        name=str(entry["name"]), top=str(entry["top"]),
        design=DecoderDesign.from_json(entry["design"]),
        units={u: {r: int(v[r]) for r in RESOURCES} for u, v in entry["units"].items()},
        total={r: int(entry["total"][r]) for r in RESOURCES},
        links={Link(frozenset(link["units"]), str(link["driver"]),
                    bool(link["driver_registered"]), frozenset(link["unregistered_loads"])):
               int(link["bits"]) for link in entry["links"]},
        largest_nets=tuple(dict(n) for n in entry["largest_nets"]),
        registration={u: dict(r) for u, r in entry["registration"].items()},
        yosys_s=float(entry["yosys_s"]),
        source_sha256=None if entry.get("source_sha256") is None else str(entry["source_sha256"]),
        synthesized_rtl_hash=None if entry.get("synthesized_rtl_hash") is None
        else str(entry["synthesized_rtl_hash"]))


def load_fit_evidence(path: Path = FIT_FILE) -> FitEvidence:
    """The fit evidence, with a clear error naming the file and field."""
    path = Path(path)
    if not path.exists():
        raise InputError(str(path), "no fit evidence (run heteroreason fit --synthesize "
                         "--write-evidence)")
    return parse_fit_evidence(read_text(path), str(path))


def parse_fit_evidence(text: str, where: str) -> FitEvidence:
    """The fit evidence in ``text`` (``where``: its file, for the errors)."""
    obj = loads_json(text, where)
    if not isinstance(obj, dict):
        raise InputError(where, f"must hold a JSON object, not {type(obj).__name__}")
    for key in ("format", "rtl_hash", "rtl_revision", "method", "designs"):
        if key not in obj:
            raise InputError(where, f"field {key!r} is missing")
    if obj["format"] != FIT_FORMAT:
        raise InputError(where, f"field 'format' must be {FIT_FORMAT}, not {obj['format']!r}")
    if not isinstance(obj["designs"], list):
        raise InputError(where, "field 'designs' must be a list")
    designs = []
    for k, entry in enumerate(obj["designs"]):
        try:
            designs.append(_design(entry))
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            raise InputError(where, f"designs[{k}] lacks or mistypes a field "
                                    f"({exc!r})") from None
    return FitEvidence(obj["rtl_hash"], obj["rtl_revision"], obj["method"], tuple(designs))
