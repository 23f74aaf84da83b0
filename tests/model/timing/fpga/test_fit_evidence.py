"""The fit evidence: the committed file is of this RTL and adds up, bad files are named, a file
of other RTL is stale, and its designs placed per SLR."""

import json

import pytest

from heteroreason.model.files import InputError
from heteroreason.model.timing.fpga.calibration import rtl_hash
from heteroreason.model.timing.fpga.fit import FIT_FILE, load_fit_evidence, parse_fit_evidence
from heteroreason.model.timing.fpga.floorplan import RESOURCES
from heteroreason.model.timing.fpga.platform import design_for
from heteroreason.sim.flow.fit import FIT_FORMAT


def test_the_committed_evidence_is_of_this_rtl_and_adds_up():
    evidence = load_fit_evidence()
    assert evidence.rtl_hash == rtl_hash(), \
        "rerun heteroreason fit --synthesize --write-evidence"
    assert evidence.design("small") is not None  # the case CI synthesizes again
    for fit in evidence.designs:
        if fit.name in ("u280-300", "v80"):  # a board's design: the one the search chose
            assert fit.design.preset == "qwen2.5-0.5b"
            assert fit.design.params == design_for("qwen2.5-0.5b", fit.name)
        for r in RESOURCES:
            assert sum(u[r] for u in fit.units.values()) == fit.total[r], (fit.name, r)
        assert fit.total["dsp"] > fit.design.params.beat_bytes  # one DSP a MAC at least


def entry(**change):
    obj = json.loads(FIT_FILE.read_text())
    obj.update(change)
    return obj


def test_evidence_of_other_rtl_is_stale():
    evidence = parse_fit_evidence(json.dumps(entry(rtl_hash="0" * 64)), "e.json")
    assert evidence.stale


@pytest.mark.parametrize("obj, message", [
    ([], "must hold a JSON object"),
    ({"format": FIT_FORMAT}, "field 'rtl_hash' is missing"),
    (entry(format="x/1"), f"must be {FIT_FORMAT}"),
    (entry(designs={}), "'designs' must be a list"),
    (entry(designs=[{"name": "u280-300"}]), "designs[0] lacks or mistypes a field"),
])
def test_a_bad_evidence_file_is_named(tmp_path, obj, message):
    path = tmp_path / "fit.json"
    path.write_text(json.dumps(obj))
    with pytest.raises(InputError, match=str(path)) as err:
        load_fit_evidence(path)
    assert message in str(err.value)


def test_a_missing_file_says_how_to_make_one(tmp_path):
    with pytest.raises(InputError, match="heteroreason fit --synthesize"):
        load_fit_evidence(tmp_path / "none.json")


def test_a_design_placed_per_slr():
    evidence = load_fit_evidence()
    fit = evidence.design("u280-300") or evidence.design("small")
    plan = fit.floorplan("u280-300")
    assert plan.where["mvu"] == plan.where["wbuf"] == 0
    for k in range(3):
        for r in RESOURCES:
            assert plan.use[k][r] == sum(fit.units[u][r] for u, s in plan.where.items()
                                         if s == k and u in fit.units)
    v80 = fit.floorplan("v80")  # the V80's memory side is SLR2
    assert v80.where["mvu"] == v80.where["wbuf"] == 2


def test_writing_a_boards_synthesis_keeps_the_other_designs_of_this_rtl():
    """``evidence_json(earlier=)``: a run's designs replace those of their names; the earlier
    file's other designs stay when they are of the same RTL, and go when they are not."""
    from heteroreason.sim.flow.fit import evidence_json

    class Record:  # what evidence_json reads of a FitRecord
        def __init__(self, name, total):
            self.name, self.total = name, total

        def to_json(self):
            return {"name": self.name, "total": self.total}

    def earlier(hash_, *names):
        return json.dumps({"format": FIT_FORMAT, "rtl_hash": hash_, "rtl_revision": "r",
                           "method": "m", "designs": [{"name": n, "total": 0} for n in names]})

    text = evidence_json([Record("u280-300", 2)], rtl_hash="h", rtl_revision="r2",
                         earlier=earlier("h", "small", "u280-300"))
    designs = json.loads(text)["designs"]
    assert [(d["name"], d["total"]) for d in designs] == [("small", 0), ("u280-300", 2)]
    text = evidence_json([Record("u280-300", 2)], rtl_hash="h", rtl_revision="r2",
                         earlier=earlier("other", "small"))
    assert [d["name"] for d in json.loads(text)["designs"]] == ["u280-300"]
    assert [d["name"] for d in json.loads(evidence_json(
        [Record("small", 1)], rtl_hash="h", rtl_revision="r", earlier="not json"))["designs"]] \
        == ["small"]


def test_carrying_the_evidence_to_rtl_that_gives_the_same_rtlil():
    """``carried_evidence_json``: on the evidence's own RTL the digests are recorded and every
    design stays; on other RTL only the named designs whose RTLIL is unchanged are carried,
    each keeping the RTL it was synthesized on; a changed RTLIL, or no digest to compare on
    other RTL, refuses."""
    from heteroreason.sim.flow.fit import carried_evidence_json, source_sha256

    def evidence(hash_, **digests):
        return json.dumps({"format": FIT_FORMAT, "rtl_hash": hash_, "rtl_revision": "r",
                           "method": "m", "designs": [
                               {"name": n, "total": 1} | ({"source_sha256": d} if d else {})
                               for n, d in digests.items()]})

    a, b = source_sha256("module a"), source_sha256("module b")
    assert a != b and len(a) == 64
    same = json.loads(carried_evidence_json(evidence("h", small=None, v80=None), {"v80": a},
                                            rtl_hash="h", rtl_revision="r2"))
    assert same["rtl_revision"] == "r"  # the same RTL: the same evidence, digests added
    assert [(d["name"], d.get("source_sha256")) for d in same["designs"]] == \
        [("small", None), ("v80", a)]
    assert "synthesized_rtl_hash" not in same["designs"][1]
    moved = json.loads(carried_evidence_json(evidence("old", small=a, v80=b), {"v80": b},
                                             rtl_hash="new", rtl_revision="r2"))
    assert (moved["rtl_hash"], moved["rtl_revision"]) == ("new", "r2")
    assert moved["designs"] == [{"name": "v80", "total": 1, "source_sha256": b,
                                 "synthesized_rtl_hash": "old"}]
    again = json.loads(carried_evidence_json(json.dumps(moved), {"v80": b}, rtl_hash="newer",
                                             rtl_revision="r3"))
    assert again["designs"][0]["synthesized_rtl_hash"] == "old"  # where it was synthesized
    with pytest.raises(ValueError, match="another RTLIL"):
        carried_evidence_json(evidence("old", v80=b), {"v80": a}, rtl_hash="new",
                              rtl_revision="r2")
    with pytest.raises(ValueError, match="keeps no digest"):
        carried_evidence_json(evidence("old", v80=None), {"v80": a}, rtl_hash="new",
                              rtl_revision="r2")
    with pytest.raises(ValueError, match="no design 'small'"):
        carried_evidence_json(evidence("old", v80=b), {"small": a}, rtl_hash="new",
                              rtl_revision="r2")


def test_a_carried_design_says_where_it_was_synthesized():
    obj = json.loads(FIT_FILE.read_text())
    obj["designs"][0] |= {"source_sha256": "ab" * 32, "synthesized_rtl_hash": "cd" * 32}
    fit = parse_fit_evidence(json.dumps(obj), "x").designs[0]
    assert (fit.source_sha256, fit.synthesized_rtl_hash) == ("ab" * 32, "cd" * 32)
