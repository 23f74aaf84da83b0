"""The Python API, called as the package's docstring and the README show it."""

import math

import pytest

import heteroreason as hr


def test_the_draft_speed_of_a_board():
    at_0 = hr.draft_ms_per_token("u280-300")
    assert 1.0 < at_0 < 2.0  # the U280 design: about 750 tok/s at context 0
    assert hr.draft_ms_per_token("u280-300", context=2048) > at_0
    with pytest.raises(KeyError, match="unknown board 'u55'"):
        hr.draft_ms_per_token("u55")


def test_a_trace_set_simulated_in_each_mode():
    traces = hr.bundled_traces("gsm8k")[:10]
    t2 = hr.simulate(traces, "t2")
    hr_u280 = hr.simulate(traces, "heteroreason", fpga="rtl-u280-300")
    assert hr_u280.problems == 10 and hr_u280.latency_s < t2.latency_s
    assert hr.simulate(traces, "t2", gpu_draft="vllm-a100").latency_s < t2.latency_s
    with pytest.raises(ValueError, match="unknown mode 'fast'"):
        hr.simulate(traces, "fast")


def test_the_verdict_rows():
    rows = hr.verdict(configs=["config2"])
    assert [r.dataset for r in rows] == ["math500", "gsm8k", "gaokao2023en", "olympiadbench"]
    for row in rows:
        by_fpga = {o.fpga: o for o in row.fpgas}
        assert by_fpga["artifact"].over_t2 < 1 < by_fpga["rtl-u280-300"].over_t2
        assert row.break_even.ms_per_token is not None


def test_a_fleet_run():
    record = hr.fleet(pools=(2, 1, 1), rate_per_s=0.2, problems=20, seed=3)
    assert record["drafts"] == 2 and record["problems"] == 20
    assert math.isfinite(record["p99_s"]) and record["p99_s"] >= record["p50_s"] > 0


def test_a_verilog_export(tmp_path):
    path = hr.export_verilog("kvmu", tmp_path, capacity=64)
    assert path == tmp_path / "kvmu.v" and "module kvmu" in path.read_text()
    with pytest.raises(ValueError, match="capacity"):
        hr.export_verilog("kvmu", tmp_path, capacity=0)


def test_a_cocotb_bench_run():
    result = hr.run_bench("kvmu", events=5000)  # the fewest the coverage goals take
    assert result.tests > 0 and result.failed == 0
    with pytest.raises(ValueError, match="no testbench for 'mvu'"):
        hr.run_bench("mvu")
