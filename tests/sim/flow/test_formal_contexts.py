"""SymbiYosys proof that the multi-context KVMU keeps its contexts apart, and a broken variant
(an id decoder that ignores the id's top bit) that it must catch."""

import pytest

from heteroreason.rtl.compare import equals
from heteroreason.rtl.multi_kvmu import MultiKvmu
from heteroreason.sim.flow.formal_contexts import prove_contexts


@pytest.mark.parametrize(("contexts", "capacity"),
                         [(3, 6), pytest.param(4, 6, marks=pytest.mark.slow)])
def test_contexts_are_proven_isolated(contexts, capacity):
    result = prove_contexts(contexts=contexts, capacity=capacity, depth=12, mode="prove",
                            work_dir=f"build/formal/multi_kvmu-{contexts}-{capacity}")
    assert result.passed, result.log[-3000:]
    assert "successful proof by k-induction" in result.log


class AliasingIds(MultiKvmu):
    """Decodes a context id without its top bit: id 2 of 3 also reaches context 0."""

    def _routes(self, ctx, i):
        return equals(ctx[:-1], i & ((1 << (len(ctx) - 1)) - 1))


def test_aliasing_ids_are_caught():
    result = prove_contexts(AliasingIds(contexts=3, capacity=6), depth=8, mode="bmc",
                            work_dir="build/formal/multi_kvmu-broken")
    assert not result.passed
    assert "isolation: another context's event changed it" in result.failed_properties()


def test_bad_arguments():
    with pytest.raises(ValueError, match=r"^mode must be 'prove' or 'bmc', not 'cover'$"):
        prove_contexts(mode="cover")
    with pytest.raises(ValueError, match=r"^depth must be a positive integer, not 0$"):
        prove_contexts(depth=0)
