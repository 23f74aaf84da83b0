"""The floorplan per SLR: the board's SLR data with its sources, units assigned to SLRs (the
memory's side pinned by the HBM), each SLR against the guidelines, the boundary crossings
against the SLLs, and what does not fit named with both numbers."""

import json

import pytest

from heteroreason.model.files import InputError
from heteroreason.model.timing.fpga.floorplan import SLR_FILE, board_floor, place


def res(lut=0, dsp=0, bram18k=0, uram=0):
    return {"lut": lut, "ff": 2 * lut, "dsp": dsp, "bram18k": bram18k, "uram": uram}


def test_the_u280s_slrs_come_with_their_sources():
    floor = board_floor("u280-300")
    assert floor.device.startswith("xcu280") and floor.hbm_slr == 0
    assert [s.name for s in floor.slrs] == ["SLR0", "SLR1", "SLR2"]
    assert floor.slrs[0].dsp == 2664 and floor.boundaries[0].sll == 16800
    assert board_floor("u280-200") == floor.__class__(**{**floor.__dict__, "board": "u280-200"})
    assert all("claim" in s or "DS890" in s or "UG949" in s for s in floor.sources)
    assert board_floor("u55c") is None  # a board the file does not hold


def test_the_v80s_slrs_are_claims_with_the_hbm_on_top():
    """Three SLRs (AMD's AVED pages), the HBM's NoC in SLR2 (PG313); the per-SLR figures
    the device's totals over three, each source marked a claim."""
    floor = board_floor("v80")
    assert floor.device.startswith("xcv80") and floor.hbm_slr == 2
    assert [s.name for s in floor.slrs] == ["SLR0", "SLR1", "SLR2"]
    assert sum(s.uram for s in floor.slrs) <= 1925 and sum(s.dsp for s in floor.slrs) <= 10848
    assert all(s.startswith("claim") for s in floor.sources[:3])


def test_units_beside_the_memory_stay_in_its_slr_and_the_rest_spread():
    floor = board_floor("u280-300")
    units = {"mvu": res(10_000, dsp=1_500), "wbuf": res(100, uram=200), "glue": res(20_000),
             "att": res(30_000, dsp=1_000)}
    links = {frozenset({"mvu", "glue"}): 1_000, frozenset({"att", "glue"}): 700,
             frozenset({"wbuf", "mvu"}): 4_000, frozenset({"ports", "glue"}): 300}
    plan = place(floor, units, links)
    assert plan.where["mvu"] == plan.where["wbuf"] == plan.where["ports"] == 0
    # SLR0 takes 80 % of 2,664 DSPs = 2,131: the MVU's 1,500 and the attention's 1,000 do
    # not fit together, so the attention goes up and the glue stays (fewer bits cross)
    assert plan.where["att"] == 1 and plan.where["glue"] == 0
    assert plan.crossing_bits == (700, 0) and plan.fits
    assert plan.use[0]["dsp"] == 1_500 and plan.use[1]["dsp"] == 1_000
    table = "\n".join(plan.table())
    assert "SLR0-SLR1: 700 bits cross" in table and "att" in table


def test_of_plans_alike_the_one_with_no_unregistered_crossing_is_taken():
    """The glue beside the memory's ports, and room there (80 % of 2,664 DSPs = 2,131) for one
    of two units: the one whose links to the glue are registered on both sides is sent
    across, whichever the SLL count prefers."""
    floor = board_floor("u280-300")
    units = {"mvu": res(10_000, dsp=1_500), "glue": res(20_000, dsp=400),
             "a": res(1_000, dsp=200), "b": res(1_000, dsp=200)}
    links = {frozenset({"a", "glue"}): 900, frozenset({"b", "glue"}): 100,
             frozenset({"ports", "glue"}): 3_000}
    assert place(floor, units, links).where["a"] == 0  # the fewer bits across: b's

    def unregistered(where):  # b's links are bare wires, a's registered
        return 100 if where["b"] != where["glue"] else 0

    plan = place(floor, units, links, unregistered)
    assert plan.where["b"] == plan.where["glue"] and plan.where["a"] != plan.where["glue"]
    assert plan.fits


def test_a_unit_larger_than_its_slr_is_named_with_both_numbers():
    plan = place(board_floor("u280-300"), {"mvu": res(dsp=3_584), "glue": res(1_000)}, {})
    assert not plan.fits
    assert "SLR0 DSP 3,584 > 2,131 (80% of 2,664)" in plan.over


def test_a_boundary_over_its_slls_is_named():
    units = {"mvu": res(dsp=2_000), "att": res(dsp=2_000)}
    plan = place(board_floor("u280-300"), units, {frozenset({"mvu", "att"}): 6_000})
    assert not plan.fits
    assert plan.over == ("SLR0-SLR1 6,000 crossing bits > 5,040 (30% of 16,800 SLLs)",)


def test_a_net_spanning_three_slrs_crosses_both_boundaries():
    units = {"mvu": res(dsp=2_000), "a": res(dsp=2_200), "b": res(dsp=2_200)}
    plan = place(board_floor("u280-300"), units, {frozenset({"mvu", "a", "b"}): 10})
    assert plan.fits and sorted(plan.where.values()) == [0, 1, 2]
    assert plan.crossing_bits == (10, 10)


@pytest.mark.parametrize("change, message", [
    (lambda o: o.update(format="x"), "heteroreason-slr/1"),
    (lambda o: o["boards"]["u280"].pop("slrs"), "'slrs'"),
    (lambda o: o["boards"]["u280"].update(hbm_slr=5), "hbm_slr 5"),
])
def test_a_bad_slr_file_is_named(tmp_path, change, message):
    obj = json.loads(SLR_FILE.read_text())
    change(obj)
    path = tmp_path / "slr.json"
    path.write_text(json.dumps(obj))
    with pytest.raises(InputError, match=str(path)) as err:
        board_floor("u280-300", path)
    assert message in str(err.value)
