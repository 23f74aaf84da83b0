"""RTL in the loop: the BRSD controller (:mod:`heteroreason.model.controller.brsd`) with the
DraftEngine RTL, on Verilator under cocotb, as its draft model.

:func:`run_cosim` builds the engine for a preset's seeded model, runs the controller inside the
simulation and returns what it recorded: the traces, the final chains, the host commands sent
and the KVMU modes the engine went through. With one context the DraftEngine runs the problems
one after another (:mod:`heteroreason.sim.verify.tb.cosim_tb`); with ``contexts`` N > 1 the
MultiDraftEngine runs N problems at once, a controller a context, their drafts sharing passes
of the weights (:mod:`heteroreason.sim.verify.tb.multi_cosim_tb`). :func:`run_reference` runs
the same problems with the integer reference as the draft; the two must agree token for token.
Target and PRM are the project's numpy reference backends, built the same way on both sides by
:func:`backends`, each problem with its own (:meth:`Backends.for_problem`), so that a problem's
run does not depend on which problems ran before it or beside it.
"""

from __future__ import annotations

import json
import tempfile
from collections import Counter
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

from heteroreason.model.controller.brsd import (
    ControllerConfig,
    ReferenceGenerator,
    RewardHeadScorer,
    run_problem,
)
from heteroreason.model.spec.numerics.qwen2_float import FloatDecoder, random_weights
from heteroreason.model.spec.numerics.qwen2_int8 import IntDecoder
from heteroreason.model.workload.traces import trace_to_json
from heteroreason.rtl.limits import CONTEXT_LIMIT
from heteroreason.sim.flow.export import seeded_model
from heteroreason.sim.verify.engine_scenarios import GreedyOracle
from heteroreason.sim.verify.plan import Stimulus
from heteroreason.sim.verify.runner import run_cocotb

__all__ = ["Backends", "backends", "choose_delimiter", "run_cosim", "run_reference"]

ENGINE_DEFAULTS = {"capacity": 512, "lanes": 32, "stream_bytes": 16, "heads_parallel": 2,
                   "weight_buffer": 512}


@dataclass(frozen=True)
class Backends:
    """The target's and the PRM's decoders of a co-simulation (the draft is the RTL or the
    reference): seeded numpy models of the preset's shape. Problems that run at once need
    their own (a decoder holds one KV cache)."""

    target: FloatDecoder
    prm: FloatDecoder
    seed: int

    def for_problem(self) -> tuple[ReferenceGenerator, RewardHeadScorer]:
        """A problem's target generator and PRM, the generator's cache starting empty."""
        return (ReferenceGenerator("target", self.target),
                RewardHeadScorer("prm", self.prm, seed=self.seed + 3))


def backends(preset: str, seed: int) -> Backends:
    """The target's and the PRM's decoders, seeded from ``seed`` + 1 and + 2."""
    config = seeded_model(preset, seed).config
    return Backends(target=FloatDecoder(random_weights(config, seed=seed + 1)),
                    prm=FloatDecoder(random_weights(config, seed=seed + 2)), seed=seed)


def choose_delimiter(preset: str, seed: int, prompt: Sequence[int]) -> int:
    """The token the draft's greedy continuation of ``prompt`` repeats most: a step delimiter
    that ends steps within a few tokens for a model with random weights."""
    oracle = GreedyOracle(seeded_model(preset, seed))
    seen: list[int] = []
    for _ in range(16):
        seen.append(oracle.next_token(list(prompt) + seen))
    return Counter(seen).most_common(1)[0][0]


def run_reference(prompts: Sequence[Sequence[int]], controller: ControllerConfig, *,
                  preset: str, seed: int) -> dict:
    """The controller with the integer reference as the draft: traces and chains."""
    draft = IntDecoder(seeded_model(preset, seed))
    models = backends(preset, seed)
    traces, chains = [], []
    for i, prompt in enumerate(prompts):
        target, prm = models.for_problem()
        trace, chain = run_problem(prompt, draft=ReferenceGenerator("draft", draft),
                                   target=target, prm=prm, config=controller, dataset=preset,
                                   problem_id=str(i))
        traces.append(trace_to_json(trace))
        chains.append(chain)
    return {"traces": traces, "chains": chains}


def controller_json(controller: ControllerConfig) -> dict:
    fields = asdict(controller)
    fields["delimiters"] = sorted(controller.delimiters)
    return fields


def controller_from_json(fields: dict) -> ControllerConfig:
    return ControllerConfig(**(fields | {"delimiters": frozenset(fields["delimiters"])}))


def run_cosim(prompts: Sequence[Sequence[int]], controller: ControllerConfig, *, preset: str,
              seed: int, engine: dict | None = None, latency: int = 20, contexts: int = 1,
              per_pass: int = 2, trace_out: Path | str | None = None) -> dict:
    """The controller with the engine RTL as the draft (built with the delimiters — one or
    two — and EOS of ``controller``): the DraftEngine with ``contexts`` 1, else the
    MultiDraftEngine of ``contexts`` problems, ``per_pass`` of them drafted a pass, running
    that many problems at once. Returns the record of the testbench
    (:mod:`~heteroreason.sim.verify.tb.cosim_tb`, :mod:`~heteroreason.sim.verify.tb.
    multi_cosim_tb`)."""
    marks = sorted(controller.delimiters)
    if not 1 <= len(marks) <= 2:
        raise ValueError("the engine is built with one or two step delimiters; the controller "
                         f"names {len(marks)}")
    if not isinstance(contexts, int) or not 1 <= contexts <= CONTEXT_LIMIT:
        raise ValueError(f"contexts must be an integer in [1, {CONTEXT_LIMIT}], not {contexts!r}")
    multi = contexts > 1
    if multi and (per_pass not in (2, 4, 8) or per_pass > contexts):
        raise ValueError(f"per_pass must be 2, 4 or 8 and at most contexts ({contexts}), not "
                         f"{per_pass!r}")
    params = ENGINE_DEFAULTS | dict(engine or {}) | {
        "preset": preset, "seed": seed, "delimiter": marks[0],
        "delimiter2": marks[1] if len(marks) == 2 else -1, "eos": controller.eos}
    if multi:
        params |= {"contexts": contexts, "ingest_batch": per_pass}
    if trace_out is not None:  # the simulation runs in its build directory
        trace_out = Path(trace_out).resolve()
        trace_out.parent.mkdir(parents=True, exist_ok=True)
    bench = "multi_cosim_tb" if multi else "cosim_tb"
    with tempfile.TemporaryDirectory() as tmp:
        result_file = Path(tmp) / "cosim.json"
        plan = {"prompts": [list(map(int, p)) for p in prompts],
                "controller": controller_json(controller),
                "trace_out": str(trace_out) if trace_out else str(Path(tmp) / "traces.jsonl")}
        result = run_cocotb("draft_engine", f"heteroreason.sim.verify.tb.{bench}", params=params,
                            testcase="brsd_with_rtl_draft", seed=seed,
                            stimulus=Stimulus(cosim=plan, latency=latency,
                                              result=str(result_file)))
        if result.failed or not result_file.exists():
            raise RuntimeError(f"the co-simulation failed; see {result.build_dir}")
        return json.loads(result_file.read_text())
