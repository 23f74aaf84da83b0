"""The encodings the control RTL, its golden models and the host share: the KVMU's modes, the
host's command opcodes, where a token came from and the sticky error codes. One definition,
below both the RTL (:mod:`heteroreason.rtl.kvmu`, :mod:`heteroreason.rtl.input_mux`) and the
golden models (:mod:`heteroreason.model.spec.golden`); docs/design.md §4 states them (§4.6 the
context errors of a KVMU holding several problems)."""

from __future__ import annotations

import enum

__all__ = ["ContextError", "Error", "Mode", "Op", "Source"]


class Mode(enum.IntEnum):
    """KVMU mode; the encoding is the RTL's ``mode`` port."""

    INITIALIZATION = 0
    SPECULATION = 1
    ACCEPT = 2
    ROLLBACK = 3

    @property
    def takes_host_tokens(self) -> bool:
        """Whether the decoder's input comes from the host (PCIe) in this mode."""
        return self in (Mode.INITIALIZATION, Mode.ROLLBACK)


class Op(enum.IntEnum):
    """Host command opcode; the encoding is the ``op`` field of the RTL's ``cmd`` stream."""

    INIT = 0
    ACCEPT = 1
    REJECT = 2
    CLEAR_ERROR = 3


class Source(enum.IntEnum):
    """Where a token processed by the decoder came from."""

    HOST = 0
    DRAFT = 1


class Error(enum.IntEnum):
    """Sticky error code; the encoding is the RTL's ``error`` port."""

    NONE = 0
    ACCEPT_WITHOUT_PENDING = 1
    REJECT_WITHOUT_PENDING = 2
    INIT_BEYOND_CAPACITY = 3
    WRITE_AT_CAPACITY = 4
    HOST_TOKEN_IN_SPECULATION = 5
    DRAFT_TOKEN_OUTSIDE_SPECULATION = 6
    DRAFT_TOKEN_WHILE_STALLED = 7


class ContextError(enum.IntEnum):
    """Sticky error about a context id (docs/design.md §4.6); the encoding is the multi-context
    KVMU's ``context_error`` ports (:mod:`heteroreason.rtl.multi_kvmu`)."""

    NONE = 0
    CONTEXT_OUT_OF_RANGE = 1
    CONTEXT_NOT_INITIALISED = 2
