"""The timing model with the parameters and the KV rows time-shared on the weights' ports
(:func:`~heteroreason.model.timing.fpga.hbm.plan_memory`'s ``shared`` plan): what each operator
borrows, and what the borrowing costs a design bound by its weight stream."""

import math

import pytest

from heteroreason.model.spec.numerics.qwen2_config import qwen2_config
from heteroreason.model.timing.fpga.calibration import load_calibration
from heteroreason.model.timing.fpga.core_cycles import CoreTiming
from heteroreason.rtl.decoder.params import DecoderParams

OVERHEADS = load_calibration(check_rtl=False).overheads


def _naive_borrowed(config, params, position):
    """From the spec: a parameter entry is 69 bits (value 32, multiplier 31, shift 6); a
    matrix's row parameters come ``rows_per_beat`` to a beat, a norm's gains ``param_width``,
    the SiLU table one entry to a beat, the embedding row one; the KV write stores a K and a V
    row of each KV head; each attention job (a KV head's ``heads_parallel`` query heads) reads
    the K and V rows up to the position, in whole beats of ``kv_rows``."""
    def beats_bytes(entries, per_beat):
        return entries // per_beat * math.ceil(per_beat * 69 / 8)

    c, p = config, params
    matrices = {"q": c.q_dim, "k": c.kv_dim, "v": c.kv_dim, "o": c.hidden, "gate": c.ffn,
                "up": c.ffn, "down": c.hidden}
    per_layer = sum(beats_bytes(rows, p.rows_per_beat) for rows in matrices.values())
    per_layer += 2 * beats_bytes(c.hidden, p.param_width)  # two norms
    per_layer += beats_bytes(256, 1)  # the SiLU table
    kv = 0
    if p.external_kv:
        rows = math.ceil((position + 1) / p.kv_rows) * p.kv_rows
        kv = c.kv_heads * 2 * c.head_dim + c.heads // p.heads_parallel * 2 * rows * c.head_dim
    head = beats_bytes(c.vocab, p.rows_per_beat) + beats_bytes(c.hidden, p.param_width)
    return beats_bytes(1, 1) + c.layers * (per_layer + kv) + head


@pytest.mark.parametrize("preset, params, position", [
    ("test-tiny", DecoderParams(16, 8, heads_parallel=2, weight_buffer=64), 100),
    ("test-small", DecoderParams(32, 16, heads_parallel=2, vector_width=8, param_width=8,
                                 rows_per_beat=2, external_kv=True, kv_rows=4), 301),
    ("qwen2.5-0.5b", DecoderParams(448, 1792, heads_parallel=7, weight_buffer=4096,
                                   vector_width=32, param_width=32, rows_per_beat=4,
                                   external_kv=True, kv_rows=4), 2048),
])
def test_what_each_token_borrows_is_the_spec_s_count(preset, params, position):
    config = qwen2_config(preset)
    timing = CoreTiming(config, params, 0, OVERHEADS, shared_ports=True)
    assert sum(timing.borrowed_bytes(position)) == _naive_borrowed(config, params, position)


def test_a_stream_bound_design_pays_what_it_borrows_at_the_stream_s_rate():
    """16 lanes behind an 8-byte stream at a quarter of a beat a cycle: the weights set the
    pace, so the time-shared ports cost the borrowed bytes at the stream's rate, never more;
    what is borrowed while the weight buffer is full (the ports would idle) is free, so a
    little less (here 6 to 14 %: the long attention at position 300 fills the buffer)."""
    config = qwen2_config("test-tiny")
    params = DecoderParams(16, 8, heads_parallel=2, weight_buffer=64, external_kv=True)
    rate = 0.25
    own = CoreTiming(config, params, 20, OVERHEADS, stream_beats_per_cycle=rate)
    shared = CoreTiming(config, params, 20, OVERHEADS, stream_beats_per_cycle=rate,
                        shared_ports=True)
    for position in (10, 300):
        extra = shared.token_cycles(position) - own.token_cycles(position)
        paid = sum(shared.borrowed_bytes(position)) / params.stream_bytes / rate
        assert 0.8 * paid <= extra <= paid * 1.000001, position
    # without the KV cache in memory only the parameters are borrowed
    on_chip = DecoderParams(16, 8, heads_parallel=2, weight_buffer=64)
    a = CoreTiming(config, on_chip, 20, OVERHEADS, stream_beats_per_cycle=rate)
    b = CoreTiming(config, on_chip, 20, OVERHEADS, stream_beats_per_cycle=rate,
                   shared_ports=True)
    paid = sum(b.borrowed_bytes(300)) / 8 / rate
    assert 0.9 * paid <= b.token_cycles(300) - a.token_cycles(300) <= paid * 1.000001


def test_shared_ports_change_nothing_where_nothing_is_borrowed():
    config = qwen2_config("test-tiny")
    params = DecoderParams(16, 8, heads_parallel=2, weight_buffer=64)
    timing = CoreTiming(config, params, 20, OVERHEADS)
    assert timing._borrowed_beats((5,), keep_logits=True) == \
        [0.0] * len(timing.operators(5))
    with pytest.raises(ValueError, match=r"^shared_ports must be a bool, not 1$"):
        CoreTiming(config, params, 20, OVERHEADS, shared_ports=1)
