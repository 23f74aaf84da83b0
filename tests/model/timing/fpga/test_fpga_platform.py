"""Boards, the design chosen for a board, and the one-call draft latency."""

from dataclasses import replace

import pytest

from heteroreason.model.spec.numerics.qwen2_config import qwen2_config
from heteroreason.model.system.config import FPGA_MODELS, system_config
from heteroreason.model.timing.device_timing import PAPER_U280, timing
from heteroreason.model.timing.fpga.platform import (
    BOARDS,
    batched_ingest_ms,
    batched_ingest_resources,
    design_for,
    draft_ms_per_token,
    draft_timing,
    edge_gpu_ms_per_token,
    estimate_resources,
    fpga_board,
    memory_plan,
)
from heteroreason.model.timing.fpga.unit_resources import place_binding_units

Q05 = qwen2_config("qwen2.5-0.5b")


def test_designs_fit_and_use_the_bandwidth_they_have():
    for name, board in BOARDS.items():
        params = design_for(Q05, board)
        assert estimate_resources(Q05, params).fits(board.resources), name
        # the weight stream sustains what its ports carry, never more than all of them
        sustained = memory_plan(Q05, board, params).stream("weights").bytes_per_s
        assert sustained <= board.usable_bandwidth_bytes_per_s
        assert sustained <= params.stream_bytes * board.clock_hz * 1.000001
        assert Q05.hidden % params.lanes == 0


def test_draft_latency_grows_with_context_and_clock_matters():
    at_300 = [draft_ms_per_token("qwen2.5-0.5b", "u280-300", c) for c in (0, 1024, 4000)]
    assert at_300[0] < at_300[1] < at_300[2]
    # where the attention grows, cycles count: the 200 MHz design is slower (at context 0 both
    # are bound by the HBM: a 512-bit port carries 12.8 GB/s at 200 MHz, 13.3 at 300)
    at_200 = draft_ms_per_token("qwen2.5-0.5b", "u280-200", 4000)
    assert at_200 > 1.2 * at_300[2]
    assert draft_ms_per_token("qwen2.5-0.5b", "u280-200", 0) < 1.1 * at_300[0]
    # never faster than the HBM roofline of its own weight bytes
    roof = 1000 * Q05.decode_counts(0).weight_bytes / fpga_board("u280-300")\
        .usable_bandwidth_bytes_per_s
    assert at_300[0] > roof


def test_the_u280_design_is_at_least_2_5_times_the_papers_projection():
    # the paper: 5.74 ms + 0.002464 ms per KV entry on a U280 at 300 MHz
    for context in (0, 512, 1024, 4000):
        paper = timing(PAPER_U280).token_ms(context)
        assert draft_ms_per_token("qwen2.5-0.5b", "u280-300", context) * 2.5 <= paper


def test_scheduler_timing_follows_the_calibrated_model():
    t = draft_timing("u280-300")
    assert t.decode_ms_per_kv_token > 0
    for context in (0, 700, 3000):
        # the scheduler prices a token at kv = context + 1 entries: the floor (the design is
        # bound by its weight stream at short contexts) or the line, whichever is larger
        line = max(t.decode_floor_ms_per_token,
                   t.decode_ms_per_token + t.decode_ms_per_kv_token * (context + 1))
        assert t.token_ms(context) == line
        assert line == pytest.approx(draft_ms_per_token("qwen2.5-0.5b", "u280-300", context),
                                     rel=0.01)
        assert t.ingest_ms(1, context) < t.decode_ms(1, context)  # no LM head
    assert t.token_ms(0) == t.decode_floor_ms_per_token > t.decode_ms_per_token
    config = system_config("config1", fpga="rtl-u280-200")
    assert config.fpga == draft_timing("u280-200")
    assert config.fpga_power.active_w == BOARDS["u280-200"].power_w
    assert set(FPGA_MODELS) == {"artifact", "artifact-v80", "rtl-u280-200", "rtl-u280-300",
                                "rtl-v80", "rtl-u280-300-batch4", "rtl-v80-batch4"}
    with pytest.raises(KeyError, match=r"^\"unknown board 'u50'; choose one of u280-200, "
                                       r"u280-300, v80\"$"):
        draft_timing("u50")


def test_bad_queries():
    with pytest.raises(KeyError, match=r"^\"unknown board 'u250'; choose one of u280-200, "
                                       r"u280-300, v80\"$"):
        draft_ms_per_token("qwen2.5-0.5b", "u250", 10)
    with pytest.raises(KeyError, match=r"^\"unknown model 'qwen3'; choose one of qwen2\.5-0\.5b, "
                                       r"qwen2\.5-1\.5b, qwen2\.5-7b, qwen2\.5-math-prm-7b, "
                                       r"test-tiny, test-small, test-0\.5b-layer, test-deep, "
                                       r"test-odd-vocab\"$"):
        draft_ms_per_token("qwen3", "v80", 10)
    with pytest.raises(ValueError, match=r"^context must be an integer in \[0, 32,767\] "
                                         r"\(qwen2\.5-0\.5b\), not 40000$"):
        draft_ms_per_token("qwen2.5-0.5b", "v80", 40_000)
    with pytest.raises(KeyError, match=r"^\"unknown GPU 'rtx'; choose one of jetson-orin-nano\"$"):
        edge_gpu_ms_per_token("qwen2.5-0.5b", "rtx", 10)
    assert edge_gpu_ms_per_token("qwen2.5-0.5b", "jetson-orin-nano", 0) > 5


def test_a_batched_ingest_is_its_passes_and_a_batch_of_one_is_token_by_token():
    tokens = 10
    one_by_one = sum(draft_ms_per_token(Q05, "u280-300", c, keep_logits=False)
                     for c in range(300, 300 + tokens))
    assert batched_ingest_ms(Q05, "u280-300", 300, tokens, batch=1) == \
        pytest.approx(one_by_one, rel=1e-12)
    # 10 tokens in batches of 4: three passes (4, 4, 2), each dearer than a token (its
    # tokens' attention and norms), all of them cheaper than ten passes
    four = batched_ingest_ms(Q05, "u280-300", 300, tokens, batch=4)
    assert 3 * one_by_one / tokens < four < 0.65 * one_by_one
    # the batch's design has half the single design's MACs (four vectors' products would not
    # fit SLR0's DSP slices at its width): its passes are bound by its MACs, not the HBM, and a
    # run of 100 tokens takes about half the token-by-token time (a quarter would be all of it)
    assert batched_ingest_ms(Q05, "u280-300", 0, 100, batch=4) < \
        0.55 * batched_ingest_ms(Q05, "u280-300", 0, 100, batch=1)


def test_the_batched_units_resources():
    # the design built for a batched ingest of four: the single design's beat with four vectors
    # would need more DSP slices than SLR0 holds beside the HBM, so it is the fastest that
    # fits with the batch, half as wide
    single = design_for(Q05, "u280-300")
    plan = place_binding_units(Q05, single, "u280-300", 4)
    assert not plan.fits and any(o.startswith("SLR0 DSP 3,680 > 2,131") for o in plan.over), \
        plan.over
    params = replace(design_for(Q05, "u280-300", ingest_batch=4), ingest_batch=1)
    assert params.beat_bytes == single.beat_bytes // 2
    base = estimate_resources(Q05, params)
    assert batched_ingest_resources(Q05, params, 1) == base
    four = batched_ingest_resources(Q05, params, 4)
    macs, k = params.beat_bytes, params.rows_per_beat
    # two vectors a DSP slice: four vectors cost two slices a MAC lane where one vector's rows
    # took one a pair of lanes, the requantizers of three more vectors' rows (6 each) and three
    # more vectors' SwiGLU lanes (5 each)
    assert four.dsp - base.dsp == 2 * macs - params.lanes * (k // 2) + 3 * (6 + 5) * k
    # the matrix-vector unit's 42 LUTs and 73 flip-flops a MAC lane and extra vector (the
    # 64-lane unit synthesized at one and four vectors)
    assert (four.lut - base.lut, four.ff - base.ff) == (3 * 42 * macs, 3 * 73 * macs)
    # three more scratchpads of 424 rows of 512 bits (two copies of 8 RAMB36, 72 x 512, for
    # its two readers: 32 blocks of 18 Kb), three more vectors' SwiGLU tables (one a lane) and
    # the gains' copy: 896 / 32 entries of 32 x 69 bits (62 blocks wide, one deep)
    assert (params.vector_width, params.param_width) == (32, 32)
    assert four.bram18k - base.bram18k == 3 * 32 + 3 * k + 62
    assert four.fits(BOARDS["u280-300"].resources)


def test_bad_batched_ingests():
    for name, kwargs in (("tokens", {"tokens": 0, "batch": 4}),
                         ("batch", {"tokens": 4, "batch": 0})):
        with pytest.raises(ValueError, match=rf"^{name} must be a positive integer, not 0$"):
            batched_ingest_ms(Q05, "u280-300", 0, **kwargs)
    with pytest.raises(ValueError, match=r"^context must be an integer in \[0, 32,668\] \(100 "
                                         r"tokens of qwen2\.5-0\.5b\), not 32700$"):
        batched_ingest_ms(Q05, "u280-300", 32_700, 100, batch=4)
    with pytest.raises(ValueError, match=r"^batch must be a positive integer, not 2\.0$"):
        batched_ingest_resources(Q05, design_for(Q05, "u280-300"), 2.0)


def test_the_scheduler_prices_a_batched_ingest_by_the_pass():
    """With four tokens a pass, a host token's ingest costs a quarter of a pass of four (within
    the fit's 0.5 %), the decode is the batched design's own (the fastest design that fits
    with the batch), and a run of 100 tokens after context 0 ingests in about half the
    token-by-token time."""
    single, batched = draft_timing("u280-300"), draft_timing("u280-300", ingest_batch=4)
    for n in (0, 700, 3000):
        assert batched.ingest_ms(4, n) == pytest.approx(
            batched_ingest_ms(Q05, "u280-300", n, 4, batch=4), rel=0.005)
        assert batched.decode_ms(1, n) == pytest.approx(
            draft_ms_per_token(Q05, "u280-300", n, ingest_batch=4), rel=0.01)
    assert batched.ingest_ms(100, 0) < 0.55 * single.ingest_ms(100, 0)
    config = system_config("config2", fpga="rtl-u280-300-batch4")
    assert config.fpga == batched
    # a board too small for any design with the batch
    small = replace(BOARDS["u280-300"], name="small",
                    resources=replace(BOARDS["u280-300"].resources, dsp=400))
    with pytest.raises(ValueError, match=r"^no design for qwen2\.5-0\.5b with a batched ingest "
                                         r"of 4 fits small$"):
        design_for(Q05, small, ingest_batch=4)
