"""A pass drafting for several contexts (issue 43's engine, estimated with the timing model):
one context is a token, the order of the contexts does not matter, a pass costs at least its
longest token and at most its tokens one after the other, and it is checked."""

from __future__ import annotations

import itertools
import random
import re

import pytest

from heteroreason.model.spec.numerics.qwen2_config import qwen2_config
from heteroreason.model.timing.fpga.core_cycles import CoreTiming
from heteroreason.model.timing.fpga.passes import PassCost, contexts_pass_ms, pass_costs
from heteroreason.model.timing.fpga.platform import draft_ms_per_token
from heteroreason.rtl.decoder.params import DecoderParams

SMALL = qwen2_config("test-small")
SEED = 20261205


def _timing(batch=4, rate=None):
    params = DecoderParams(16, 8, 4, 512, vector_width=8, ingest_batch=batch)
    return CoreTiming(SMALL, params, 64, stream_beats_per_cycle=rate) if rate else \
        CoreTiming(SMALL, params, 64)


@pytest.mark.parametrize("position", [0, 37, 900])
def test_one_context_a_pass_is_a_token(position):
    timing = _timing()
    assert timing.contexts_pass_cycles([position]) == timing.token_cycles(position)


@pytest.mark.parametrize("rate", [None, 0.05])
def test_a_pass_lies_between_its_longest_token_and_its_tokens_in_turn(rate):
    rng = random.Random(SEED)
    timing = _timing(rate=rate)
    for _ in range(10):
        positions = [rng.randrange(SMALL.max_context) for _ in range(rng.randint(2, 4))]
        tokens = [timing.token_cycles(p) for p in positions]
        cost = timing.contexts_pass_cycles(positions)
        assert max(tokens) < cost < sum(tokens), (f"seed {SEED}", positions)
        # the order of the contexts in the pass does not change its cost
        for order in itertools.permutations(positions):
            assert timing.contexts_pass_cycles(order) == pytest.approx(cost, rel=1e-12)


def test_a_pass_is_checked():
    timing = _timing(batch=2)
    with pytest.raises(ValueError, match=re.escape("contexts a pass must be an integer in "
                                                   "[1, 2] (the design's ingest_batch), not 3")):
        timing.contexts_pass_cycles([0, 1, 2])
    with pytest.raises(ValueError, match=re.escape("contexts a pass must be an integer in [1, 2]"
                                                   " (the design's ingest_batch), not 0")):
        timing.contexts_pass_cycles([])
    last = SMALL.max_context - 1
    with pytest.raises(ValueError, match=re.escape(f"position of context 1 must be an integer "
                                                   f"in [0, {last:,}]")):
        timing.contexts_pass_cycles([0, last + 1])


def test_the_boards_passes_against_their_tokens():
    (one, four) = pass_costs("qwen2.5-0.5b", ["u280-300"], [1, 4], [1024])
    assert one.ratio == pytest.approx(1.0)
    assert one.token_ms == draft_ms_per_token("qwen2.5-0.5b", "u280-300", 1024)
    # four drafts a pass: more than one token's time, less than four tokens'
    assert 1.0 < four.ratio < 4.0 and four.tokens_per_s > one.tokens_per_s
    assert four.pass_ms == contexts_pass_ms("qwen2.5-0.5b", "u280-300", [1024] * 4)
    assert PassCost("b", 2, 0, 3.0, 2.0).ratio == 1.5
    # against one context a pass on the design built for four (half the MACs: SLR0's DSPs)
    assert four.same_design_token_ms == contexts_pass_ms("qwen2.5-0.5b", "u280-300", [1024],
                                                         per_pass=4)
    assert one.same_design_ratio == pytest.approx(1.0)
    assert four.same_design_token_ms > one.token_ms and 1.0 < four.same_design_ratio < 1.5
    assert PassCost("b", 2, 0, 3.0, 2.0, 2.5).same_design_ratio == 1.2
    with pytest.raises(ValueError, match=r"contexts a pass must be an integer in \[1, 8\]"):
        contexts_pass_ms("qwen2.5-0.5b", "u280-300", [0] * 9)


def test_a_pass_without_samples_has_no_lm_head_and_each_further_sample_costs_a_cycle():
    timing = _timing()
    positions = [3, 700, 41]
    assert timing.contexts_pass_cycles(positions, samples=0) == timing._pass_cycles(
        tuple(positions), keep_logits=False)
    full = timing.contexts_pass_cycles(positions)
    for kept in (1, 2):
        assert timing.contexts_pass_cycles(positions, samples=kept) == full - (3 - kept)
    with pytest.raises(ValueError, match=re.escape("samples must be an integer in [0, 3] (the "
                                                   "pass's tokens), not 4")):
        timing.contexts_pass_cycles(positions, samples=4)


def test_the_contexts_parameter_is_checked():
    with pytest.raises(ValueError, match=re.escape("contexts=4 needs ingest_batch of 2 or more "
                                                   "(a pass of tokens from several contexts), "
                                                   "not 1")):
        DecoderParams(16, contexts=4)
    with pytest.raises(ValueError, match=re.escape("contexts must be an integer in [1, 1,024] "
                                                   "(KV regions, problems resident), not 0")):
        DecoderParams(16, ingest_batch=2, contexts=0)
    assert DecoderParams(16, ingest_batch=2, contexts=16).contexts == 16
    assert DecoderParams.from_json({"lanes": 16}).contexts == 1
