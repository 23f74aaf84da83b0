"""Pieces every cocotb testbench here shares: the run plan, seeds, clock and reset."""

from __future__ import annotations

import functools
import os
import random

import cocotb
from cocotb.clock import Clock
from cocotb.triggers import FallingEdge, ReadOnly, RisingEdge

from heteroreason.sim.verify.plan import RunPlan, Stimulus

__all__ = ["TRAFFIC_PROFILES", "TbBase", "param", "param_text", "plan", "run_random_events",
           "seeded_rng", "stimulus"]


@functools.cache
def plan() -> RunPlan:
    """The run plan :func:`heteroreason.sim.verify.runner.run_cocotb` started this process
    with."""
    return RunPlan.current()


def stimulus() -> Stimulus:
    return plan().stimulus


def param(name: str) -> int:
    """An integer parameter of the top."""
    return plan().param(name)


def param_text(name: str) -> str:
    """A string parameter of the top (a preset name)."""
    return plan().param_text(name)


def seeded_rng(salt: str) -> tuple[int, random.Random]:
    """A generator for one test, and the regression seed that reproduces it.

    cocotb derives each test's seed from ``COCOTB_RANDOM_SEED`` and the test's name; ``salt``
    separates generators within one test.
    """
    regression_seed = int(os.environ.get("COCOTB_RANDOM_SEED", cocotb.RANDOM_SEED))
    return regression_seed, random.Random(f"{cocotb.RANDOM_SEED}:{salt}")


class TbBase:
    """Clock, reset and a cycle counter; subclasses implement ``drive()`` and ``observe()``.

    Every cycle: after the falling edge every driver and sink drives its port, then in the
    read-only phase every transfer of the cycle is observed and checked.
    """

    period_ns = 10

    def __init__(self, dut, *, seed: int, name: str):
        self.dut = dut
        self.seed = seed
        self.name = name
        self.cycle = 0
        self.log = dut._log
        cocotb.start_soon(Clock(dut.clk, self.period_ns, unit="ns").start())

    def fail(self, message: str) -> None:
        raise AssertionError(
            f"[{self.name} COCOTB_RANDOM_SEED={self.seed} cycle={self.cycle}] {message}")

    def check(self, condition: bool, message: str) -> None:
        if not condition:
            self.fail(message)

    def idle_inputs(self) -> None:
        raise NotImplementedError

    def drive(self) -> None:
        raise NotImplementedError

    def observe(self) -> None:
        raise NotImplementedError

    async def reset(self, cycles: int = 3) -> None:
        self.idle_inputs()
        self.dut.rst.value = 1
        for _ in range(cycles):
            await RisingEdge(self.dut.clk)
        await FallingEdge(self.dut.clk)
        self.dut.rst.value = 0

    async def step(self) -> None:
        """One clock cycle of driving and checking."""
        await FallingEdge(self.dut.clk)
        self.drive()
        await ReadOnly()
        self.observe()
        self.cycle += 1

    async def run_until(self, done, *, limit: int, what: str) -> None:
        """Step until ``done()`` holds; fail after ``limit`` cycles."""
        for _ in range(limit):
            if done():
                return
            await self.step()
        self.fail(f"{what} did not happen within {limit} cycles")


# the random tests' traffic: (idle, backpressure) probabilities on the streams
TRAFFIC_PROFILES = (("idle", "backpressure"), [(0.0, 0.0), (0.5, 0.5), (0.8, 0.9)])


async def run_random_events(tb, events: int) -> None:
    """Step until the testbench's suppliers have had ``events`` events taken (``tb.events``),
    at most 40 cycles an event, then let it drain."""
    await tb.run_until(lambda: tb.events >= events, limit=events * 40,
                       what=f"{events} random events")
    await tb.drain()
