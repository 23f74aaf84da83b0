"""The testbench's striped HBM model on its own: a port-level stand-in for the DUT takes every
beat offered; the beats arrive whole, in order, at the slowest port's pace."""

import random

import pytest

from heteroreason.sim.verify.tb.hbm_channels import StripedChannel

ADDR_BITS = 12


class _Signal:
    def __init__(self, value=0):
        self.value = value


class _Dut:
    """The request and response ports of one stream, as cocotb handles look."""

    def __init__(self):
        for name in ("wreq__valid", "wreq__ready", "wreq__payload", "wdata__valid",
                     "wdata__ready", "wdata__payload"):
            setattr(self, name, _Signal())


def _run(ports, beats, *, seed, requests, ready=1.0, limit=100_000):
    """Request ``requests`` ((addr, count) pairs, one a cycle from cycle 0); take every beat
    offered while ready (with probability ``ready``). Returns the beats taken and the cycles."""
    dut, rng = _Dut(), random.Random(seed)
    channel = StripedChannel(dut, "wreq", "wdata", beats, beat_bytes=16, ports=ports,
                             addr_bits=ADDR_BITS, rng=rng)
    taken, queue, cycle = [], list(requests), 0
    while cycle < limit:
        channel.drive(cycle)
        dut.wreq__valid.value = 0
        if queue:
            addr, count = queue.pop(0)
            dut.wreq__valid.value = 1
            dut.wreq__payload.value = addr | count << ADDR_BITS
        dut.wdata__ready.value = int(rng.random() < ready)
        if dut.wdata__valid.value and dut.wdata__ready.value:
            taken.append(dut.wdata__payload.value)
        channel.observe(cycle)
        cycle += 1
        if not queue and not channel.busy:
            return taken, cycle
    raise AssertionError(f"the channel did not drain in {limit} cycles (seed {seed})")


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_beats_arrive_whole_and_in_order_over_uneven_ports(seed):
    rng = random.Random(seed)
    beats = [rng.getrandbits(128) for _ in range(600)]
    ports = ((3, 0.0), (20, 0.1), (7, 0.3), (40, 0.5))
    requests = [(0, 100), (250, 300), (100, 150)]
    taken, _ = _run(ports, beats, seed=seed, requests=requests, ready=0.7)
    expected = beats[0:100] + beats[250:550] + beats[100:250]
    assert taken == expected, f"seed {seed}"


@pytest.mark.parametrize("stalls", [(0.0, 0.0, 0.0, 0.5), (0.25, 0.0, 0.25, 0.0),
                                    (0.0, 0.0, 0.0, 0.0)])
def test_the_stream_runs_at_its_slowest_ports_pace(stalls):
    beats = list(range(4000))
    ports = tuple((10, s) for s in stalls)
    _, cycles = _run(ports, beats, seed=7, requests=[(0, 4000)])
    pace = 1 - max(stalls)
    assert cycles == pytest.approx(4000 / pace + 10, rel=0.03)


def test_bad_ports_are_refused():
    for ports, match in ((((1, 1.0),), r"stall must be in \[0, 1\)"),
                         (((-1, 0.0),), "latency must be a non-negative integer"),
                         ((), "at least one"),
                         (tuple((0, 0.0) for _ in range(17)), r"ports must be an integer in "
                                                               r"\[1, 16\]")):
        with pytest.raises(ValueError, match=match):
            StripedChannel(_Dut(), "wreq", "wdata", [0], beat_bytes=16, ports=ports,
                           addr_bits=ADDR_BITS, rng=random.Random(0))
