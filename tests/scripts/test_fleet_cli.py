"""scripts/fleet.py: a small simulate writes its records and trace; bad input exits 2."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from heteroreason.model.timing.fpga.platform import ENGINE_CONTEXTS

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "fleet.py"


def _run(*args):
    return subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, text=True)


def test_simulate_writes_records_and_a_chrome_trace(tmp_path):
    r = _run("simulate", "--rate", "0.2", "--pools", "2", "1", "1", "--problems", "40",
             "--slo", "120", "--out", str(tmp_path))
    assert r.returncode == 0, r.stderr
    record = json.loads((tmp_path / "simulate.json").read_text())[0]
    assert record["problems"] == 40 and record["p99_s"] >= record["p50_s"] > 0
    trace = json.loads((tmp_path / "simulate.trace.json").read_text())
    assert any(e.get("ph") == "X" for e in trace["traceEvents"])
    devices = json.loads((tmp_path / "simulate.devices.trace.json").read_text())
    slices = [e for e in devices["traceEvents"] if e["ph"] == "X"]
    pools = {e["args"]["name"] for e in devices["traceEvents"] if e["name"] == "process_name"}
    assert pools == {"draft", "link", "prm", "target", "problems"}
    window_us = 1e3 * devices["otherData"]["window_ms"]
    assert slices and all(e["ts"] < window_us for e in slices if e["pid"] != 5)


@pytest.mark.parametrize("args, message", [
    (["simulate", "--rate", "0"], "must be a finite number > 0"),
    (["simulate", "--pools", "0", "1", "1"], "must be a finite number > 0"),
    # bounds that keep a run to minutes and its times resolved (each named with its range)
    (["simulate", "--rate", "inf"], "argument --rate: inf must be a finite number > 0"),
    (["simulate", "--rate", "1e-300"], "1e-300 must be in [0.0001, 10000] (arrivals per second)"),
    (["simulate", "--cv", "101"], "101 must be in [0.001, 10]"),
    (["simulate", "--problems", "10000000"], "10000000 must be in [1, 1e+06] (problems)"),
    (["simulate", "--pools", "1000000", "1", "1"], "must be in [1, 1024] (devices a pool)"),
    (["sweep", "--rates", "0.1", "--slo", "inf"], "argument --slo: inf must be a finite"),
    (["size", "--slo", "nan"], "argument --slo: nan must be a finite number > 0"),
    (["capacity", "--slo", "0.5", "--problems", "30"], "below the fastest possible"),
    (["simulate", "--seed", "-1"], "must be a non-negative integer, not -1"),
    (["simulate", "--contexts", "0"], "argument --contexts: 0 must be a finite number > 0"),
    (["simulate", "--contexts", "100000"], "must be in [1, 65536] (problems a board)"),
    # more problems a board than its HBM holds: the board, the limit and the value named
    (["simulate", "--contexts", "5000", "--problems", "3"],
     "draft_slots 5000: board u280-300's HBM holds 321 problems"),
    (["simulate", "--per-pass", "9"], "must be in [1, 8] (drafts a pass)"),
    (["simulate", "--fpga", "rtl-u280-300", "--per-pass", "4", "--problems", "3"],
     "per_pass 4: a board holds 1 problem"),
    (["simulate", "--per-pass", "8", "--contexts", "4", "--problems", "3"],
     "per_pass 8: a board holds 4 problem"),
    (["simulate", "--per-pass", "3", "--contexts", "4", "--problems", "3"],
     "per_pass must be a power of two <= 8, not 3"),
])
def test_bad_input_exits_2(tmp_path, args, message):
    r = _run(*args, "--out", str(tmp_path))
    assert r.returncode == 2
    assert message in r.stderr


def test_malformed_arrival_trace(tmp_path):
    path = tmp_path / "arrivals.txt"
    path.write_text("0\n2\n1\n")
    r = _run("simulate", "--arrivals", str(path), "--problems", "3", "--out", str(tmp_path))
    assert r.returncode == 2
    assert "arrivals.txt:3" in r.stderr


def test_size_reports_the_frontier_and_the_cheapest_pools_for_a_load(tmp_path):
    r = _run("size", "--slo", "120", "--drafts", "1", "2", "--prms", "1", "--targets", "1",
             "--problems", "40", "--rate", "0.05", "--out", str(tmp_path))
    assert r.returncode == 0, r.stderr
    rows = json.loads((tmp_path / "size.json").read_text())
    assert [(row["drafts"], row["prms"], row["targets"]) for row in rows] == [(1, 1, 1),
                                                                             (2, 1, 1)]
    best = max(rows, key=lambda row: row["goodput_per_kw"])
    assert f"most goodput per kW: {best['drafts']}:1:1" in r.stdout
    assert "least active power carrying 0.05/s" in r.stdout
    assert (tmp_path / "size.png").stat().st_size > 0


def test_size_searches_the_problems_a_board_holds(tmp_path):
    # a short SLO on short problems: a capacity run holds ten SLOs of arrivals
    r = _run("size", "--slo", "30", "--datasets", "gsm8k", "--drafts", "1", "--prms", "1",
             "--targets", "1", "--contexts", "1", "4", "--problems", "40", "--out", str(tmp_path))
    assert r.returncode == 0, r.stderr
    rows = json.loads((tmp_path / "size.json").read_text())
    assert [row["board_contexts"] for row in rows] == [1, 4]
    # the design's four a pass, at most what a board holds
    assert [row["per_pass"] for row in rows] == [1, 4]
    assert rows[0]["system"].endswith("/contexts=1")
    assert rows[1]["system"].endswith("/contexts=4/per_pass=4")
    # a board holding four problems carries at least what one holding one does (within the
    # search's 2 % bracket)
    assert rows[1]["capacity_per_s"] >= rows[0]["capacity_per_s"] * 0.98


def test_size_searches_the_drafts_a_pass(tmp_path):
    r = _run("size", "--slo", "30", "--datasets", "gsm8k", "--drafts", "1", "--prms", "1",
             "--targets", "1", "--contexts", "1", "4", "--per-pass", "1", "4", "--problems", "40",
             "--out", str(tmp_path))
    assert r.returncode == 0, r.stderr
    rows = json.loads((tmp_path / "size.json").read_text())
    # a board holding one problem drafts one a pass: that point is left out of the grid
    assert [(row["board_contexts"], row["per_pass"]) for row in rows] == [(1, 1), (4, 1),
                                                                         (4, 4)]


def test_compare_reports_speedups_at_load(tmp_path):
    r = _run("compare", "--slo", "120", "--pools", "1", "1", "1", "--problems", "30",
             "--out", str(tmp_path))
    assert r.returncode == 0, r.stderr
    # the answer first, with the board as the RTL builds it (the default FPGA)
    assert r.stdout.startswith("Verdict: HeteroReason "), r.stdout[:300]
    assert (f"FPGA 'rtl-u280-300-batch4': {ENGINE_CONTEXTS} problems a board, as this project's "
            "RTL builds") in " ".join(r.stdout.split())
    capacity = json.loads((tmp_path / "compare.json").read_text())
    assert [row["board_contexts"] for row in capacity] == [None, ENGINE_CONTEXTS, ENGINE_CONTEXTS]
    assert [row["per_pass"] for row in capacity] == [1, 4, 4]
    rows = json.loads((tmp_path / "compare_speedup.json").read_text())
    assert [row["load_fraction"] for row in rows] == [0.0, 0.5, 0.9] * 2
    for row in rows:
        assert row["speedup_mean"] == pytest.approx(row["t2_mean_s"] / row["hr_mean_s"])


def test_sweep_draws_one_curve_per_mode(tmp_path):
    r = _run("sweep", "--rates", "0.02", "0.05", "--modes", "t2", "heteroreason",
             "--problems", "30", "--slo", "120", "--out", str(tmp_path))
    assert r.returncode == 0, r.stderr
    rows = json.loads((tmp_path / "sweep.json").read_text())
    assert [(row["mode"], row["rate_per_s"]) for row in rows] == [
        ("t2", 0.02), ("t2", 0.05), ("heteroreason", 0.02), ("heteroreason", 0.05)]
    assert all(row["goodput_per_s"] <= row["problems_per_s"] for row in rows)


def test_costs_print_each_coefficient_with_its_source():
    r = _run("costs", "--config", "config2")
    assert r.returncode == 0, r.stderr
    for role in ("draft: config2/draft", "prm: config2/prm", "target: config2/target"):
        assert role in r.stdout
    assert r.stdout.count("per_item_ms = 1.02") == 3
    assert "req/s at batch 1 (held out)" in r.stdout and "fitted per-item overhead" in r.stdout


@pytest.mark.parametrize("args, message", [
    (["--problems", "0"], "argument --problems: 0 must be a finite number > 0"),
    (["--problems", "100000000"], "100000000 must be in [1, 1e+06] (problems)"),
    (["--searches", "--workers", "0"], "--workers must be an integer in [1, 64], not 0"),
    (["--seed", "-3"], "--seed must be a non-negative integer, not -3"),
    (["--searches", "--slo", "0"], "argument --slo: 0 must be a finite number > 0"),
    (["--searches", "--slo", "inf"], "argument --slo: inf must be a finite number > 0"),
])
def test_the_benchmark_refuses_bad_options(args, message):
    bench = SCRIPT.parent / "bench_fleet.py"
    r = subprocess.run([sys.executable, str(bench), *args], capture_output=True, text=True)
    assert r.returncode == 2 and message in r.stderr, r.stderr


def test_an_arrival_trace_shorter_than_the_problems_exits_2(tmp_path):
    path = tmp_path / "arrivals.txt"
    path.write_text("0\n1\n")
    r = _run("simulate", "--arrivals", str(path), "--problems", "5", "--out",
             str(tmp_path / "out"))
    assert r.returncode == 2 and "Traceback" not in r.stderr
    assert "the arrival trace has 2 arrival times, fewer than the 5 problems asked" in r.stderr
    assert not (tmp_path / "out").exists()
