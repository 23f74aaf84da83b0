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
