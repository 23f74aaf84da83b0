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
