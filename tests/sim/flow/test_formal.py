"""SymbiYosys proof of the KVMU's invariants, and a broken variant that it must catch."""

import pytest
from amaranth.hdl import Const

from heteroreason.rtl.kvmu import Kvmu
from heteroreason.sim.flow.formal import prove_kvmu


@pytest.mark.parametrize("capacity", [12, 16])
def test_kvmu_invariants_are_proven(capacity):
    result = prove_kvmu(capacity=capacity, depth=20, mode="prove",
                        work_dir=f"build/formal/kvmu-{capacity}")
    assert result.passed, result.log[-3000:]
    assert "successful proof by k-induction" in result.log


class KvmuWithoutInitCheck(Kvmu):
    """Takes INIT(pos) for any pos: the capacity check is gone."""

    def _init_is_legal(self, pos):
        return Const(1)


def test_broken_kvmu_is_caught():
    result = prove_kvmu(KvmuWithoutInitCheck(capacity=12), depth=20, mode="bmc",
                        work_dir="build/formal/kvmu-broken")
    assert not result.passed
    failed = result.failed_properties()
    assert "ahead <= capacity" in failed, failed
    assert "an illegal event left no error code" in failed, failed


def test_bad_arguments():
    with pytest.raises(ValueError, match=r"^mode must be 'prove' or 'bmc', not 'cover'$"):
        prove_kvmu(mode="cover")
    with pytest.raises(ValueError, match=r"^depth must be a positive integer, not 0$"):
        prove_kvmu(depth=0)
