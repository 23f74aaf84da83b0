"""Synthesize a decoder design with its hierarchy kept (:mod:`.hierarchy`) and record what it
measured as fit evidence: a JSON file that carries the RTL's hash, read by
:mod:`heteroreason.model.timing.fpga.fit` (``heteroreason fit --synthesize --write-evidence``).

Amaranth's RTLIL goes straight to a native Yosys (Debian's ``yosys``; the WebAssembly build
takes hours on a full-width core), with the memories' all-zero initial contents left out (a
buffer written at run time needs none, and UltraRAM cannot hold any: with contents Yosys maps
the weight buffer to block RAM only) and the many-ported tables copied a pair of read ports
each (:mod:`.rom_ports`: Yosys's memory mapper runs out of memory on 32 ports).
"""

from __future__ import annotations

import gc
import hashlib
import json
import shutil
import time
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from pathlib import Path

from amaranth.back import rtlil

from heteroreason.model.files import write_text_atomic
from heteroreason.sim.flow.export import DecoderDesign, build_top, zero_memory_init_omitted
from heteroreason.sim.flow.hierarchy import (
    FIT_TIMEOUT_S,
    HierarchySynthesis,
    read_hierarchy,
    synthesize_hierarchy,
)
from heteroreason.sim.flow.rom_ports import split_rom_read_ports

__all__ = ["FIT_FORMAT", "FIT_METHOD", "FitRecord", "carried_evidence_json", "design_source",
           "evidence_json", "native_yosys", "reread_design", "source_sha256",
           "synthesize_design", "write_evidence"]

FIT_FORMAT = "heteroreason-fit/1"
FIT_METHOD = ("Amaranth RTLIL (zero initial contents left out; read-only tables of more than "
              "two read ports copied a pair of ports each, sim/flow/rom_ports.py) -> native "
              "Yosys synth_xilinx -family xcup -noiopad -uram, hierarchy kept, kept signals' "
              "drivers kept, without xilinx_dffopt (sim/flow/synth.py); units: the top's "
              "children, their cells summed; fanout flattened through the hierarchy "
              "(sim/flow/hierarchy.py)")


def native_yosys(path: str | None = None) -> str:
    """The native Yosys to run (``path``, else ``yosys`` on the PATH), or a clear error."""
    found = shutil.which(path or "yosys")
    if found is None:
        raise RuntimeError(f"no native Yosys at {path or 'yosys'!r}: install Debian's yosys "
                           "package (apt-get install yosys) or name one with --yosys")
    return found


@dataclass(frozen=True)
class FitRecord:
    """One synthesized design: what it is and what :func:`synthesize_hierarchy` measured."""

    name: str        # the board whose chosen design this is, or a named small case
    top: str
    design: DecoderDesign
    synthesis: HierarchySynthesis
    seconds: float
    source_sha256: str  # of the RTLIL Yosys read (:func:`design_source`)

    def to_json(self) -> dict:
        s = self.synthesis

        def res(r) -> dict:
            return {"lut": r.lut, "ff": r.ff, "dsp": r.dsp, "bram18k": r.bram18k,
                    "uram": r.uram, "carry": r.carry}

        return {
            "name": self.name, "top": self.top, "design": self.design.to_json(),
            "units": {u: res(r) for u, r in sorted(s.units.items())},
            "total": res(s.total),
            "links": sorted(({"units": sorted(k.units), "driver": k.driver,
                              "driver_registered": k.driver_registered,
                              "unregistered_loads": sorted(k.unregistered_loads), "bits": n}
                             for k, n in s.links.items()),
                            key=lambda x: (-x["bits"], x["units"], x["driver"],
                                           x["unregistered_loads"], x["driver_registered"])),
            "largest_nets": [asdict(n) for n in s.largest_nets],
            "registration": {u: asdict(r) for u, r in sorted(s.registration.items())},
            "yosys_s": round(self.seconds, 1),
            "source_sha256": self.source_sha256,
        }


RECORD = "synthesis.json"  # in the work folder: what was synthesized there, of which RTL


def design_source(design: DecoderDesign, *, top: str = "decoder_core",
                  extra: Mapping[str, int] | None = None) -> str:
    """The RTLIL that a fit of ``design`` gives Yosys: ``top`` built for it (``extra``: the
    engine's own parameters), its zero initial contents left out, its many-ported tables copied
    a pair of read ports each."""
    component = build_top(top, design.export_params() | dict(extra or {}))
    with zero_memory_init_omitted():
        text = split_rom_read_ports(rtlil.convert(component, name=top, emit_src=False))
    del component  # a full-size model's random weights (12 GB at 0.5B) go before Yosys runs
    gc.collect()
    return text


def source_sha256(text: str) -> str:
    """The digest a fit record keeps of its RTLIL: equal digests, the same netlist."""
    return hashlib.sha256(text.encode()).hexdigest()


def synthesize_design(name: str, design: DecoderDesign, work: Path, *, rtl_hash: str,
                      top: str = "decoder_core", yosys: str | None = None,
                      timeout_s: float = FIT_TIMEOUT_S,
                      extra: Mapping[str, int] | None = None) -> FitRecord:
    """Build ``top`` for ``design`` (``extra``: the engine's own parameters), write its RTLIL
    under ``work``, synthesize it, and leave beside the netlists a record of what they are
    (``rtl_hash``: the RTL's, for :func:`reread_design`)."""
    yosys = native_yosys(yosys)
    text = design_source(design, top=top, extra=extra)
    work = Path(work)
    work.mkdir(parents=True, exist_ok=True)
    source = work / f"{top}.il"
    source.write_text(text)
    start = time.monotonic()
    synthesis = synthesize_hierarchy(source, top, yosys=yosys, timeout_s=timeout_s)
    record = FitRecord(name, top, design, synthesis, time.monotonic() - start,
                       source_sha256(text))
    write_text_atomic(work / RECORD, json.dumps({
        "rtl_hash": rtl_hash, "name": name, "top": top, "design": design.to_json(),
        "yosys_s": record.seconds}, indent=1) + "\n")
    return record


def reread_design(work: Path, *, rtl_hash: str) -> FitRecord:
    """The :class:`FitRecord` of an earlier :func:`synthesize_design` in ``work``, read again
    from its netlists (a ValueError when there is none, or it is of other RTL)."""
    work = Path(work)
    try:
        obj = json.loads((work / RECORD).read_text())
        name, top, recorded = str(obj["name"]), str(obj["top"]), str(obj["rtl_hash"])
        design, seconds = DecoderDesign.from_json(obj["design"]), float(obj["yosys_s"])
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise ValueError(f"{work / RECORD}: no record of a synthesis ({exc})") from None
    if recorded != rtl_hash:
        raise ValueError(f"{work}: synthesized from RTL {recorded[:12]}, not this RTL "
                         f"({rtl_hash[:12]}): synthesize again")
    synthesis = read_hierarchy(work / f"{top}.stat.json", work / f"{top}.blif", top)
    return FitRecord(name, top, design, synthesis, seconds,
                     source_sha256((work / f"{top}.il").read_text()))


def evidence_json(records: list[FitRecord], *, rtl_hash: str, rtl_revision: str,
                  earlier: str | None = None) -> str:
    """The evidence file's text for ``records``. ``earlier``, the text of the file it replaces:
    its designs of the same RTL and format that ``records`` do not name are kept (a board's
    synthesis does not drop the small case's); designs of other RTL are not."""
    designs = [r.to_json() for r in records]
    names = {r.name for r in records}
    try:
        old = json.loads(earlier) if earlier else {}
    except ValueError:
        old = {}
    if isinstance(old, dict) and old.get("rtl_hash") == rtl_hash and \
            old.get("format") == FIT_FORMAT and isinstance(old.get("designs"), list):
        designs += [d for d in old["designs"]
                    if isinstance(d, dict) and d.get("name") not in names]
    designs.sort(key=lambda d: str(d.get("name")))
    return json.dumps({"format": FIT_FORMAT, "rtl_hash": rtl_hash, "rtl_revision": rtl_revision,
                       "method": FIT_METHOD, "designs": designs}, indent=1) + "\n"


def write_evidence(path: Path, text: str) -> None:
    write_text_atomic(Path(path), text)


def carried_evidence_json(earlier: str, digests: Mapping[str, str], *, rtl_hash: str,
                          rtl_revision: str) -> str:
    """The evidence ``earlier`` holds, for the designs named in ``digests`` (name -> the digest
    of the RTLIL that this RTL gives each, :func:`design_source`), under this RTL.

    A design whose RTLIL is the very text its netlists were synthesized from has the same
    netlists, so its figures stand: it is carried, keeping the RTL it was synthesized on
    (``synthesized_rtl_hash``); designs not named are left behind. Evidence of this same RTL
    whose designs keep no digest yet (synthesized before digests were kept) gets them, and
    keeps every design. A design whose RTLIL changed, or that keeps no digest on other RTL, is
    a ValueError: synthesize it again."""
    old = json.loads(earlier)
    if not isinstance(old, dict) or old.get("format") != FIT_FORMAT:
        raise ValueError(f"the evidence is not of format {FIT_FORMAT}")
    same = old["rtl_hash"] == rtl_hash
    entries = {d.get("name"): d for d in old["designs"] if isinstance(d, dict)}
    designs = {name: d for name, d in entries.items() if same and name not in digests}
    for name, digest in digests.items():
        entry = entries.get(name)
        if entry is None:
            raise ValueError(f"the evidence holds no design {name!r}")
        kept = entry.get("source_sha256")
        if kept is None and not same:
            raise ValueError(f"{name}: the evidence keeps no digest of its RTLIL (synthesized "
                             "before digests were kept) and is of other RTL: synthesize it "
                             "again")
        if kept is not None and kept != digest:
            raise ValueError(f"{name}: this RTL gives another RTLIL than the one synthesized "
                             f"on RTL {old['rtl_hash'][:12]} ({digest[:12]}, not "
                             f"{kept[:12]}): synthesize it again")
        carried = dict(entry, source_sha256=digest)
        if not same:
            carried.setdefault("synthesized_rtl_hash", old["rtl_hash"])
        designs[name] = carried
    return json.dumps({"format": FIT_FORMAT, "rtl_hash": rtl_hash,
                       "rtl_revision": old["rtl_revision"] if same else rtl_revision,
                       "method": old["method"],
                       "designs": [designs[n] for n in sorted(designs, key=str)]},
                      indent=1) + "\n"
