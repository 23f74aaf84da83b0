"""The analytic timing model of the decoder core: its structure (stream- or compute-bound where
the RTL is), its parameters, and the calibration file's checks."""

import json
import re

import pytest

from heteroreason.model.spec.numerics.qwen2_config import qwen2_config
from heteroreason.model.timing.fpga.calibration import (
    Calibration,
    CalibrationError,
    Point,
    fit_overheads,
    load_calibration,
    rtl_hash,
    save_calibration,
)
from heteroreason.model.timing.fpga.core_cycles import OVERHEADS, CoreTiming, cycles_to_ms
from heteroreason.rtl.decoder.crossing import CROSSING_LATENCY
from heteroreason.rtl.decoder.crossing_shared import SHARED_LATENCY
from heteroreason.rtl.decoder.operators import OPERATORS
from heteroreason.rtl.decoder.params import DecoderParams
from heteroreason.rtl.decoder.rmsnorm import square_latency

SMALL = qwen2_config("test-small")


def test_fast_macs_hide_everything_but_the_stream():
    fast = CoreTiming(SMALL, DecoderParams(16, 8, 4, 2048), 64)
    beats = fast.weight_stream_beats()
    assert beats == 55312  # the weight image of test-small in 8-byte beats
    for position in (16, 512):
        assert beats < fast.token_cycles(position) < 1.01 * beats
    # equal rates: the norms and the attention add to the stream, more with context
    equal = CoreTiming(SMALL, DecoderParams(8, 8, 4, 2048), 64)
    assert 1.05 * beats < equal.token_cycles(16) < equal.token_cycles(512)


def test_a_small_buffer_exposes_the_compute():
    big = CoreTiming(SMALL, DecoderParams(16, 8, 4, 4096)).token_cycles(700)
    small = CoreTiming(SMALL, DecoderParams(16, 8, 4, 16)).token_cycles(700)
    assert small > big * 1.05


def test_external_kv_pays_its_latency_once_a_token_until_it_outlasts_a_job():
    """A token's first attention job waits for its key rows; each later job's key rows come
    while the job before it is in the unit's second stage, so their latency shows again only
    where it outlasts that stage (heads_parallel 1: SMALL.heads jobs a layer). The request
    leaves the attention through a crossing (:data:`CROSSING_LATENCY`) and its rows come back
    on the crossing they share with the value rows (:data:`SHARED_LATENCY`), which the first
    job's wait adds to the memory's latency."""
    params = dict(lanes=8, stream_bytes=8, heads_parallel=1, weight_buffer=64)

    def extra(latency):
        return CoreTiming(SMALL, DecoderParams(**params, external_kv=True),
                          latency).token_cycles(10) - \
            CoreTiming(SMALL, DecoderParams(**params, external_kv=False),
                       latency).token_cycles(10)

    assert extra(20) == SMALL.layers * (20 + CROSSING_LATENCY + SHARED_LATENCY)
    assert extra(2000) == pytest.approx(SMALL.layers * SMALL.heads * 2000, rel=0.05)


def test_vector_width_shortens_the_element_serial_operators():
    # equal rates: every non-matrix cycle adds to the token, so the vector paths show in full
    def operators(v):
        timing = CoreTiming(SMALL, DecoderParams(32, 32, 4, 64, vector_width=v))
        return {name: cycles for name, cycles, _ in timing.operators(100)}, \
            timing.token_cycles(100)

    (one, t1), (eight, t8) = operators(1), operators(8)
    h = SMALL.hidden
    # the norm reads 8 elements a cycle but still emits one a cycle (one gain each); its
    # squares' adder tree is two stages deeper at 8 lanes
    assert one["input_norm"] - eight["input_norm"] == \
        h - h // 8 + square_latency(1) - square_latency(8)
    assert one["rope_q"] - eight["rope_q"] == 2 * SMALL.q_dim * 7 // 8
    assert one["q_proj"] - eight["q_proj"] == h - h // 8
    assert t1 - t8 > SMALL.layers * (2 * (h - h // 8) + SMALL.ffn * 7 // 8)


def test_wide_parameter_beats_shorten_the_norm_only():
    """``param_width`` gains a parameter beat: the norm emits that many results a cycle, and no
    other operator changes."""
    def operators(param_width):
        params = DecoderParams(16, 8, 2, 256, vector_width=8, param_width=param_width)
        return {name: cycles for name, cycles, _ in CoreTiming(SMALL, params).operators(100)}

    one, four = operators(1), operators(4)
    h = SMALL.hidden
    assert {n for n in one if one[n] != four[n]} == {"input_norm", "post_attention_norm",
                                                     "final_norm"}
    assert one["final_norm"] - four["final_norm"] == h - h // 4


def test_rows_per_beat_halve_the_matrix_beats():
    """Two rows a beat: every matrix-vector operator takes half the beats, of twice the bytes
    (so the stream beats a token are unchanged at the same stream width, the embedding's
    zero padding aside), and only the LM head's sample gains the sampler's tree level."""
    def timing(rows_per_beat):
        params = DecoderParams(16, 8, 2, 256, vector_width=8, param_width=4,
                               rows_per_beat=rows_per_beat)
        return CoreTiming(SMALL, params)

    one, two = timing(1), timing(2)
    beats = {name: (cycles, mv) for name, cycles, mv in one.operators(100)}
    for name, cycles, mv in two.operators(100):
        # the embedding takes its row in half the beats (an element a cycle either way)
        assert cycles == beats[name][0] - (SMALL.hidden // 32 if name == "embed" else 0), name
        assert 2 * mv == beats[name][1], name
    assert two.embed_row_beats * 32 == one.embed_row_beats * 16 == SMALL.hidden
    assert two.weight_stream_beats() == one.weight_stream_beats()
    assert two.token_cycles(100) < one.token_cycles(100)


def test_bad_parameters():
    for bad in (3, 8):
        with pytest.raises(ValueError, match=rf"^rows_per_beat must be a power of two that "
                                             rf"divides param_width \(4\), not {bad}$"):
            DecoderParams(8, 8, vector_width=4, param_width=4, rows_per_beat=bad)
    with pytest.raises(ValueError, match=r"^rows_per_beat must be an integer in \[1, 64\], not 0$"):
        DecoderParams(8, 8, rows_per_beat=0)
    with pytest.raises(ValueError, match=r"^stream_bytes must be a positive integer that divides "
                                         r"lanes x rows_per_beat \(16\), not 32$"):
        DecoderParams(8, 32, vector_width=2, param_width=2, rows_per_beat=2)
    assert DecoderParams(8, vector_width=2, param_width=2, rows_per_beat=2).stream_bytes == 16
    with pytest.raises(ValueError, match=r"^rows_per_beat \(8\) must divide the rows of every "
                                         r"matrix: vocab is 300$"):
        CoreTiming(qwen2_config("test-odd-vocab"),
                   DecoderParams(8, 8, vector_width=8, param_width=8, rows_per_beat=8))
    with pytest.raises(ValueError, match=r"^vector_width must be a power of two that divides "
                                         r"lanes \(8\), not 3$"):
        DecoderParams(8, 8, vector_width=3)
    for bad in (3, 8):
        with pytest.raises(ValueError, match=rf"^param_width must be a power of two that divides "
                                             rf"vector_width \(4\), not {bad}$"):
            DecoderParams(8, 8, vector_width=4, param_width=bad)
    with pytest.raises(ValueError, match=r"^param_width must be a power of two that divides "
                                         r"vector_width \(1\), not 0$"):
        DecoderParams(8, 8, param_width=0)
    with pytest.raises(ValueError, match=r"^vector_width \(16\) must divide the FFN size "
                                         r"\(384\) and half the head size \(8\)$"):
        CoreTiming(SMALL, DecoderParams(32, 32, vector_width=16))
    with pytest.raises(ValueError, match=r"^stream_bytes must be a positive integer that "
                                         r"divides lanes \(8\), not 3$"):
        DecoderParams(8, 3)
    with pytest.raises(ValueError, match=r"^lanes must be an integer in \[1, 4,096\], not 0$"):
        DecoderParams(0, 1)
    with pytest.raises(ValueError, match=r"^heads_parallel \(3\) must divide the query heads "
                                         r"per KV head \(4\)$"):
        CoreTiming(SMALL, DecoderParams(8, 8, 3))
    with pytest.raises(ValueError, match=r"^position must be an integer in \[0, 1,023\] \(the "
                                         r"model's context\), not 1024$"):
        CoreTiming(SMALL, DecoderParams(8, 8)).token_cycles(1024)
    for bad in (3, 6):
        with pytest.raises(ValueError, match=rf"^ingest_batch must be a power of two <= 64, not "
                                             rf"{bad}$"):
            DecoderParams(8, 8, ingest_batch=bad)
    with pytest.raises(ValueError, match=r"^ingest_batch must be a power of two <= 64, not 0$"):
        DecoderParams(8, 8, ingest_batch=0)
    with pytest.raises(ValueError, match=r"^clock_hz must be positive, not 0$"):
        cycles_to_ms(10, 0)


def test_parameters_are_bounded():
    """Sizes past heteroreason.rtl.limits are refused before anything is built or priced (a
    weight buffer of 10**12 beats was accepted)."""
    with pytest.raises(ValueError, match=r"^weight_buffer must be an integer in \[2, 1,048,576\] "
                                         r"\(a depth in beats\), not 1000000000000$"):
        DecoderParams(8, 8, weight_buffer=10**12)
    with pytest.raises(ValueError, match=r"^weight_buffer must be an integer in \[2, "):
        DecoderParams(8, 8, weight_buffer=1)  # the prefetch FIFO's memory and read register
    with pytest.raises(ValueError, match=r"^param_buffer must be an integer in \[1, 1,048,576\] "
                                         r"\(a depth in beats\), not 1048577$"):
        DecoderParams(8, 8, param_buffer=2**20 + 1)
    with pytest.raises(ValueError, match=r"^ingest_batch must be a power of two <= 64, not 128$"):
        DecoderParams(8, 8, ingest_batch=128)
    with pytest.raises(ValueError, match=r"^lanes must be an integer in \[1, 4,096\], not 8192$"):
        DecoderParams(8192)
    with pytest.raises(ValueError, match=r"^heads_parallel must be an integer in \[1, 4,096\], "
                                         r"not 5000$"):
        DecoderParams(8, heads_parallel=5000)
    with pytest.raises(ValueError, match=r"^delimiters must be at most 256 token ids \(a "
                                         r"comparator each in the sampler\), not 257$"):
        DecoderParams(8, delimiters=tuple(range(257)))
    with pytest.raises(ValueError, match=r"^delimiters must be non-negative token ids, not 7$"):
        DecoderParams(8, delimiters=7)
    assert DecoderParams(8, delimiters=frozenset({9, 3, 5})).delimiters == (3, 5, 9)
    assert DecoderParams(8, weight_buffer=2**20).weight_buffer == 2**20


def test_parameters_from_json_are_checked():
    good = DecoderParams(8, 4, delimiters=(3,))
    assert DecoderParams.from_json(good.to_json()) == good
    with pytest.raises(ValueError, match=r"^decoder parameters must be a JSON object, not list$"):
        DecoderParams.from_json([8])
    with pytest.raises(ValueError, match=r"^decoder parameter 'lanes' is missing$"):
        DecoderParams.from_json({"stream_bytes": 4})
    with pytest.raises(ValueError, match=r"^unknown decoder parameter 'lane'"):
        DecoderParams.from_json({"lane": 8})
    with pytest.raises(ValueError, match=r"^weight_buffer must be an integer in "):
        DecoderParams.from_json({"lanes": 8, "weight_buffer": 1e12})
    assert cycles_to_ms(300_000, 300e6) == pytest.approx(1.0)


def test_fit_recovers_overheads_from_model_points():
    truth = OVERHEADS.__class__(**{**vars(OVERHEADS), "norm": 70.0, "attention_job": 9.0})
    points = []
    for lanes, stream, pos in ((8, 8, 16), (8, 8, 900), (16, 8, 700), (8, 4, 300)):
        params = DecoderParams(lanes, stream, 2, 32)
        cycles = round(CoreTiming(SMALL, params, 10, truth).token_cycles(pos))
        points.append(Point("test-small", params, 10, pos, cycles))
    fitted = fit_overheads(points)
    assert max(abs(p.error(fitted)) for p in points) < 0.002


def test_calibration_file_checks(tmp_path):
    point = Point("test-tiny", DecoderParams(8, 8), 0, 5, 10_000)
    good = Calibration(OVERHEADS, rtl_hash(), "abc", (point,), (point,))
    path = save_calibration(good, tmp_path / "c.json")
    assert load_calibration(path).overheads == OVERHEADS
    obj = json.loads(path.read_text())
    stale = tmp_path / "stale.json"
    stale.write_text(json.dumps(obj | {"rtl_hash": "0" * 64}))
    with pytest.raises(CalibrationError, match=rf"^{re.escape(str(tmp_path))}/"
                                               r"stale\.json: calibrated on RTL 000000000000 "
                                               r"\(revision abc\), but the RTL here is "
                                               rf"{rtl_hash()[:12]}: recalibrate with "
                                               r"heteroreason calibrate$"):
        load_calibration(stale)
    missing = tmp_path / "missing.json"
    missing.write_text(json.dumps({k: v for k, v in obj.items() if k != "overheads"}))
    with pytest.raises(CalibrationError, match=rf"^{re.escape(str(tmp_path))}/"
                                               r"missing\.json: field 'overheads' is missing$"):
        load_calibration(missing)
    with pytest.raises(CalibrationError, match=rf"^{re.escape(str(tmp_path))}/"
                                               r"nope\.json: no calibration file \(run "
                                               r"heteroreason calibrate\)$"):
        load_calibration(tmp_path / "nope.json")
    broken = tmp_path / "broken.json"
    broken.write_text("{")
    with pytest.raises(CalibrationError, match=rf"^{re.escape(str(tmp_path))}/"
                                               r"broken\.json: is not valid JSON: Expecting "
                                               r"property name enclosed in double quotes at "
                                               r"column 2$"):
        load_calibration(broken)


def test_the_model_prices_the_operator_table_in_order():
    timing = CoreTiming(SMALL, DecoderParams(16, 8, 4, 256))
    names = [name for name, _, _ in timing.operators(10)]
    per_layer = [op.name for op in OPERATORS[1:-2]]
    assert names == ["embed", *per_layer * SMALL.layers, "final_norm", "lm_head"]
    assert [n for n, _, _ in timing.operators(10, keep_logits=False)] == names[:-1]


def test_the_rtl_hash_follows_code_not_documentation(tmp_path):
    import shutil

    from heteroreason.model.timing.fpga.calibration import RTL_DIR

    copy = tmp_path / "rtl"
    shutil.copytree(RTL_DIR, copy)
    assert rtl_hash(copy) == rtl_hash()
    sequencer = copy / "decoder" / "sequencer_cases.py"
    text = sequencer.read_text()
    sequencer.write_text(text.replace('"""The operators\' cases', '"""The cases', 1)
                         .replace("# the table's entries in", "# the entries in"))
    assert rtl_hash(copy) == rtl_hash()
    sequencer.write_text(text.replace("equals(i, 255)", "equals(i, 254)"))
    assert rtl_hash(copy) != rtl_hash()


def test_every_rtl_file_and_the_specification_it_imports_is_hashed():
    from heteroreason.model.timing.fpga.calibration import RTL_DIR, rtl_sources

    names = set(rtl_sources())
    assert {f"rtl/{p.relative_to(RTL_DIR).as_posix()}" for p in RTL_DIR.rglob("*.py")} <= names
    # the tables and encodings the RTL reads, found through its imports
    assert {"model/spec/protocol.py", "model/spec/numerics/qwen2_int8.py"} <= names
    assert not any(n.startswith("model/spec/golden") for n in names)


@pytest.mark.parametrize("edit", ["control", "new file", "specification"])
def test_the_rtl_hash_moves_with_any_rtl_file(tmp_path, edit):
    """A code change anywhere the RTL's behaviour comes from moves the hash: the control RTL
    (not only the decoder's), a file added under ``rtl/``, the specification it imports."""
    import shutil

    from heteroreason.model.timing.fpga.calibration import RTL_DIR, SPEC_DIR

    rtl, spec = tmp_path / "rtl", tmp_path / "spec"
    shutil.copytree(RTL_DIR, rtl)
    shutil.copytree(SPEC_DIR, spec)
    before = rtl_hash(rtl, spec)
    assert before == rtl_hash()
    if edit == "control":
        kvmu = rtl / "kvmu.py"
        kvmu.write_text(kvmu.read_text().replace("Error.WRITE_AT_CAPACITY",
                                                 "Error.INIT_BEYOND_CAPACITY", 1))
    elif edit == "new file":
        (rtl / "decoder" / "extra.py").write_text("LATENCY = 2\n")
    else:
        protocol = spec / "protocol.py"
        protocol.write_text(protocol.read_text().replace("ROLLBACK = 3", "ROLLBACK = 4"))
    assert rtl_hash(rtl, spec) != before


def test_a_batch_of_one_is_an_ingest_token():
    timing = CoreTiming(SMALL, DecoderParams(16, 8, 4, 256, vector_width=8), 64)
    for position in (0, 37, 900):
        assert timing.batch_cycles(position, 1) == timing.token_cycles(position,
                                                                      keep_logits=False)


def test_a_stream_bound_batch_costs_its_weights_once():
    """With a slow stream and a big buffer, a pass costs its stream beats over the rate, batch
    or not: a batch of 4 adds only three embedding rows (the naive count: the weight image's
    beats, the LM head's left out), so each token costs about a quarter."""
    params = DecoderParams(16, 8, 4, 65536, vector_width=8, ingest_batch=4)
    rate = 0.05
    slow = CoreTiming(SMALL, params, 64, stream_beats_per_cycle=rate)
    one, four = slow.batch_cycles(0, 1), slow.batch_cycles(0, 4)
    beats_one = slow.weight_stream_beats(keep_logits=False)
    assert slow.weight_stream_beats(keep_logits=False, batch=4) == \
        beats_one + 3 * slow.embed_row_beats * params.ratio
    assert one == pytest.approx(beats_one / rate, rel=0.01)
    assert four == pytest.approx((beats_one + 3 * slow.embed_row_beats) / rate, rel=0.01)
    assert 3.9 < 4 * one / four < 4.0


def test_a_compute_bound_batch_pays_every_tokens_operators():
    """With a stream far faster than the operators, the batch pays each token's norms, RoPE,
    KV writes and attention (the later tokens' attention one row longer each: causal within
    the batch), its vector loads, and two more cycles of the unit's pipeline per operator; the
    SiLU table and the weight beats once."""
    params = DecoderParams(32, 32, 4, 4096, vector_width=1, ingest_batch=2)
    timing = CoreTiming(SMALL, params)
    position = 200
    one, two = timing.batch_cycles(position, 1), timing.batch_cycles(position, 2)
    second = timing.operators(position + 1, keep_logits=False)
    per_token = sum(cycles for name, cycles, _ in second if name != "silu_table")
    matvecs = sum(1 for _, _, beats in second if beats)
    assert matvecs == 7 * SMALL.layers
    # and the second embedding row before the first operator can start (the unit's pipeline
    # is as long for one token as for two: it is built for two)
    assert two - one == pytest.approx(per_token + timing.embed_row_beats)
    # the later the tokens, the longer their attention
    assert timing.batch_cycles(900, 2) - timing.batch_cycles(900, 1) > two - one


def test_a_batch_is_checked():
    timing = CoreTiming(SMALL, DecoderParams(16, 8, 4, 256, ingest_batch=4))
    for bad in (0, -1, 1.0, True, 5):
        with pytest.raises(ValueError, match=rf"^batch must be an integer in \[1, 4\] \(the "
                                             rf"design's ingest_batch\), not "
                                             rf"{re.escape(repr(bad))}$"):
            timing.batch_cycles(0, bad)
    last = SMALL.max_context - 4
    with pytest.raises(ValueError, match=rf"^position must be an integer in \[0, {last:,}\] "
                                         rf"\(the model's context less the batch of 4\), "
                                         rf"not {last + 1}$"):
        timing.batch_cycles(last + 1, 4)
    assert timing.batch_cycles(last, 4) > 0
