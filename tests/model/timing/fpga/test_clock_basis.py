"""What backs a board's clock: the evidence file read against the clock's LUT budget, stale
evidence reported, bad files named."""

import json

import pytest

from heteroreason.model.files import InputError
from heteroreason.model.timing.fpga.calibration import rtl_hash
from heteroreason.model.timing.fpga.clock_basis import (
    EVIDENCE_FILE,
    EVIDENCE_FORMAT,
    clock_basis,
    ecp5_basis,
    load_evidence,
    lut_budget,
)


def write(path, tops, *, rtl=None, fmt=EVIDENCE_FORMAT):
    path.write_text(json.dumps({"format": fmt, "rtl_hash": rtl or rtl_hash(), "tops": tops}))
    return path


def top(name, levels, unregistered=0):
    return {"top": name, "params": {}, "levels": levels, "unregistered_dsps": unregistered,
            "start": "a (FDRE)", "end": "b (FDRE)"}


def test_units_are_sorted_by_the_budget_of_each_clock(tmp_path):
    path = write(tmp_path / "e.json", [top("mvu", 11), top("attention", 14),
                                       top("rope", 6, unregistered=2)])
    fast = clock_basis(300e6, path)
    assert fast.budget_levels == lut_budget(300e6) == 11
    assert [t.top for t in fast.within] == ["mvu"]
    assert [t.top for t in fast.over] == ["attention", "rope"]
    assert not fast.backed and "not yet backed" in fast.summary()
    slow = clock_basis(200e6, path)  # 16 levels: attention fits, rope's DSPs still do not
    assert [t.top for t in slow.over] == ["rope"]
    assert "rope 6 (2 unregistered DSPs)" in slow.summary()
    only_fit = write(tmp_path / "f.json", [top("mvu", 11)])
    assert clock_basis(300e6, only_fit).backed


def test_evidence_from_other_rtl_is_stale(tmp_path):
    path = write(tmp_path / "e.json", [top("mvu", 3)], rtl="0" * 64)
    basis = clock_basis(300e6, path)
    assert basis.stale and not basis.backed
    assert "assumed (the timing evidence is from other RTL, 000000000000" in basis.summary()


@pytest.mark.parametrize("content, message", [
    ("[]", "must hold a JSON object, not list"),
    ('{"format": "x", "rtl_hash": "", "tops": []}', "field 'format' must be"),
    ('{"format": "heteroreason-timing/1", "tops": []}', "field 'rtl_hash' is missing"),
    ('{"format": "heteroreason-timing/1", "rtl_hash": "", "tops": [{"top": "mvu"}]}',
     r"tops\[0\] lacks or mistypes a field"),
])
def test_bad_evidence_files_are_named(tmp_path, content, message):
    path = tmp_path / "e.json"
    path.write_text(content)
    with pytest.raises(InputError, match=message):
        load_evidence(path)
    with pytest.raises(InputError, match="no timing evidence"):
        load_evidence(tmp_path / "missing.json")


def test_the_committed_evidence_is_from_this_rtl():
    """The projection cites it; a change of the RTL must come with a new timing run."""
    recorded, tops = load_evidence(EVIDENCE_FILE)
    assert recorded == rtl_hash(), "rerun scripts/timing_report.py --set u280 --write-evidence"
    assert {t.top for t in tops} >= {"mvu", "rmsnorm", "rope", "attention", "swiglu", "sampler"}


def routed(name, mhz, target=150.0):
    return top(name, 5) | {"ecp5_mhz": mhz, "ecp5_target_mhz": target,
                           "ecp5_part": "LFE5U-85F speed 8"}


def test_the_ecp5_basis_names_the_lowest_top_and_those_below_the_target(tmp_path):
    path = write(tmp_path / "e.json", [routed("mvu", 155.2), routed("decoder_core", 151.0)])
    basis = ecp5_basis(path)
    assert not basis.below and not basis.stale
    assert basis.summary() == ("ECP5 LFE5U-85F speed 8 after nextpnr, 2 tops at small widths: "
                               "lowest decoder_core 151.0 MHz (every top >= 150 MHz)")
    path = write(tmp_path / "f.json", [routed("mvu", 155.2), routed("attention", 141.6)])
    assert ecp5_basis(path).summary().endswith("; below the target: attention 141.6 < 150")
    stale = write(tmp_path / "g.json", [routed("mvu", 155.2)], rtl="1" * 64)
    assert ecp5_basis(stale).summary().startswith("ECP5: no evidence of this RTL")


def test_ecp5_evidence_without_its_figures_is_refused(tmp_path):
    path = write(tmp_path / "e.json", [routed("mvu", 155.2), top("rope", 6)])
    with pytest.raises(InputError, match=r"tops\[1\] \(rope\) has no ECP5 figures"):
        ecp5_basis(path)
    with pytest.raises(InputError, match="field 'tops' is empty"):
        ecp5_basis(write(tmp_path / "f.json", []))
    with pytest.raises(InputError, match=r"no ECP5 evidence .*--set small --ecp5"):
        ecp5_basis(tmp_path / "missing.json")

