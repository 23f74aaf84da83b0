"""The whole-model weight schedule: regions reproduce the quantized model, in consumption order."""

import numpy as np
import pytest

from heteroreason.model.spec.numerics.qwen2_config import qwen2_config
from heteroreason.model.spec.numerics.qwen2_float import random_weights
from heteroreason.model.spec.numerics.qwen2_int8 import activation_scales, quantize
from heteroreason.rtl.decoder.decode_schedule import decode_schedule


@pytest.fixture(scope="module")
def model():
    weights = random_weights(qwen2_config("test-tiny"), seed=1)
    return quantize(weights, activation_scales(weights, seed=2, sequences=1, length=32))


@pytest.mark.parametrize("lanes", [8, 16])
def test_regions_reproduce_the_model(model, lanes):
    sched = decode_schedule(model, lanes=lanes)
    c = model.config
    q = sched.regions["layer1.q_proj"]
    rows = sched.weight_image[q.start:q.start + q.count].reshape(c.q_dim, -1)
    np.testing.assert_array_equal(rows[:, :c.hidden], model.layers[1].q_w)
    params = sched.regions["layer1.q_proj.params"]
    np.testing.assert_array_equal(
        sched.param_image[params.start:params.start + params.count, 0, 0], model.layers[1].q_b)
    down = sched.regions["layer0.down_proj"]
    rows = sched.weight_image[down.start:down.start + down.count].reshape(c.hidden, -1)
    np.testing.assert_array_equal(rows[:, :c.ffn], model.layers[0].down_w)
    token = 77
    embed_row = sched.token_regions(token, keep_logits=True)[0]
    got = sched.weight_image[embed_row.start:embed_row.start + embed_row.count].ravel()
    np.testing.assert_array_equal(got, model.embed_q[token])


def test_order_and_counts(model):
    sched = decode_schedule(model, lanes=8)
    names = [r.name for r in sched.token_regions(3, keep_logits=True)]
    assert names[:4] == ["embed_row", "embed_row_param", "layer0.norm1", "layer0.q_proj"]
    assert names.index("layer0.norm2") < names.index("layer0.gate_proj")
    assert names[-3:] == ["final_norm", "lm_head", "lm_head.params"]
    c = model.config
    per_layer = (c.q_dim + 2 * c.kv_dim + c.hidden + 2 * c.ffn) * c.hidden + c.hidden * c.ffn
    assert sched.weight_beats_per_token(keep_logits=True) * 8 == \
        c.layers * per_layer + c.hidden + c.vocab * c.hidden
    assert sched.weight_beats_per_token(keep_logits=False) * 8 == c.layers * per_layer + c.hidden


@pytest.mark.parametrize("param_width", [2, 8])
def test_parameter_beats_of_several_entries(model, param_width):
    """A norm's gains fill a beat, channel ``b * param_width + e`` in entry ``e`` of beat ``b``;
    every other region's entry is a beat's first, the rest zeros; the regions keep their
    order."""
    narrow = decode_schedule(model, lanes=8)
    wide = decode_schedule(model, lanes=8, param_width=param_width)
    assert wide.param_width == param_width and narrow.param_width == 1
    np.testing.assert_array_equal(wide.weight_image, narrow.weight_image)
    c = model.config
    for name, region in narrow.regions.items():
        if region.kind == "weights":
            continue
        got = wide.regions[name]
        entries = narrow.param_image[region.start:region.start + region.count, 0]
        beats = wide.param_image[got.start:got.start + got.count]
        if "norm" in name:  # norm1, norm2, final_norm: the gains, packed
            assert got.count * param_width == region.count == c.hidden
            np.testing.assert_array_equal(beats.reshape(-1, 3), entries)
        else:
            assert got.count == region.count
            np.testing.assert_array_equal(beats[:, 0], entries)
            assert not beats[:, 1:].any()
    assert [r.name for r in wide.token_regions(3, keep_logits=True)] == \
        [r.name for r in narrow.token_regions(3, keep_logits=True)]
    assert narrow.param_beats_per_token() - wide.param_beats_per_token() == \
        (2 * c.layers + 1) * (c.hidden - c.hidden // param_width)


@pytest.mark.parametrize("lanes, rows_per_beat", [(16, 2), (8, 4), (64, 2)])
def test_beats_of_several_rows(model, lanes, rows_per_beat):
    """A weight beat holds ``rows_per_beat`` rows side by side: byte ``j * lanes + e`` of beat
    ``g * beats + b`` is ``W[g * rows_per_beat + j, b * lanes + e]`` (zero past the columns); a
    matrix's parameter beat holds its group's row parameters in its first entries; an
    embedding row fills whole beats, zero-padded. Checked element by element."""
    c, r = model.config, rows_per_beat
    sched = decode_schedule(model, lanes=lanes, param_width=4, rows_per_beat=r)
    assert sched.beat_bytes == lanes * r and sched.rows_per_beat == r
    ql = model.layers[1]
    for name, w, bias, req in (("layer1.q_proj", ql.q_w, ql.q_b, ql.q_req),
                               ("layer1.down_proj", ql.down_w, None, ql.down_req)):
        region = sched.regions[name]
        image = sched.weight_image[region.start:region.start + region.count]
        rows, cols = w.shape
        beats = -(-cols // lanes)
        assert region.count == rows // r * beats
        for row in range(rows):
            for col in range(beats * lanes):
                got = image[row // r * beats + col // lanes, row % r * lanes + col % lanes]
                assert got == (w[row, col] if col < cols else 0), (name, row, col)
        params = sched.regions[name + ".params"]
        beats_p = sched.param_image[params.start:params.start + params.count]
        assert params.count == rows // r
        mult = np.broadcast_to(np.asarray(req[0]), (rows,))
        for row in range(rows):
            assert beats_p[row // r, row % r, 0] == (0 if bias is None else bias[row])
            assert beats_p[row // r, row % r, 1] == mult[row]
        assert not beats_p[:, r:].any()
    token = 77
    row = sched.token_regions(token, keep_logits=True)[0]
    assert row.count == sched.embed_row_beats == -(-c.hidden // (lanes * r))
    got = sched.weight_image[row.start:row.start + row.count].ravel()
    np.testing.assert_array_equal(got[:c.hidden], model.embed_q[token])
    assert not got[c.hidden:].any()
    assert sched.stream_image(lanes).shape == (len(sched.weight_image) * r, lanes)


def test_bad_arguments(model):
    with pytest.raises(ValueError, match=r"^lanes \(24\) must divide the hidden size \(64\) so "
                                         r"that embedding rows stream whole$"):
        decode_schedule(model, lanes=24)
    with pytest.raises(ValueError, match=r"^lanes must be a positive integer, not 0$"):
        decode_schedule(model, lanes=0)
    with pytest.raises(ValueError, match=r"^param_width must be a positive integer that divides "
                                         r"the hidden size \(64\), not 3$"):
        decode_schedule(model, lanes=8, param_width=3)
    with pytest.raises(ValueError, match=r"^rows_per_beat must be a positive integer that "
                                         r"divides param_width \(2\), not 4$"):
        decode_schedule(model, lanes=8, param_width=2, rows_per_beat=4)
    with pytest.raises(ValueError, match=r"^stream_bytes must be a positive integer that divides "
                                         r"a weight beat's bytes \(16\), not 12$"):
        decode_schedule(model, lanes=8, param_width=2, rows_per_beat=2).stream_image(12)
    with pytest.raises(ValueError, match=r"^token id 256 is outside the vocabulary \[0, 256\)$"):
        decode_schedule(model, lanes=8).token_regions(256, keep_logits=True)
