"""What a testbench process is told: the top's parameters, the decoder's design (a decoder
top's :class:`~heteroreason.sim.flow.export.DecoderDesign`, its :class:`DecoderParams` as
itself) and the test's stimulus, as one typed plan that travels to the simulator process in
one environment variable (:data:`PLAN_ENV`).

    plan = RunPlan("decoder_core", params, Stimulus(positions=(16, 300), latency=64))
    run_cocotb(..., stimulus=plan.stimulus)        # the runner builds the plan
    RunPlan.current().stimulus.positions           # inside the testbench
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field

from heteroreason.model import checks
from heteroreason.sim.flow.export import DecoderDesign
from heteroreason.sim.verify.tb.port_gaps import GAP_PATTERNS

__all__ = ["PLAN_ENV", "RunPlan", "Stimulus"]

PLAN_ENV = "HR_RUN_PLAN"


@dataclass(frozen=True)
class Stimulus:
    """A test's knobs. Streams: ``idle`` is the probability a source holds back a beat,
    ``backpressure`` that a sink is not ready; the HBM model answers after ``latency`` cycles and
    skips a cycle with probability ``stall``.

    Parameters
    ----------
    random_events : int
        Random events (commands, tokens) of the KVMU and front-end benches.
    mvu_jobs : int
        Random jobs of the matrix-vector bench.
    prompt, draft
        The decoder-core bench: prompt token ids, then greedy tokens to draft.
    positions
        The decoder-core timing test: positions to time one decode token at.
    scenario, cosim
        The DraftEngine's host scenario and the co-simulation's settings (JSON objects).
    scenarios
        The multi-context engine's host scenarios, one a context (a list of JSON objects).
    weight_ports
        The weight stream split byte-wise over HBM ports, each ``(latency, stall)`` of its own
        (:class:`~heteroreason.sim.verify.tb.hbm_channels.StripedChannel`); empty: one port with
        ``latency`` and ``stall``.
    port_fifo_depth
        With ``weight_ports``: the slices each port may deliver ahead of the slowest (its FIFO
        in front of the beat's assembly).
    port_gaps, port_refresh
        With ``weight_ports``: how each port's skipped cycles fall (``"random"`` or
        ``"paced"``), and with ``"paced"`` a refresh of ``(period, busy)`` cycles or none
        (:class:`~heteroreason.sim.verify.tb.port_gaps.PortGaps`).
    shared_ports
        With ``weight_ports``: the parameters and an external KV cache's key and value rows
        time-shared on the weights' ports (:class:`~heteroreason.sim.verify.tb.shared_ports.
        SharedPorts`, the memory plan's ``shared`` plan).
    shared_kv_ports
        An external KV cache's key and value rows on one set of ports, served in request order
        (:class:`~heteroreason.sim.verify.tb.hbm_channels.SharedRows`, as
        :func:`~heteroreason.model.timing.fpga.hbm.plan_memory` places them); false: a set of
        ports each.
    script
        The replay bench's transaction script (a JSON file).
    result
        A JSON file the bench writes its figures to.
    """

    random_events: int = 10_000
    mvu_jobs: int = 60
    prompt: tuple[int, ...] = ()
    draft: int = 2
    positions: tuple[int, ...] = ()
    latency: int = 0
    stall: float = 0.0
    idle: float = 0.0
    backpressure: float = 0.0
    weight_ports: tuple[tuple[int, float], ...] = ()
    port_fifo_depth: int = 8
    port_gaps: str = "random"
    port_refresh: tuple[int, ...] = ()
    shared_kv_ports: bool = True
    shared_ports: bool = False
    scenario: Mapping | None = None
    scenarios: list | None = None
    cosim: Mapping | None = None
    script: str | None = None
    result: str | None = None

    def __post_init__(self):
        checks.integer("stimulus port_fifo_depth", self.port_fifo_depth, low=1)
        if self.port_gaps not in GAP_PATTERNS:
            raise ValueError(f"stimulus port_gaps must be one of {', '.join(GAP_PATTERNS)}, "
                             f"not {self.port_gaps!r}")
        refresh = tuple(self.port_refresh)
        if refresh and (self.port_gaps != "paced" or len(refresh) != 2 or not all(
                not isinstance(v, bool) and isinstance(v, int) for v in refresh)
                or not 0 <= refresh[1] < refresh[0]):
            raise ValueError(f"stimulus port_refresh must be (period, busy) cycles with 0 <= "
                             f"busy < period, and the paced gaps; not {refresh!r} with "
                             f"{self.port_gaps!r}")
        object.__setattr__(self, "port_refresh", refresh)
        for name in ("random_events", "mvu_jobs", "draft", "latency"):
            value = getattr(self, name)
            checks.integer(f"stimulus {name}", value, low=0)
        for name in ("stall", "idle", "backpressure"):
            value = getattr(self, name)
            checks.number(f"stimulus {name}", value, low=0, high=1, high_open=True)
        checks.flag("stimulus shared_kv_ports", self.shared_kv_ports)
        checks.flag("stimulus shared_ports", self.shared_ports)
        if self.shared_ports and not self.weight_ports:
            raise ValueError("stimulus shared_ports needs weight_ports (the ports to share)")
        ports = tuple(tuple(p) for p in self.weight_ports)
        for port in ports:
            if len(port) != 2 or isinstance(port[0], bool) or not isinstance(port[0], int) or \
                    port[0] < 0 or isinstance(port[1], bool) or \
                    not isinstance(port[1], (int, float)) or not 0.0 <= port[1] < 1.0:
                raise ValueError(f"stimulus weight_ports must be (latency >= 0, stall in [0, 1)) "
                                 f"pairs, not {port!r}")
        object.__setattr__(self, "weight_ports", ports)
        for name in ("prompt", "positions"):
            values = tuple(getattr(self, name))
            if not all(not isinstance(v, bool) and isinstance(v, int) and v >= 0
                       for v in values):
                raise ValueError(f"stimulus {name} must be non-negative integers, not "
                                 f"{values!r}")
            object.__setattr__(self, name, values)


@dataclass(frozen=True)
class RunPlan:
    """The top a testbench runs on, its parameters (the export's names, defaults filled in),
    the stimulus, and for a decoder top its design."""

    top: str
    params: Mapping[str, int | str]
    stimulus: Stimulus = field(default_factory=Stimulus)
    design: DecoderDesign | None = None

    def param(self, name: str) -> int:
        value = self._lookup(name)
        if isinstance(value, bool) or not isinstance(value, int):
            raise RuntimeError(f"parameter {name!r} of top {self.top!r} is not an integer: "
                               f"{value!r}")
        return value

    def param_text(self, name: str) -> str:
        return str(self._lookup(name))

    def _lookup(self, name: str):
        if name not in self.params:
            raise RuntimeError(f"top {self.top!r} has no parameter {name!r}; it has "
                               f"{', '.join(sorted(self.params))}")
        return self.params[name]

    def to_env(self) -> dict[str, str]:
        design = None if self.design is None else self.design.to_json()
        return {PLAN_ENV: json.dumps({"top": self.top, "params": dict(self.params),
                                      "stimulus": asdict(self.stimulus), "design": design},
                                     sort_keys=True)}

    @classmethod
    def current(cls) -> RunPlan:
        """The plan this simulator process was started with."""
        text = os.environ.get(PLAN_ENV)
        if text is None:
            raise RuntimeError(f"{PLAN_ENV} is not set: run this testbench through run_cocotb()")
        obj = json.loads(text)
        design = obj.get("design")
        return cls(obj["top"], obj["params"], Stimulus(**obj["stimulus"]),
                   None if design is None else DecoderDesign.from_json(design))
