"""Host scripts for the DraftEngine testbench and their transaction-level golden model.

A scenario is a prompt and one verdict per submitted step, in order:

* ``"accept"`` — ACCEPT: the step stays, drafting continues with no re-prefill;
* ``["reject", tokens]`` — REJECT (rollback to the step's start), then the target's ``tokens``
  (``last`` on the final one) are shadow-ingested in its place;
* ``["backtrack", tokens]`` — instead of a verdict on the pending step, INIT to the start of the
  step before it and the target's ``tokens`` replace that one.

Which tokens the engine drafts does not depend on timing: every draft token at position ``p``
is the integer reference's greedy choice after the engine's context ``[0, p)``. So the testbench
checks each draft token as it appears (:class:`GreedyOracle`), and :func:`committed_path` walks a
scenario at the transaction level — which lets a launcher choose a step delimiter that ends
every step of the scenario within a few tokens, for a model with random weights.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from heteroreason.model.spec.numerics.qwen2_int8 import IntDecoder, QuantizedModel

__all__ = ["GreedyOracle", "Scenario", "committed_path", "instantiate"]


class GreedyOracle:
    """The integer reference's greedy next token after any context, incrementally (the
    reference's KV cache is rolled back to the longest common prefix of successive queries)."""

    def __init__(self, model: QuantizedModel):
        self._decoder = IntDecoder(model)
        self._tokens: list[int] = []
        self._logits: np.ndarray | None = None

    def next_token(self, context: Sequence[int]) -> int:
        context = [int(t) for t in context]
        if not context:
            raise ValueError("the context must hold at least one token")
        common = 0
        for a, b in zip(self._tokens, context, strict=False):
            if a != b:
                break
            common += 1
        if common == len(context) == len(self._tokens) and self._logits is not None:
            return int(np.argmax(self._logits))
        keep = min(common, len(context) - 1)  # the last token is run again for its logits
        self._decoder.rollback(keep)
        self._logits = self._decoder.forward(context[keep:])[-1]
        self._tokens = context
        return int(np.argmax(self._logits))


@dataclass(frozen=True)
class Scenario:
    name: str
    prompt: tuple[int, ...]
    verdicts: tuple

    def to_json(self) -> dict:
        return {"name": self.name, "prompt": list(self.prompt),
                "verdicts": [v if isinstance(v, str) else [v[0], list(v[1])]
                             for v in self.verdicts]}


def committed_path(oracle: GreedyOracle, scenario: Scenario, delimiters: set[int], *,
                   max_step: int) -> list[list[int]] | None:
    """The drafted steps the scenario's verdicts see, then the two the engine drafts after the
    last verdict (the one submitted and the step-ahead one); None when a step does not end (at
    a delimiter) within ``max_step`` tokens."""
    context = list(scenario.prompt)
    starts: list[int] = []  # starts of the steps kept so far
    steps = []
    for verdict in (*scenario.verdicts, "accept", "accept"):
        step = []
        while not step or step[-1] not in delimiters:
            if len(step) == max_step:
                return None
            step.append(oracle.next_token(context + step))
        steps.append(step)
        start = len(context)
        kind = verdict if isinstance(verdict, str) else verdict[0]
        if kind == "accept":
            context += step
            starts.append(start)
        elif kind == "reject":
            context += list(verdict[1])
            starts.append(start)
        elif kind == "backtrack":
            if not starts:
                raise ValueError(f"{scenario.name}: backtrack needs a kept step before it")
            start = starts.pop()
            context = context[:start] + list(verdict[1])
            starts.append(start)
        else:
            raise ValueError(f"{scenario.name}: unknown verdict {verdict!r}")
    return steps


def instantiate(model: QuantizedModel, templates: Sequence[tuple[str, Sequence[int], Sequence]],
                *, seed: int, max_step: int = 8, tries: int = 400
                ) -> tuple[list[Scenario], int, int]:
    """Scenarios from templates ``(name, prompt, kinds)`` — a kind is ``"accept"`` or
    ``("reject", n)`` / ``("backtrack", n)`` with ``n`` target tokens — for a model with random
    weights, whose greedy drafts fall into repeating a token: the step delimiter is the token the
    first prompt's continuation repeats most, and the target's tokens are drawn (from ``seed``)
    until every step of the scenario ends at the delimiter within ``max_step`` tokens.

    Returns ``(scenarios, delimiter, eos)``, the EOS id one that no step drafts."""
    oracle = GreedyOracle(model)
    prompt = list(templates[0][1])
    seen = []
    for _ in range(16):
        seen.append(oracle.next_token(prompt + seen))
    delimiter = Counter(seen).most_common(1)[0][0]
    rng = np.random.default_rng(seed)
    scenarios, drafted = [], {delimiter}
    for name, prompt, kinds in templates:
        verdicts: list = []
        for kind in kinds:
            for _ in range(tries):
                verdict = kind if kind == "accept" else (
                    kind[0], tuple(int(t) for t in rng.integers(0, model.config.vocab, kind[1])))
                candidate = Scenario(name, tuple(prompt), (*verdicts, verdict))
                path = committed_path(oracle, candidate, {delimiter}, max_step=max_step)
                if path is not None:
                    break
            else:
                raise ValueError(f"{name}: no target tokens for {kind!r} in {tries} tries let "
                                 f"every step end at {delimiter} within {max_step} tokens")
            verdicts.append(verdict)
        scenarios.append(candidate)
        drafted |= {t for step in path for t in step}
    eos = next(t for t in range(model.config.vocab) if t not in drafted)
    return scenarios, delimiter, eos
