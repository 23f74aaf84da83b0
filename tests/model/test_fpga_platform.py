"""Boards, the design chosen for a board, and the one-call draft latency."""

import pytest

from heteroreason.model.fpga_platform import (
    BOARDS,
    design_for,
    draft_ms_per_token,
    edge_gpu_ms_per_token,
    estimate_resources,
    fpga_board,
)
from heteroreason.model.qwen2_config import qwen2_config

Q05 = qwen2_config("qwen2.5-0.5b")


def test_designs_fit_and_use_the_bandwidth_they_have():
    for name, board in BOARDS.items():
        params = design_for(Q05, board)
        assert estimate_resources(Q05, params).fits(board.resources), name
        assert params.stream_bytes * board.clock_hz <= board.usable_bandwidth_bytes_per_s
        assert Q05.hidden % params.lanes == 0


def test_draft_latency_grows_with_context_and_clock_matters():
    at_300 = [draft_ms_per_token("qwen2.5-0.5b", "u280-300", c) for c in (0, 1024, 4000)]
    assert at_300[0] < at_300[1] < at_300[2]
    at_200 = draft_ms_per_token("qwen2.5-0.5b", "u280-200", 0)
    assert at_200 == pytest.approx(at_300[0] * 1.5, rel=0.05)
    # never faster than the HBM roofline of its own weight bytes
    roof = 1000 * Q05.decode_counts(0).weight_bytes / fpga_board("u280-300")\
        .usable_bandwidth_bytes_per_s
    assert at_300[0] > roof


def test_bad_queries():
    with pytest.raises(KeyError, match="unknown board 'u250'"):
        draft_ms_per_token("qwen2.5-0.5b", "u250", 10)
    with pytest.raises(KeyError, match="unknown model 'qwen3'"):
        draft_ms_per_token("qwen3", "v80", 10)
    with pytest.raises(ValueError, match=r"context must be in \[0, 32768\)"):
        draft_ms_per_token("qwen2.5-0.5b", "v80", 40_000)
    with pytest.raises(KeyError, match="unknown GPU"):
        edge_gpu_ms_per_token("qwen2.5-0.5b", "rtx", 10)
    assert edge_gpu_ms_per_token("qwen2.5-0.5b", "jetson-orin-nano", 0) > 5
