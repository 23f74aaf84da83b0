"""Golden model of the decoder's input MUX (docs/design.md §4.2).

Selection rule
--------------
* In Initialization and Rollback the decoder's next token comes from the host (the target
  model's tokens over PCIe); its logits are kept only for the token marked ``last`` (they
  predict the first draft token), every other host token is a shadow ingest.
* In Speculation and Accept it comes from the local sampler, logits kept, unless drafting is
  stalled (the step-ahead step is complete and waits for a verdict): then nothing is selected
  and the sampled token waits.

Stale samples
-------------
Each token admitted with its logits kept yields exactly one sampled token later. A legal INIT or
REJECT makes every such sample still in flight (admitted, not yet taken from the sampler) stale;
stale samples are taken from the sampler and dropped (squashed), never forwarded. Within one
cycle, admissions and sampler transfers count before a flush.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

from heteroreason.model.spec.protocol import Mode

__all__ = ["GoldenInputMux", "Selection", "select_source"]


class Selection(enum.Enum):
    HOST = "host"
    SAMPLER = "sampler"
    NONE = "none"


def select_source(mode: Mode, *, stalled: bool) -> Selection:
    """The source the MUX forwards from, given the KVMU's mode and stall flag."""
    if Mode(mode).takes_host_tokens:
        return Selection.HOST
    if stalled:
        return Selection.NONE
    return Selection.SAMPLER


@dataclass
class GoldenInputMux:
    """Counts samples in flight and decides, per sampler beat, whether it is stale.

    Parameters
    ----------
    max_in_flight : int
        Most tokens with logits kept that may await their sample at once; the MUX admits no
        further such token until one returns.
    """

    max_in_flight: int
    in_flight: int = 0
    stale: int = 0

    def __post_init__(self):
        if not isinstance(self.max_in_flight, int) or self.max_in_flight <= 0:
            raise ValueError(
                f"max_in_flight must be a positive integer, not {self.max_in_flight!r}")

    def can_admit_kept(self) -> bool:
        return self.in_flight < self.max_in_flight

    def admit(self, *, keep_logits: bool) -> None:
        if keep_logits:
            if not self.can_admit_kept():
                raise AssertionError(
                    f"admitted a kept token with {self.in_flight} samples already in flight "
                    f"(max_in_flight={self.max_in_flight})")
            self.in_flight += 1

    def take_sample(self) -> bool:
        """A sampler beat is taken; returns True when it is stale (squashed)."""
        if self.in_flight == 0:
            raise AssertionError("a sampler beat was taken with no sample in flight")
        self.in_flight -= 1
        if self.stale:
            self.stale -= 1
            return True
        return False

    def flush(self) -> None:
        self.stale = self.in_flight
