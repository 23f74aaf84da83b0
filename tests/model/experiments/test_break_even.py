"""The FPGA draft's break-even: found where the latencies meet, reported outside its range,
refused for bad ranges and modes; the script prints the table and checks its arguments."""

import csv
import json
import subprocess
import sys
from pathlib import Path

import pytest

from heteroreason.model.experiments.break_even import (
    Crossing,
    break_even,
    break_evens,
    heteroreason_latency_s,
    ingest_sensitivity,
    latency_grid_ms,
    with_ingest_scaled,
)
from heteroreason.model.system.config import ServingMode, system_config
from heteroreason.model.system.simulate import simulate
from heteroreason.model.workload.bundled import load_bundled
from heteroreason.model.workload.traces import dump_traces

ROOT = Path(__file__).resolve().parents[3]
CONFIG = system_config("config1")


@pytest.fixture(scope="module")
def traces():
    return load_bundled("math500")[:12]


def test_the_latency_does_not_fall_as_the_draft_slows(traces):
    latencies = [heteroreason_latency_s(traces, CONFIG, ms) for ms in latency_grid_ms(0.5, 40)]
    assert latencies == sorted(latencies)
    assert latencies[-1] > 2 * latencies[0]


def test_the_break_even_is_where_the_latencies_meet(traces):
    """The definition, checked from outside: no slower at the break-even, slower a tolerance
    beyond it."""
    target = simulate(traces, CONFIG, ServingMode.T2, keep_runs=False).summary.latency_s
    found = break_even(traces, CONFIG, "t2", dataset="math500", tolerance_ms=0.01)
    assert found.crossing is Crossing.FOUND and found.against_latency_s == target
    assert heteroreason_latency_s(traces, CONFIG, found.ms_per_token) <= target
    assert heteroreason_latency_s(traces, CONFIG, found.ms_per_token + 0.01) > target
    # a naive scan brackets it
    scan = [k * 0.25 for k in range(1, 81)]
    last_no_slower = max(ms for ms in scan if heteroreason_latency_s(traces, CONFIG, ms)
                         <= target)
    assert last_no_slower <= found.ms_per_token < last_no_slower + 0.25


def test_both_modes_read_one_curve(traces):
    found, curve = break_evens(traces, CONFIG, ("t2", "baseline"), low_ms=0.5, high_ms=40)
    t2, baseline = found
    assert t2.against == "t2" and baseline.against == "baseline"
    assert t2.ms_per_token < baseline.ms_per_token  # the baseline is the slower GPU mode
    costs = [c[0] for c in curve]
    assert costs == sorted(costs) and costs[0] == 0.5 and costs[-1] == 40
    assert {round(ms, 9) for ms in latency_grid_ms(0.5, 40)} <= {round(ms, 9) for ms in costs}


def test_a_break_even_outside_the_range_says_so(traces):
    faster = break_even(traces, CONFIG, "baseline", low_ms=0.05, high_ms=0.1)
    assert faster.crossing is Crossing.FPGA_FASTER_THROUGHOUT and faster.ms_per_token is None
    assert faster.cells()[5] == "> 0.1"
    slower = break_even(traces, CONFIG, "t2", low_ms=60, high_ms=100)
    assert slower.crossing is Crossing.FPGA_SLOWER_THROUGHOUT and slower.ms_per_token is None
    assert "slower even at 60" in slower.describe()


@pytest.mark.parametrize("options, message", [
    ({"low_ms": 5.0, "high_ms": 5.0}, "low_ms must be below high_ms, not 5.0 >= 5.0"),
    ({"low_ms": float("nan")}, "low_ms must be a finite positive number, not nan"),
    ({"high_ms": -1}, "high_ms must be a finite positive number, not -1"),
    ({"tolerance_ms": 0}, "tolerance_ms must be a finite positive number, not 0"),
])
def test_a_bad_range_is_refused(traces, options, message):
    with pytest.raises(ValueError, match=f"^{message}$"):
        break_even(traces, CONFIG, "t2", **options)


@pytest.mark.parametrize("mode, message", [
    ("heteroreason", "against must be modes without the FPGA"),
    ("gpu", "unknown mode 'gpu'"),
])
def test_a_mode_with_the_fpga_or_no_mode_is_refused(traces, mode, message):
    with pytest.raises(ValueError, match=message):
        break_even(traces, CONFIG, mode)


def run(*args):
    return subprocess.run([sys.executable, str(ROOT / "scripts" / "break_even.py"),
                           *map(str, args)], capture_output=True, text=True, cwd=ROOT,
                          timeout=600)


def test_the_script_prints_the_table_and_the_plot(tmp_path, traces):
    path = tmp_path / "math500.jsonl"
    dump_traces(traces[:6], path)
    out = tmp_path / "plot"
    proc = run("--traces", path, "--configs", "config1", "--range", "0.5", "40", "--out", out)
    assert proc.returncode == 0, proc.stderr
    lines = [line.split() for line in proc.stdout.splitlines()]
    for fpga in ("fpga/artifact-u280", "fpga/rtl-u280-300"):  # each FPGA model's own rows
        for mode in ("t2", "baseline"):
            assert [line[:4] for line in lines].count(["config1", "math500", fpga, mode]) == 1
    assert (out / "break_even.png").stat().st_size > 10_000
    rows = list(csv.DictReader((out / "break_even.csv").read_text().splitlines()))
    assert len(rows) == 4 and json.loads((out / "break_even.json").read_text())[0] == rows[0]
    record = json.loads((out / "run.json").read_text())
    assert record["command"][:2] == ["heteroreason", "break-even"]
    assert set(record["models"]) == {"artifact", "rtl-u280-300"}


def test_the_verdict_agrees_with_the_bisection(traces):
    """The main job's quicker search (false position with probes) lands within its tolerance
    of the bisection's break-even."""
    from heteroreason.model.experiments.verdict import BREAK_EVEN_TOLERANCE_MS, break_even_vs_t2

    config = system_config("config1", fpga="rtl-u280-300")
    bisected = break_even(traces, config, "t2", tolerance_ms=0.005)
    quick = break_even_vs_t2(traces, config, bisected.against_latency_s)
    assert quick.crossing is Crossing.FOUND
    assert abs(quick.ms_per_token - bisected.ms_per_token) <= BREAK_EVEN_TOLERANCE_MS + 0.005
    assert heteroreason_latency_s(traces, config, quick.ms_per_token) <= \
        bisected.against_latency_s


def test_a_cheaper_ingest_never_slows_heteroreason(traces):
    """The shadow ingest scaled: scale 1 is the configuration as it is, the latency does not
    rise as the ingest gets cheaper, and the artifact's model (no ingest cost of its own:
    it ingests at its decode cost) is scaled from its decode cost."""
    rtl = system_config("config2", fpga="rtl-u280-300")
    for config in (rtl, system_config("config2")):
        rows = ingest_sensitivity(traces[:4], config, [1, 0.25, 0])
        latencies = [r.latency_s for r in rows]
        assert latencies == sorted(latencies, reverse=True)
        assert rows[0].change_pct == 0.0 and rows[-1].change_pct < 0
        base = simulate(traces[:4], config, ServingMode.HETEROREASON, keep_runs=False).summary
        assert rows[0].latency_s == base.latency_s
    fpga = with_ingest_scaled(CONFIG, 0.25).fpga
    assert CONFIG.fpga.ingest_ms_per_token is None
    assert fpga.ingest_ms(1, 0) == pytest.approx(0.25 * CONFIG.fpga.decode_ms_per_token +
                                                 CONFIG.fpga.decode_ms_per_kv_token)
    # the RTL model's floor scales with its per-token term; the KV term is kept
    half = with_ingest_scaled(rtl, 0.5).fpga
    assert half.ingest_floor_ms_per_token == 0.5 * rtl.fpga.ingest_floor_ms_per_token
    assert half.decode_ms_per_kv_token == rtl.fpga.decode_ms_per_kv_token
    for bad in (-0.5, float("nan"), True, "1"):
        with pytest.raises(ValueError,
                           match="ingest scale must be a finite non-negative number, not"):
            with_ingest_scaled(CONFIG, bad)


def test_the_script_prints_the_ingest_table(tmp_path, traces):
    path = tmp_path / "gsm8k.jsonl"
    dump_traces(load_bundled("gsm8k")[:2], path)
    proc = run("--traces", path, "--configs", "config2", "--no-plots", "--fpgas", "rtl-u280-300",
               "--against", "t2", "--ingest-scales", "1", "0.25", "--out", tmp_path / "be")
    assert proc.returncode == 0, proc.stderr
    rows = [line.split() for line in proc.stdout.partition("shadow ingest")[2].splitlines()]
    rows = [r for r in rows if r[:2] == ["config2", "gsm8k"]]
    assert [r[2] for r in rows] == ["1", "0.25"] and float(rows[0][5]) == 0.0
    assert float(rows[1][3]) == pytest.approx(0.25 * float(rows[0][3]), abs=0.002)
    assert float(rows[1][4]) <= float(rows[0][4])


@pytest.mark.parametrize("args, message", [
    (["--ingest-scales", "-1"], "--ingest-scales must be finite numbers >= 0, not -1"),
    (["--range", "5", "1"], "--range must be two finite numbers 0 < LOW_MS < HIGH_MS, not 5 1"),
    (["--range", "0", "1"], "--range must be two finite numbers"),
    (["--out", "/dev/null/be"], "--out: "),
    (["--against", "heteroreason"], "invalid choice: 'heteroreason'"),
    (["--traces", "{tmp}/absent.jsonl"], "absent.jsonl"),
])
def test_the_script_refuses_bad_arguments(tmp_path, args, message):
    proc = run(*(a.format(tmp=tmp_path) for a in args), "--configs", "config1")
    assert proc.returncode == 2
    assert message.format(tmp=tmp_path) in proc.stderr
    assert list(tmp_path.iterdir()) == []



def test_a_stale_calibration_is_refused_before_any_replay(tmp_path, stale_calibration, capsys):
    from heteroreason.commands import break_even as script
    stale = stale_calibration
    code = script.main(["--configs", "config1", "--out", str(tmp_path / "be")])
    err = capsys.readouterr().err
    assert code == 2
    assert f"break-even: error: {stale}: calibrated on RTL 000000000000" in err
    assert "recalibrate with heteroreason calibrate" in err
    assert "replays" not in err and not (tmp_path / "be").exists()
