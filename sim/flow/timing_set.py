"""Named lists of tops and parameters for ``scripts/timing_report.py`` (one definition for the
report, CI's checks and the closing tables)."""

from __future__ import annotations

__all__ = ["TIMING_SETS"]

_SMALL = [
    ("kvmu", {"capacity": 4096}),
    ("input_mux", {}),
    ("kv_frontend", {}),
    ("mvu", {"lanes": 8, "max_beats": 16, "max_rows": 1024}),
    ("mvu", {"lanes": 16, "max_beats": 16, "max_rows": 1024}),
    ("mvu", {"lanes": 32, "max_beats": 16, "max_rows": 1024}),
    ("mvu", {"lanes": 64, "max_beats": 16, "max_rows": 1024}),
    ("rmsnorm", {}),
    ("rope", {}),
    ("attention", {}),
    ("swiglu", {}),
    ("sampler", {}),
    ("decoder_core", {}),
    ("draft_engine", {}),
]

TIMING_SETS: dict[str, list[tuple[str, dict[str, int | str]]]] = {
    # every top at a size the ECP5-85k holds
    "small": _SMALL,
    # the datapath units at the widths of the design chosen for the U280 (896 MACs, vector
    # width 32): logic depth only
    "u280": [
        ("mvu", {"lanes": 896, "max_beats": 6, "max_rows": 4864}),
        ("rmsnorm", {"max_length": 896, "width": 32}),
        ("sampler", {"vocab": 151936, "delimiter": 271, "eos": 151643}),
    ],
}
