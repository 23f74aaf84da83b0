"""Does a synthesized design fit its board, SLR by SLR: every unit assigned to an SLR, each SLR's
use against its user region and the failfast guidelines, each boundary's crossing bits against
its SLLs (``data/slr.json``, each figure with its source).

The assignment is searched exhaustively (a decoder core has about ten units): the units that
meet the memory (the matrix-vector unit, its weight buffer, the top's ports) are pinned to the
SLR beside the HBM; of the assignments that keep every SLR within its guidelines, the one with
the fewest crossing bits not registered on both sides, then the fewest bits over its busiest
boundary, is taken; when none keeps within them, the one with the fewest unregistered bits,
then the smallest worst excess, and the report names each SLR, resource and both numbers over
the line.

What this does not prove: placement, routing or congestion inside an SLR, nor timing across
it; a unit is placed whole (an MVU larger than an SLR does not fit however its lanes could be
split); no open tool here places or routes an UltraScale+ device.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

from heteroreason.model.files import InputError, loads_json, read_text

__all__ = [
    "RESOURCES",
    "SLR_FILE",
    "BoardFloor",
    "Boundary",
    "Floorplan",
    "Guidelines",
    "Slr",
    "board_floor",
    "place",
]

SLR_FILE = Path(__file__).parent / "data" / "slr.json"
RESOURCES = ("lut", "ff", "dsp", "bram18k", "uram")
_LIMITED = ("lut", "dsp", "bram18k", "uram")  # the failfast guidelines' resources
PINNED = ("mvu", "wbuf", "ports")  # units beside the HBM


@dataclass(frozen=True)
class Guidelines:
    lut: float
    dsp: float
    bram18k: float
    uram: float
    sll: float
    fanout: int
    source: str


@dataclass(frozen=True)
class Slr:
    name: str
    lut: int
    ff: int
    dsp: int
    bram18k: int
    uram: int


@dataclass(frozen=True)
class Boundary:
    below: int  # the boundary between SLR ``below`` and ``below + 1``
    sll: int


@dataclass(frozen=True)
class BoardFloor:
    """A board's SLRs as the user gets them, and where its HBM is."""

    board: str
    device: str
    hbm_slr: int
    slrs: tuple[Slr, ...]
    boundaries: tuple[Boundary, ...]
    guidelines: Guidelines
    sources: tuple[str, ...]


def _board_key(board: str) -> str:
    return board.split("-")[0]  # u280-200 and u280-300 are one device


def board_floor(board: str, path: Path = SLR_FILE) -> BoardFloor | None:
    """The SLR data of ``board`` (None when the file has none for it)."""
    where = str(path)
    obj = loads_json(read_text(path), where)
    if not isinstance(obj, dict) or obj.get("format") != "heteroreason-slr/1":
        raise InputError(where, "field 'format' must be heteroreason-slr/1")
    try:
        g = obj["guidelines"]
        guidelines = Guidelines(**{k: g[k] for k in Guidelines.__dataclass_fields__})
        entry = obj["boards"].get(_board_key(board))
        if entry is None:
            return None
        slrs = tuple(Slr(**{k: s[k] for k in Slr.__dataclass_fields__}) for s in entry["slrs"])
        boundaries = tuple(Boundary(b["below"], b["sll"]) for b in entry["boundaries"])
        floor = BoardFloor(board, entry["device"], entry["hbm_slr"], slrs, boundaries,
                           guidelines, (entry["device_source"], entry["user_source"],
                                        entry["sll_source"], g["source"]))
    except (KeyError, TypeError, AttributeError) as exc:
        raise InputError(where, f"board {_board_key(board)!r}: a field is missing or "
                                f"mistyped ({exc})") from None
    if not 0 <= floor.hbm_slr < len(slrs) or len(boundaries) != len(slrs) - 1:
        raise InputError(where, f"board {_board_key(board)!r}: hbm_slr {floor.hbm_slr} and "
                                f"{len(boundaries)} boundaries do not fit {len(slrs)} SLRs")
    return floor


@dataclass(frozen=True)
class Floorplan:
    """An assignment of units to SLRs and what it costs."""

    floor: BoardFloor
    where: Mapping[str, int]
    use: tuple[Mapping[str, int], ...]           # per SLR, per resource
    crossing_bits: tuple[int, ...]                # per boundary
    over: tuple[str, ...]                         # what exceeds a guideline, in words

    @property
    def fits(self) -> bool:
        return not self.over

    def table(self) -> list[str]:
        g = self.floor.guidelines
        rows = [f"{'SLR':6s} " + " ".join(f"{r.upper():>24s}" for r in RESOURCES) + "  units"]
        for k, slr in enumerate(self.floor.slrs):
            units = ", ".join(sorted(u for u, s in self.where.items() if s == k)) or "-"
            cells = []
            for r in RESOURCES:
                used, cap = self.use[k][r], getattr(slr, r)
                limit = getattr(g, r, None)
                mark = "!" if limit is not None and used > limit * cap else " "
                cells.append(f"{f'{used:,}/{cap:,}':>18s} {used / cap:>4.0%}{mark}")
            rows.append(f"{slr.name:6s} " + " ".join(cells) + f"  {units}")
        for b, bits in zip(self.floor.boundaries, self.crossing_bits, strict=True):
            share = bits / b.sll
            rows.append(f"SLR{b.below}-SLR{b.below + 1}: {bits:,} bits cross, {share:.0%} of "
                        f"{b.sll:,} SLLs (guideline {g.sll:.0%})"
                        + (" !" if share > g.sll else ""))
        return rows


def _crossings(where: Mapping[str, int], links: Mapping[frozenset, int],
               boundaries: int) -> list[int]:
    bits = [0] * boundaries
    for units, n in links.items():
        slrs = [where[u] for u in units]
        for b in range(min(slrs), max(slrs)):
            bits[b] += n
    return bits


def _evaluate(floor: BoardFloor, where: Mapping[str, int],
              units: Mapping[str, Mapping[str, int]], links) -> tuple[Floorplan, float]:
    g = floor.guidelines
    use = [{r: 0 for r in RESOURCES} for _ in floor.slrs]
    for unit, k in where.items():
        for r in RESOURCES:
            use[k][r] += units.get(unit, {}).get(r, 0)
    crossing = _crossings(where, links, len(floor.boundaries))
    over, worst = [], 0.0
    for k, slr in enumerate(floor.slrs):
        for r in _LIMITED:
            cap = getattr(slr, r)
            limit = getattr(g, r) * cap
            ratio = use[k][r] / limit if limit else (float("inf") if use[k][r] else 0.0)
            worst = max(worst, ratio)
            if use[k][r] > limit:
                over.append(f"{slr.name} {r.upper()} {use[k][r]:,} > {limit:,.0f} "
                            f"({getattr(g, r):.0%} of {cap:,})")
    for b, bits in zip(floor.boundaries, crossing, strict=True):
        limit = g.sll * b.sll
        worst = max(worst, bits / limit)
        if bits > limit:
            over.append(f"SLR{b.below}-SLR{b.below + 1} {bits:,} crossing bits > {limit:,.0f} "
                        f"({g.sll:.0%} of {b.sll:,} SLLs)")
    return Floorplan(floor, dict(where), tuple(use), tuple(crossing), tuple(over)), worst


def place(floor: BoardFloor, units: Mapping[str, Mapping[str, int]],
          links: Mapping[frozenset, int],
          unregistered: Callable[[Mapping[str, int]], int] | None = None) -> Floorplan:
    """The best assignment of ``units`` (name -> resources; the names ``links`` uses, ports
    included) to ``floor``'s SLRs (see the module docstring). ``unregistered``: the bits an
    assignment (unit -> SLR) carries across a boundary without a flip-flop on both sides;
    of the assignments that fit, or failing that of all, those with the fewest come first."""
    names = sorted(set(units) | {u for group in links for u in group})
    free = [u for u in names if u not in PINNED]
    pinned = {u: floor.hbm_slr for u in names if u in PINNED}
    best = None
    for choice in itertools.product(range(len(floor.slrs)), repeat=len(free)):
        where = pinned | dict(zip(free, choice, strict=True))
        plan, worst = _evaluate(floor, where, units, links)
        bare = 0 if unregistered is None else unregistered(where)
        key = (not plan.fits, bare, worst if not plan.fits else 0.0,
               max(plan.crossing_bits, default=0), worst)
        if best is None or key < best[0]:
            best = (key, plan)
    return best[1]
