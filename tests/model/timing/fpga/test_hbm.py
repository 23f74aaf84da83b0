"""The boards' HBM: pseudo-channels, ports, and the plan that splits the decoder's streams."""

import itertools
import math

import pytest

from heteroreason.model.spec.numerics.qwen2_config import qwen2_config
from heteroreason.model.timing.fpga.calibration import CALIBRATION_FILE, load_calibration
from heteroreason.model.timing.fpga.core_cycles import CoreTiming
from heteroreason.model.timing.fpga.hbm import (
    HBM_SPECS,
    U280_HBM,
    V80_HBM,
    HbmError,
    HbmSpec,
    param_beat_bytes,
    plan_memory,
    plan_stream,
    roofline_bytes_per_s,
    weight_ceiling_bytes_per_s,
)
from heteroreason.model.timing.fpga.platform import BOARDS, FpgaBoard, design_for, memory_plan
from heteroreason.rtl.decoder.params import DecoderParams
from heteroreason.rtl.decoder.weight_schedule import slice_bytes

Q05 = qwen2_config("qwen2.5-0.5b")


def test_the_u280_figures_of_the_data_sheet_and_the_issue():
    assert U280_HBM.peak_bytes_per_s == pytest.approx(460e9)
    assert U280_HBM.achievable_bytes_per_s == pytest.approx(425e9)
    # 256-bit ports at 300 MHz: 9.6 GB/s a pseudo-channel, about 307 GB/s for the board
    assert U280_HBM.port_bytes_per_s(256, 300e6) == pytest.approx(9.6e9)
    assert 32 * U280_HBM.port_bytes_per_s(256, 300e6) == pytest.approx(307.2e9)
    # 512-bit ports reach the pseudo-channel's achievable rate
    assert roofline_bytes_per_s(U280_HBM, 300e6) == pytest.approx(425e9)
    assert V80_HBM.peak_bytes_per_s == pytest.approx(819e9)
    assert set(HBM_SPECS) == {"u280-hbm2", "v80-hbm2e"}


@pytest.mark.parametrize("beat,ports", [(896, 21), (896, 28), (64, 2), (8, 1), (7, 7),
                                        (1000, 27)])
def test_slices_cover_the_beat_as_evenly_as_bytes_allow(beat, ports):
    s = slice_bytes(beat, ports)
    assert len(s) == ports and sum(s) == beat
    assert max(s) - min(s) <= 1 and list(s) == sorted(s, reverse=True)
    assert max(s) == math.ceil(beat / ports)


@pytest.mark.parametrize("ports", [0, 9, -1, True, 2.0])
def test_slices_refuse_a_port_count_the_beat_cannot_have(ports):
    with pytest.raises(ValueError, match=r"ports must be an integer in \[1, 8\]"):
        slice_bytes(8, ports)


def _naive_plan(hbm, beat, clock, max_ports):
    """From the spec: every (width, ports) split, its rate (a slice wider than its port takes
    several of the port's beats); the fewest full-rate ports of the native width, else of a
    wider one, else the best rate."""
    options = []
    for w_index, width in enumerate(hbm.port_bits):
        for ports in range(1, max_ports + 1):
            largest = -(-beat // ports)
            if ports > beat:
                continue
            port_clock = hbm.port_clock_hz or clock  # the ports' own clock, if they have one
            per_port = min(width / 8 * port_clock, hbm.channel_bytes_per_s * hbm.efficiency
                           / hbm.ports_per_channel)
            options.append((w_index, ports, width, min(1.0, per_port / (largest * clock))))
    full = [o for o in options if o[3] >= 1.0]
    if full:
        return min(full)[1:]
    best = max(o[3] for o in options)
    return min(o for o in options if o[3] > best - 1e-12)[1:]


@pytest.mark.parametrize("hbm,beat,clock,max_ports", list(itertools.product(
    (U280_HBM, V80_HBM), (8, 64, 448, 896, 1792, 2688), (200e6, 300e6, 450e6), (1, 7, 27, 61))))
def test_a_stream_plan_is_the_fewest_ports_at_full_rate_native_first(hbm, beat, clock,
                                                                     max_ports):
    plan = plan_stream(hbm, "weights", beat, clock, max_ports)
    ports, width, rate = _naive_plan(hbm, beat, clock, max_ports)
    assert (plan.ports, plan.port_bits) == (ports, width)
    assert plan.beats_per_cycle == pytest.approx(rate)
    assert plan.clock_crossing == (width != hbm.port_bits[0] or hbm.port_clock_hz is not None)
    assert plan.bytes_per_s == pytest.approx(rate * beat * clock)


def test_the_u280_at_300_mhz_needs_width_converters_for_the_896_byte_stream():
    plan = plan_memory(U280_HBM, 300e6, 896, kv_row_bytes=64)
    assert [s.stream for s in plan.streams] == ["params", "kv_rows", "weights"]
    # the key and value rows share two ports: a 64-byte row a cycle is 19.2 GB/s
    assert (plan.stream("kv_rows").ports, plan.stream("kv_rows").port_bits) == (2, 256)
    weights = plan.stream("weights")
    # the 29 ports left carry it natively (28 x 32 B = 896 B)
    assert weights.beats_per_cycle == 1.0 and not weights.clock_crossing
    assert weights.port_bits == 256 and weights.ports == 28
    assert plan.ports_used == 31
    # with the narrow streams on 29 ports, only 512-bit ones carry it
    crowded = plan_memory(U280_HBM, 300e6, 896, kv_row_bytes=64, param_width=16)
    assert crowded.stream("weights").clock_crossing
    # without the KV cache in memory, 28 native ports carry it
    on_chip = plan_memory(U280_HBM, 300e6, 896).stream("weights")
    assert (on_chip.ports, on_chip.port_bits, on_chip.clock_crossing) == (28, 256, False)


def test_wide_parameter_beats_take_ports_from_the_weights():
    """16 entries of 69 bits, 138 B a beat: the fewest ports that carry it are four 512-bit ones
    (35 B each; five native ones would do too), where one carried a 9-byte beat, so the
    weights' ceiling loses three ports; 32 entries (276 B, seven ports) leave the 896-byte
    stream 21 ports, below a beat a cycle at 300 MHz."""
    plan = plan_memory(U280_HBM, 300e6, 896, kv_row_bytes=64, param_width=16)
    params = plan.stream("params")
    assert (params.beat_bytes, params.ports, params.port_bits) == (138, 4, 512)
    assert plan.weight_beats_per_cycle == 1.0 and plan.ports_used == 27
    per_port = U280_HBM.port_bytes_per_s(512, 300e6)
    assert weight_ceiling_bytes_per_s(U280_HBM, 300e6, kv_row_bytes=64, param_width=16) == \
        pytest.approx(26 * per_port)
    widest = plan_memory(U280_HBM, 300e6, 1792, kv_row_bytes=64, param_width=32)
    assert widest.stream("params").ports == 7 and widest.stream("weights").ports == 23
    assert widest.weight_beats_per_cycle == pytest.approx(per_port / (78 * 300e6))
    with pytest.raises(HbmError, match="param_width must be a positive integer, not 0"):
        plan_memory(U280_HBM, 300e6, 896, param_width=0)


def test_a_stream_wider_than_the_memory_runs_below_a_beat_a_cycle():
    plan = plan_memory(U280_HBM, 300e6, 1536, kv_row_bytes=64)
    rate = plan.weight_beats_per_cycle
    # 29 ports of 13.28 GB/s, the largest slice 53 B a cycle at 300 MHz
    assert rate == pytest.approx(425e9 / 32 / (53 * 300e6))
    assert plan.stream("weights").bytes_per_s < 425e9
    # a beat wider than every port's beat together (with the parameters on four ports, 26 are
    # left): each slice (69 B) over two 64-byte port beats through the port's width
    # converter; the channels still bind at 300 MHz
    wide = plan_memory(U280_HBM, 300e6, 1792, kv_row_bytes=64, param_width=16)
    wide = wide.stream("weights")
    assert (wide.ports, wide.port_bits, wide.slice_bytes) == (26, 512, 69)
    assert wide.beats_per_cycle == pytest.approx(425e9 / 32 / (69 * 300e6))
    assert "each slice over 2 port beats" in wide.describe()
    # where the port's width binds (a 256-bit port at 200 MHz carries 6.4 GB/s of 13.3), a
    # slice of 64 B over 32-byte port beats runs at half a beat a cycle
    only_native = HbmSpec("native", 2, 14.375e9, 0.92, 1, (256,), 0.0, 2**30, "test", "test")
    assert plan_stream(only_native, "weights", 128, 200e6, 2).beats_per_cycle == 0.5


def test_plans_refuse_what_the_board_cannot_provide():
    # a parameter beat is the core's PARAM_LAYOUT, 69 bits: 9 bytes
    assert param_beat_bytes(1) == 9 and param_beat_bytes(16) == 138
    tiny = HbmSpec("tiny", 2, 1e9, 1.0, 1, (128,), 0.0, 2**30, "test", "test")
    with pytest.raises(HbmError, match="weights: no HBM port left for it"):
        plan_memory(tiny, 100e6, 8, kv_row_bytes=8)
    with pytest.raises(HbmError, match="kv_rows: tiny cannot sustain its 32-byte beat a cycle "
                                       "at 100 MHz on 1 port"):
        plan_memory(tiny, 100e6, 8, kv_row_bytes=32)
    slow = HbmSpec("slow", 2, 0.4e9, 1.0, 1, (128,), 0.0, 2**30, "test", "test")
    with pytest.raises(HbmError, match="params: slow cannot sustain its 9-byte beat a cycle at "
                                       "100 MHz on 2 port"):
        plan_memory(slow, 100e6, 8)
    with pytest.raises(HbmError, match="port width 256 bits is not offered; the widths are 128"):
        tiny.port_bytes_per_s(256, 100e6)
    with pytest.raises(HbmError, match="beat_bytes must be a positive integer"):
        plan_memory(U280_HBM, 300e6, 0)
    with pytest.raises(HbmError, match="clock_hz must be positive"):
        plan_memory(U280_HBM, 0.0, 896)
    with pytest.raises(HbmError, match="kv_row_bytes must be a non-negative integer"):
        plan_memory(U280_HBM, 300e6, 896, kv_row_bytes=-1)
    with pytest.raises(KeyError, match="no stream 'x' in the plan"):
        plan_memory(U280_HBM, 300e6, 896).stream("x")


@pytest.mark.parametrize("field,value,match", [
    ("pseudo_channels", 0, "pseudo_channels must be a positive integer"),
    ("ports_per_channel", 1.5, "ports_per_channel must be a positive integer"),
    ("efficiency", 1.2, "efficiency in"),
    ("port_bits", (256, 12), "port_bits must be positive multiples of 8"),
    ("port_bits", (), "port_bits must be positive multiples of 8"),
])
def test_a_spec_with_an_impossible_field_is_refused(field, value, match):
    fields = dict(name="bad", pseudo_channels=4, channel_bytes_per_s=1e9, efficiency=0.9,
                  ports_per_channel=1, port_bits=(256,), read_latency_s=0.0,
                  capacity_bytes=2**30, source="s", efficiency_source="s")
    fields[field] = value
    with pytest.raises(HbmError, match=match):
        HbmSpec(**fields)


def test_every_boards_design_streams_near_its_weight_ceiling():
    """Each board's design time-shares its ports: the weights take every port and sustain at
    least 95 % of what all of them carry; the parameters and the KV rows are on the same
    ports. On ports of their own (the dedicated plan) the narrow streams would leave the
    weights fewer ports, and the weights would sustain at most the ceiling of those."""
    for name, board in BOARDS.items():
        params = design_for(Q05, board)
        plan = memory_plan(Q05, board, params)
        assert plan.shared and plan.ports_used == board.hbm.ports
        weights = plan.stream("weights")
        assert weights.ports == board.hbm.ports
        roofline = roofline_bytes_per_s(board.hbm, board.clock_hz)
        assert 0.95 * roofline <= weights.bytes_per_s <= roofline * 1.000001, name
        assert plan.stream("params").shared and plan.stream("kv_rows").shared
        assert board.usable_bandwidth_bytes_per_s == roofline
        dedicated = memory_plan(Q05, board, params, shared=False)
        ceiling = weight_ceiling_bytes_per_s(board.hbm, board.clock_hz,
                                             kv_row_bytes=64 * params.kv_rows,
                                             param_width=params.param_width)
        assert dedicated.stream("weights").bytes_per_s <= ceiling * 1.000001 < roofline


def test_the_timing_model_slows_with_the_streams_rate_where_it_is_stream_bound():
    overheads = load_calibration(CALIBRATION_FILE).overheads
    # one stream byte a cycle behind a 16-lane unit: the stream sets the pace
    params = DecoderParams(16, 8, heads_parallel=2, weight_buffer=64)
    config = qwen2_config("test-tiny")
    cycles = [CoreTiming(config, params, 64, overheads, stream_beats_per_cycle=r)
              .token_cycles(100) for r in (0.25, 0.5, 0.75, 1.0)]
    assert cycles == sorted(cycles, reverse=True)
    assert CoreTiming(config, params, 64, overheads).token_cycles(100) == cycles[-1]
    beats = CoreTiming(config, params, 64, overheads).weight_stream_beats()
    # at a quarter of a beat a cycle the stream alone takes four cycles a beat
    assert cycles[0] >= 4 * beats
    for rate in (0, 1.5, True, "1"):
        with pytest.raises(ValueError, match=r"stream_beats_per_cycle must be a finite number "
                                             r"in \(0, 1\]"):
            CoreTiming(config, params, 64, overheads, stream_beats_per_cycle=rate)


def test_the_design_search_keeps_to_the_ports_it_has():
    # 16 ports of 256 bits: time-shared, the weights at most 16 x 32 = 512 B a cycle whatever
    # their beat; on ports of their own, params 1, the key and value rows 2 (a row a cycle)
    # or more, the weights at most 13 x 32 = 416 B a cycle
    small = HbmSpec("small", 16, 10e9, 1.0, 1, (256,), 300e-9, 8 * 2**30, "test", "test")
    board = FpgaBoard("small-300", 300e6, small, BOARDS["u280-300"].resources, 60.0, "test")
    params = design_for(Q05, board)
    plan = memory_plan(Q05, board, params)
    weights = plan.stream("weights")
    assert weights.ports <= 16 and plan.ports_used <= 16
    assert weights.bytes_per_s <= 16 * 32 * 300e6 * 1.000001
    dedicated = memory_plan(Q05, board, params, shared=False).stream("weights")
    assert dedicated.ports <= 13
    assert dedicated.bytes_per_s <= 13 * 32 * 300e6 * 1.000001


def test_the_time_shared_plan_puts_every_stream_on_every_port():
    plan = plan_memory(U280_HBM, 300e6, 1792, kv_row_bytes=256, param_width=32, shared=True)
    assert plan.shared and [s.stream for s in plan.streams] == ["params", "kv_rows", "weights"]
    weights = plan.stream("weights")
    # 32 ports of 512 bits, 56 B each: every pseudo-channel's achievable 13.28 GB/s
    assert (weights.ports, weights.port_bits, weights.slice_bytes) == (32, 512, 56)
    assert weights.bytes_per_s == pytest.approx(425e9)
    assert weights.beats_per_cycle == pytest.approx(425e9 / (1792 * 300e6))
    kv = plan.stream("kv_rows")
    assert kv.shared and kv.ports == 32 and kv.beats_per_cycle == 1.0
    assert "time-shared on the weights' ports" in kv.describe()
    assert plan.ports_used == 32 and "(32 of 32 ports)" in plan.describe()
    # the dedicated plan of the same streams: the rows take six ports, the parameters seven
    dedicated = plan_memory(U280_HBM, 300e6, 1792, kv_row_bytes=256, param_width=32)
    assert dedicated.stream("kv_rows").ports == 6 and dedicated.stream("weights").ports < 32


def test_a_time_shared_stream_the_ports_cannot_carry_is_refused():
    """More KV rows a cycle than all the ports carry: the stream, the need and the limit."""
    with pytest.raises(HbmError, match=r"^kv_rows: u280-hbm2 cannot sustain its 65536-byte beat "
                                       r"a cycle at 300 MHz on all 32 ports: it needs 19660\.8 "
                                       r"GB/s, they carry at most 425\.0 GB/s$"):
        plan_memory(U280_HBM, 300e6, 1792, kv_row_bytes=64 * 1024, shared=True)
    with pytest.raises(HbmError, match=r"^kv_rows: u280-hbm2 cannot sustain its 65536-byte beat "
                                       r"a cycle at 300 MHz on 31 port\(s\): it needs 19660\.8 "
                                       r"GB/s, they carry at most"):
        plan_memory(U280_HBM, 300e6, 1792, kv_row_bytes=64 * 1024)


def test_the_v80_reaches_its_hbm_as_pg313_allows():
    """256-bit HBM master units at most (512 refused), on a 400 MHz NoC-side clock: a port
    carries 12.8 GB/s, more than its 11.8 GB/s share of a pseudo-channel, so the 64 ports
    reach the HBM's achievable 757 GB/s at any kernel clock."""
    assert V80_HBM.port_bits == (256,) and V80_HBM.port_clock_hz == 400e6
    with pytest.raises(HbmError, match="port width 512 bits is not offered; the widths are 256"):
        V80_HBM.port_bytes_per_s(512, 300e6)
    share = 819e9 / 32 * (425 / 460) / 2
    for clock in (200e6, 250e6, 300e6):
        assert V80_HBM.port_bytes_per_s(256, clock) == pytest.approx(share)
        assert roofline_bytes_per_s(V80_HBM, clock) == pytest.approx(64 * share)
    plan = plan_memory(V80_HBM, 300e6, 3584, kv_row_bytes=256, param_width=32, shared=True)
    weights = plan.stream("weights")
    assert (weights.ports, weights.port_bits) == (64, 256) and weights.clock_crossing
    assert "asynchronous crossing to a 400 MHz port clock" in weights.describe()
    assert weights.bytes_per_s == pytest.approx(64 * share)


def test_the_weight_ceiling_is_the_ports_the_narrow_streams_leave():
    per_port = 425e9 / 32  # a 512-bit port at 300 MHz reaches its channel's achievable rate
    assert weight_ceiling_bytes_per_s(U280_HBM, 300e6, kv_row_bytes=64) == \
        pytest.approx(29 * per_port)  # params 1, the key and value rows 2
    assert weight_ceiling_bytes_per_s(U280_HBM, 300e6) == pytest.approx(31 * per_port)
    # at 200 MHz the ports, not the channels, set it; a 512-bit port carries a 64-byte KV row
    # a cycle there, so the key and value rows take one
    assert weight_ceiling_bytes_per_s(U280_HBM, 200e6, kv_row_bytes=64) == \
        pytest.approx(30 * 64 * 200e6)
