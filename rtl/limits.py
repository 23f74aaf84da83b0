"""Upper bounds on the sizes a block is built with: one definition, read by
:class:`~heteroreason.rtl.decoder.params.DecoderParams` and by the Verilog export.

Within them an elaboration ends in seconds to minutes; far beyond them it runs for hours or hits
Amaranth's own limits, so a size past its bound is refused before any work, with the bound named.

* ``WIDTH_LIMIT``: datapath widths (lanes, stream bytes, vector and parameter widths, heads):
  the widest design any board holds (``heteroreason predict``: u280-200 and v80) has 896 lanes
  of 4 rows, 3,584 bytes a beat, so lanes keep a margin of four.
* ``MULTIPLE_LIMIT``: what a beat or a pass multiplies (rows a weight beat, vectors a beat, tokens
  a batched ingest): each replicates a datapath, and the widest design any board holds uses 4.
* ``SIZE_LIMIT``: every other size (buffer and memory depths, capacities, lengths), 2**20 entries:
  the deepest memory of any chosen design is the U280's 4,096-beat weight buffer.
* ``TOKEN_BITS_LIMIT``: token ids up to 32 bits (Qwen2.5's vocabulary needs 18).
* ``CONTEXT_LIMIT``: problems a multi-context KVMU holds (a §4.1 KVMU each, their readiness
  and submissions merged): the fleet's largest board holds 321 (the U280's HBM at 4,096 tokens).
* ``DELIMITER_LIMIT``: step-delimiter token ids the sampler compares each token with (a comparator
  each); the reasoning traces mark a step with one delimiter token.
"""

WIDTH_LIMIT = 4096
TOKEN_BITS_LIMIT = 32
MULTIPLE_LIMIT = 64
SIZE_LIMIT = 2**20
DELIMITER_LIMIT = 256
CONTEXT_LIMIT = 1024

__all__ = ["CONTEXT_LIMIT", "DELIMITER_LIMIT", "MULTIPLE_LIMIT", "SIZE_LIMIT", "TOKEN_BITS_LIMIT",
           "WIDTH_LIMIT"]
