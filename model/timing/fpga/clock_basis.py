"""What backs a board's clock: the committed timing evidence of the decoder's units at the widths
of the design chosen for the U280 (``heteroreason timing --set u280 --write-evidence``),
read against the LUT budget of the board's clock.

The evidence file holds, per top, the logic levels of its UltraScale+ netlist
(:mod:`heteroreason.sim.flow.logic_depth`) and the hash of the RTL code it came from (the
calibration's :func:`~heteroreason.model.timing.fpga.calibration.rtl_hash`); a file from other
RTL is reported as stale, never used silently.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from heteroreason.model.files import InputError, loads_json, read_text
from heteroreason.model.timing.fpga.calibration import rtl_hash
from heteroreason.sim.flow.logic_depth import LUT_NS_ULTRASCALE_PLUS, lut_budget

__all__ = ["ECP5_EVIDENCE_FILE", "EVIDENCE_FILE", "EVIDENCE_FORMAT", "LUT_NS_ULTRASCALE_PLUS",
           "ClockBasis", "Ecp5Basis", "TopTiming", "clock_basis", "ecp5_basis", "load_evidence",
           "lut_budget"]

EVIDENCE_FILE = Path(__file__).parent / "data" / "timing_evidence.json"
# the tops at small widths placed and routed on the ECP5 (``heteroreason timing --set
# small --ecp5 --write-evidence``): what the RTL's structure reaches on a routed part
ECP5_EVIDENCE_FILE = Path(__file__).parent / "data" / "ecp5_evidence.json"
EVIDENCE_FORMAT = "heteroreason-timing/1"
@dataclass(frozen=True)
class TopTiming:
    """One top's measured logic depth (levels as :class:`~heteroreason.sim.flow.logic_depth.
    DepthReport` counts them)."""

    top: str
    params: dict
    levels: int
    unregistered_dsps: int
    start: str
    end: str
    # with ``--ecp5``: the clock nextpnr-ecp5 reached, the one it aimed for, the part
    ecp5_mhz: float | None = None
    ecp5_target_mhz: float | None = None
    ecp5_part: str | None = None


@dataclass(frozen=True)
class ClockBasis:
    """A board clock against the evidence: which units fit its budget and which do not."""

    clock_hz: float
    budget_levels: int
    within: tuple[TopTiming, ...]
    over: tuple[TopTiming, ...]
    rtl_hash: str
    stale: bool

    @property
    def backed(self) -> bool:
        return not self.over and not self.stale

    def summary(self) -> str:
        mhz = f"{self.clock_hz / 1e6:g} MHz"
        if self.stale:
            return (f"{mhz}: assumed (the timing evidence is from other RTL, "
                    f"{self.rtl_hash[:12]}; rerun heteroreason timing --set u280 "
                    "--write-evidence)")
        names = ", ".join(f"{t.top} {t.levels}" for t in self.within)
        text = f"{mhz}: within the {self.budget_levels}-level budget: {names or 'none'}"
        if self.over:
            text += "; over it: " + ", ".join(
                f"{t.top} {t.levels}" + (f" ({t.unregistered_dsps} unregistered DSPs)"
                                         if t.unregistered_dsps else "")
                for t in self.over)
            text += " -> the clock is not yet backed"
        else:
            text += " -> backed by the units' logic depth (not a routed design)"
        return text


def load_evidence(path: Path = EVIDENCE_FILE) -> tuple[str, tuple[TopTiming, ...]]:
    """``(rtl hash, tops)`` of an evidence file; a clear error naming the file and field."""
    path = Path(path)
    if not path.exists():
        raise InputError(str(path), "no timing evidence (run heteroreason timing --set "
                         "u280 --write-evidence)")
    obj = loads_json(read_text(path), str(path))
    if not isinstance(obj, dict):
        raise InputError(str(path), f"must hold a JSON object, not {type(obj).__name__}")
    for key in ("format", "rtl_hash", "tops"):
        if key not in obj:
            raise InputError(str(path), f"field {key!r} is missing")
    if obj["format"] != EVIDENCE_FORMAT:
        raise InputError(str(path), f"field 'format' must be {EVIDENCE_FORMAT}, "
                                    f"not {obj['format']!r}")
    tops = []
    for k, entry in enumerate(obj["tops"]):
        try:
            fields = {f: entry[f] for f in TopTiming.__dataclass_fields__
                      if not f.startswith("ecp5_") or f in entry}
            tops.append(TopTiming(**fields))
        except (KeyError, TypeError) as exc:
            raise InputError(str(path), f"tops[{k}] lacks or mistypes a field ({exc})") from None
    return obj["rtl_hash"], tuple(tops)


def clock_basis(clock_hz: float, path: Path = EVIDENCE_FILE) -> ClockBasis:
    """The evidence for ``clock_hz``: each unit against its budget."""
    recorded, tops = load_evidence(path)
    budget = lut_budget(clock_hz)
    within = tuple(t for t in tops if t.levels <= budget and not t.unregistered_dsps)
    over = tuple(t for t in tops if t not in within)
    return ClockBasis(clock_hz, budget, within, over, recorded, recorded != rtl_hash())


@dataclass(frozen=True)
class Ecp5Basis:
    """The tops placed and routed on the ECP5 against the clock they aimed for."""

    tops: tuple[TopTiming, ...]
    rtl_hash: str
    stale: bool

    @property
    def below(self) -> tuple[TopTiming, ...]:
        return tuple(t for t in self.tops if t.ecp5_mhz < t.ecp5_target_mhz)

    def summary(self) -> str:
        if self.stale:
            return (f"ECP5: no evidence of this RTL (the file is from {self.rtl_hash[:12]}; "
                    "rerun heteroreason timing --set small --ecp5 --write-evidence)")
        part = self.tops[0].ecp5_part
        target = min(t.ecp5_target_mhz for t in self.tops)
        lowest = min(self.tops, key=lambda t: t.ecp5_mhz)
        text = (f"ECP5 {part} after nextpnr, {len(self.tops)} tops at small widths: "
                f"lowest {lowest.top} {lowest.ecp5_mhz:.1f} MHz")
        if self.below:
            return text + "; below the target: " + ", ".join(
                f"{t.top} {t.ecp5_mhz:.1f} < {t.ecp5_target_mhz:g}" for t in self.below)
        return text + f" (every top >= {target:g} MHz)"


def ecp5_basis(path: Path = ECP5_EVIDENCE_FILE) -> Ecp5Basis:
    """The ECP5 evidence (every entry must carry its place-and-route figures)."""
    if not Path(path).exists():
        raise InputError(str(path), "no ECP5 evidence (run heteroreason timing --set "
                         "small --ecp5 --write-evidence)")
    recorded, tops = load_evidence(path)
    for k, t in enumerate(tops):
        if t.ecp5_mhz is None or t.ecp5_target_mhz is None or t.ecp5_part is None:
            raise InputError(str(path), f"tops[{k}] ({t.top}) has no ECP5 figures "
                                        "(ecp5_mhz, ecp5_target_mhz, ecp5_part)")
    if not tops:
        raise InputError(str(path), "field 'tops' is empty")
    return Ecp5Basis(tops, recorded, recorded != rtl_hash())
