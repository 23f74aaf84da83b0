"""The key and value rows on one set of ports (the memory plan's ``kv_rows`` stream): the
testbench's model on its own against a port-level stand-in for the attention unit, and the
RTL's token cycles with shared ports against a set of ports each."""

import random

import pytest

from heteroreason.rtl.decoder.params import DecoderParams
from heteroreason.sim.measure.cycles import measure_token_cycles
from heteroreason.sim.verify.plan import Stimulus
from heteroreason.sim.verify.tb.hbm_channels import SharedRows

ADDR_BITS = 8
ROWS = 200


class _Signal:
    def __init__(self, value=0):
        self.value = value


class _Dut:
    """The key and value request and row ports, as cocotb handles look."""

    def __init__(self):
        for kind in ("k", "v"):
            for port in ("req", "rows"):
                for member in ("valid", "ready", "payload"):
                    setattr(self, f"{kind}_{port}__{member}", _Signal())


def _attention_jobs(jobs, *, latency, stall, seed, score_to_sum=3, limit=50_000):
    """A stand-in for the attention unit: each job of ``length`` rows at ``base`` requests its
    key and value rows in the same cycle, takes the key rows (a row a cycle when offered),
    waits ``score_to_sum`` cycles, then takes the value rows. Returns, per job, the cycles of
    the rows it took and their values ("k"/"v", address)."""
    dut, rng = _Dut(), random.Random(seed)
    keys = {a: ("k", a) for a in range(ROWS)}
    values = {a: ("v", a) for a in range(ROWS)}
    rows = SharedRows(dut, keys, values, addr_bits=ADDR_BITS, rows=ROWS, rng=rng,
                      latency=latency, stall=stall)
    log, cycle = [], 0
    for base, length in jobs:
        taken, phase, requested, wait = [], "request", False, score_to_sum
        while phase != "done":
            if cycle > limit:
                raise AssertionError(f"stuck in job ({base}, {length}) at {phase}: {rows!r}")
            rows.drive(cycle)
            for kind in ("k", "v"):
                getattr(dut, f"{kind}_req__valid").value = int(phase == "request")
                getattr(dut, f"{kind}_req__payload").value = base | length << ADDR_BITS
                getattr(dut, f"{kind}_rows__ready").value = int(phase == kind)
            for kind in ("k", "v"):
                if phase == kind and getattr(dut, f"{kind}_rows__valid").value:
                    taken.append((cycle, getattr(dut, f"{kind}_rows__payload").value))
            rows.observe(cycle)
            if phase == "request":
                phase, requested = "k", True
            elif phase == "k" and len(taken) == length:
                phase = "wait"
            elif phase == "wait":
                wait -= 1
                phase = "v" if wait == 0 else "wait"
            elif phase == "v" and len(taken) == 2 * length:
                phase = "done"
            cycle += 1
        assert requested
        log.append(taken)
    assert not rows.busy, f"rows left unserved: {rows!r}"
    return log


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_shared_rows_serve_keys_then_values_in_request_order(seed):
    jobs = [(0, 5), (40, 12), (100, 1), (7, 30)]
    log = _attention_jobs(jobs, latency=6, stall=0.3, seed=seed)
    for (base, length), taken in zip(jobs, log, strict=True):
        served = [value for _, value in taken]
        assert served == [("k", base + t) for t in range(length)] + \
            [("v", base + t) for t in range(length)], f"seed {seed}"
        cycles = [c for c, _ in taken]
        assert cycles == sorted(cycles) and len(set(cycles)) == len(cycles)


def test_without_stalls_the_values_wait_for_no_one():
    """A row a cycle for the keys after the latency; the value rows, queued behind them,
    are all there when the weighted-sum pass starts: the pass takes one a cycle."""
    log = _attention_jobs([(10, 20)], latency=9, stall=0.0, seed=1, score_to_sum=5)
    cycles = [c for c, _ in log[0]]
    keys, values = cycles[:20], cycles[20:]
    # requested at cycle 0, taken at its end: the first row on offer 1 + 9 cycles later
    assert keys == list(range(10, 30))
    assert values == list(range(values[0], values[0] + 20))
    assert values[0] == keys[-1] + 1 + 5


def test_bad_shared_rows_arguments():
    with pytest.raises(ValueError, match=r"stall must be in \[0, 1\), not 1\.0"):
        SharedRows(_Dut(), {}, {}, addr_bits=4, rows=8, rng=random.Random(1), stall=1.0)
    with pytest.raises(ValueError, match="latency must be a non-negative integer, not -1"):
        SharedRows(_Dut(), {}, {}, addr_bits=4, rows=8, rng=random.Random(1), latency=-1)


@pytest.mark.slow
def test_the_rtl_token_takes_the_same_cycles_with_shared_kv_ports():
    """The claim the memory plan rests on: the decoder core's tokens, with the KV cache in
    memory, take exactly as many cycles with the key and value rows on one set of ports as on
    a set each (test-tiny; latency 20; contexts 5 and 90)."""
    params = DecoderParams(16, 16, heads_parallel=2, weight_buffer=64, external_kv=True,
                           vector_width=4)
    shared, apart = (measure_token_cycles("test-tiny", params, (5, 90), latency=20,
                                          shared_kv_ports=mode, cxx_opt="-O0")
                     for mode in (True, False))
    assert [t.cycles for t in shared.tokens] == [t.cycles for t in apart.tokens]
    assert shared.tokens[1].cycles > shared.tokens[0].cycles


def test_bad_stimulus_knobs():
    assert Stimulus().shared_kv_ports is True  # the memory plan's layout
    with pytest.raises(ValueError, match=r"^stimulus shared_kv_ports must be a bool, not 1$"):
        Stimulus(shared_kv_ports=1)
    with pytest.raises(ValueError, match=r"^stimulus stall must be a finite number in \[0, 1\), "
                                         r"not 1\.5$"):
        Stimulus(stall=1.5)
    with pytest.raises(ValueError, match=r"^stimulus weight_ports must be \(latency >= 0, "):
        Stimulus(weight_ports=((-1, 0.0),))
    with pytest.raises(ValueError, match=r"^stimulus port_fifo_depth must be a positive "
                                         r"integer, not 0$"):
        Stimulus(port_fifo_depth=0)
