"""The golden input MUX: selection rule and stale-sample counting."""

import pytest

from heteroreason.model.spec.golden.input_mux import GoldenInputMux, Selection, select_source
from heteroreason.model.spec.protocol import Mode


@pytest.mark.parametrize("mode, stalled, expected", [
    (Mode.INITIALIZATION, False, Selection.HOST),
    (Mode.ROLLBACK, True, Selection.HOST),
    (Mode.SPECULATION, False, Selection.SAMPLER),
    (Mode.ACCEPT, False, Selection.SAMPLER),
    (Mode.SPECULATION, True, Selection.NONE),
    (Mode.ACCEPT, True, Selection.NONE),
])
def test_selection_rule(mode, stalled, expected):
    assert select_source(mode, stalled=stalled) == expected


def test_flush_makes_every_sample_in_flight_stale():
    mux = GoldenInputMux(max_in_flight=4)
    mux.admit(keep_logits=True)
    mux.admit(keep_logits=False)
    mux.admit(keep_logits=True)
    assert mux.in_flight == 2
    mux.flush()
    mux.admit(keep_logits=True)   # after the flush: fresh
    assert [mux.take_sample() for _ in range(3)] == [True, True, False]
    assert mux.in_flight == 0


def test_limits_and_misuse():
    mux = GoldenInputMux(max_in_flight=1)
    mux.admit(keep_logits=True)
    assert not mux.can_admit_kept()
    with pytest.raises(AssertionError, match=r"^admitted a kept token with 1 samples already in "
                                             r"flight \(max_in_flight=1\)$"):
        mux.admit(keep_logits=True)
    mux.take_sample()
    with pytest.raises(AssertionError, match=r"^a sampler beat was taken with no sample in "
                                             r"flight$"):
        mux.take_sample()
    with pytest.raises(ValueError, match=r"^max_in_flight must be a positive integer, not 0$"):
        GoldenInputMux(max_in_flight=0)
