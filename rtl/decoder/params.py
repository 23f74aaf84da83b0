"""The decoder core's parameters: one definition, validated once, read by the RTL
(:class:`~heteroreason.rtl.decoder.core.DecoderCore`, :class:`~heteroreason.rtl.draft_engine.
DraftEngine`), the Verilog export, the testbenches, the cycle model, the calibration and the
design search."""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields

from heteroreason.model import checks
from heteroreason.rtl.limits import (
    CONTEXT_LIMIT,
    DELIMITER_LIMIT,
    MULTIPLE_LIMIT,
    SIZE_LIMIT,
    WIDTH_LIMIT,
)

__all__ = ["DecoderParams"]


@dataclass(frozen=True)
class DecoderParams:
    """How a decoder core is built, apart from the model it runs.

    Every size has an upper bound (:mod:`~heteroreason.rtl.limits`): widths up to
    ``WIDTH_LIMIT``, ``rows_per_beat`` and ``ingest_batch`` up to ``MULTIPLE_LIMIT``, buffer
    depths up to ``SIZE_LIMIT``, at most ``DELIMITER_LIMIT`` delimiters.

    Parameters
    ----------
    lanes : int
        MACs per cycle (weights per matrix-vector beat); must divide the hidden size.
    stream_bytes : int
        Weight-stream bytes per cycle; must divide a matrix-vector beat (``lanes *
        rows_per_beat`` bytes). ``None`` (the default): the beat.
    heads_parallel : int
        Query heads per attention job; must divide the query heads per KV head.
    weight_buffer, param_buffer : int
        Depths of the prefetch buffers (matrix-vector beats, parameter beats).
    vector_width : int
        Scratchpad elements per row and per cycle of the vector paths: a power of two that
        divides ``lanes``, the FFN size and half the head size.
    param_width : int
        Entries per parameter beat: the RMSNorm takes this many gains a beat and emits as many
        results a cycle (the other operators use a beat's first entry). A power of two that
        divides ``vector_width``.
    rows_per_beat : int
        Rows of a matrix a matrix-vector beat carries side by side (each ``lanes`` weights):
        the unit computes ``lanes * rows_per_beat`` MACs a cycle and its results, the row
        parameters (entries of a parameter beat) and the sinks (SwiGLU, the sampler, the
        scratchpad's writes) move ``rows_per_beat`` a cycle. A power of two that divides
        ``param_width``; it must divide every matrix's rows (:meth:`check_model`).
    external_kv : bool
        Keep the KV cache in memory behind the attention unit's KV ports instead of on chip.
    kv_rows : int
        Key and value rows the attention unit takes a cycle in its score and weighted-sum
        passes (and exponentials it computes a cycle): a power of two that divides the model's
        context (:meth:`check_model`). With ``external_kv`` a KV read beat carries that many
        rows (``kv_rows * head_dim`` bytes).
    ingest_batch : int
        Most tokens a pass of the weights takes (a batched ingest), a power of two: the
        matrix-vector unit meets each weight beat with that many vectors, the scratchpad has a
        bank per token and SwiGLU ``rows_per_beat * ingest_batch`` lanes.
    contexts : int
        KV regions the core keeps (problems resident, at most ``CONTEXT_LIMIT``). Above one,
        a pass's tokens come from any contexts, each with its own context id, position and
        sample flag (docs/design.md §4.7): a context's KV rows lie in its own region, each
        token attends over its own context's rows up to its own position, and a sampler per
        token of the pass gives each kept token's sample. Needs ``ingest_batch`` of 2 or more.
    delimiters : tuple of int
        Step-delimiter token ids the sampler marks (``step_end``).
    eos : int
        The end-of-sequence token id the sampler marks.
    """

    lanes: int
    stream_bytes: int | None = None
    heads_parallel: int = 1
    weight_buffer: int = 1024
    param_buffer: int = 256
    vector_width: int = 1
    param_width: int = 1
    rows_per_beat: int = 1
    external_kv: bool = False
    ingest_batch: int = 1
    kv_rows: int = 1
    contexts: int = 1
    delimiters: tuple[int, ...] = ()
    eos: int = 0

    def __post_init__(self):
        checks.integer("lanes", self.lanes, low=1, high=WIDTH_LIMIT)
        checks.integer("rows_per_beat", self.rows_per_beat, low=1, high=MULTIPLE_LIMIT)
        beat = self.beat_bytes
        if self.stream_bytes is None:
            object.__setattr__(self, "stream_bytes", beat)
        what = "lanes" if self.rows_per_beat == 1 else \
            "lanes x rows_per_beat"
        checks.integer("stream_bytes", self.stream_bytes, low=1, divides=(beat, what))
        checks.integer("heads_parallel", self.heads_parallel, low=1, high=WIDTH_LIMIT)
        # the weight buffer: a PrefetchFIFO, its memory and its read register
        for name, low in (("weight_buffer", 2), ("param_buffer", 1)):
            checks.integer(name, getattr(self, name), low=low, high=SIZE_LIMIT,
                           note="a depth in beats")
        v = checks.power_of_two("vector_width", self.vector_width, divides=(self.lanes, "lanes"))
        g = checks.power_of_two("param_width", self.param_width, divides=(v, "vector_width"))
        checks.power_of_two("rows_per_beat", self.rows_per_beat, divides=(g, "param_width"))
        checks.power_of_two("ingest_batch", self.ingest_batch,  # SwiGLU's lanes
                            high=MULTIPLE_LIMIT)
        checks.power_of_two("kv_rows", self.kv_rows, high=MULTIPLE_LIMIT)
        checks.integer("contexts", self.contexts, low=1, high=CONTEXT_LIMIT,
                       note="KV regions, problems resident")
        if self.contexts > 1 and self.ingest_batch < 2:
            raise ValueError(f"contexts={self.contexts} needs ingest_batch of 2 or more (a pass "
                             f"of tokens from several contexts), not {self.ingest_batch}")
        if self.external_kv not in (False, True):  # 0 and 1 too
            raise ValueError(f"external_kv must be a bool, not {self.external_kv!r}")
        object.__setattr__(self, "external_kv", bool(self.external_kv))
        if isinstance(self.delimiters, (str, bytes)) or \
                not isinstance(self.delimiters, (tuple, list, frozenset, set)) or not all(
                not isinstance(d, bool) and isinstance(d, int) and d >= 0
                for d in self.delimiters):
            raise ValueError(f"delimiters must be non-negative token ids, not "
                             f"{self.delimiters!r}")
        if len(self.delimiters) > DELIMITER_LIMIT:
            raise ValueError(f"delimiters must be at most {DELIMITER_LIMIT} token ids (a "
                             f"comparator each in the sampler), not {len(self.delimiters):,}")
        object.__setattr__(self, "delimiters", tuple(
            sorted(self.delimiters) if isinstance(self.delimiters, (set, frozenset))
            else self.delimiters))
        checks.integer("eos", self.eos, low=0, note="a token id")

    @property
    def beat_bytes(self) -> int:
        """Bytes of a matrix-vector beat: ``lanes`` weights of each of ``rows_per_beat`` rows."""
        return self.lanes * self.rows_per_beat

    @property
    def ratio(self) -> int:
        """Stream beats per matrix-vector beat."""
        return self.beat_bytes // self.stream_bytes

    def check_model(self, config) -> None:
        """Raise ValueError unless the core can be built for ``config`` (a
        :class:`~heteroreason.model.spec.numerics.qwen2_config.Qwen2Config`)."""
        if config.hidden % self.lanes:
            raise ValueError(f"lanes ({self.lanes}) must divide the hidden size "
                             f"({config.hidden})")
        group = config.heads // config.kv_heads
        if group % self.heads_parallel:
            raise ValueError(f"heads_parallel ({self.heads_parallel}) must divide the query "
                             f"heads per KV head ({group})")
        if config.max_context % self.kv_rows:
            raise ValueError(f"kv_rows ({self.kv_rows}) must divide the model's context "
                             f"({config.max_context})")
        v = self.vector_width
        if config.ffn % v or (config.head_dim // 2) % v:
            raise ValueError(f"vector_width ({v}) must divide the FFN size ({config.ffn}) and "
                             f"half the head size ({config.head_dim // 2})")
        k = self.rows_per_beat
        for name in ("q_dim", "kv_dim", "hidden", "ffn", "vocab"):
            if getattr(config, name) % k:
                raise ValueError(f"rows_per_beat ({k}) must divide the rows of every matrix: "
                                 f"{name} is {getattr(config, name)}")
        for name, ids in (("delimiters", self.delimiters), ("eos", (self.eos,))):
            bad = [t for t in ids if t >= config.vocab]
            if bad:
                raise ValueError(f"{name} must be token ids below the vocabulary size "
                                 f"({config.vocab}), not {bad[0]}")

    def to_json(self) -> dict:
        return asdict(self) | {"delimiters": list(self.delimiters)}

    @classmethod
    def from_json(cls, obj: dict) -> DecoderParams:
        """The inverse of :meth:`to_json`; unknown or missing fields raise ValueError."""
        if not isinstance(obj, dict):
            raise ValueError(f"decoder parameters must be a JSON object, not "
                             f"{type(obj).__name__}")
        names = {f.name for f in fields(cls)}
        unknown = sorted(set(obj) - names)
        if unknown:
            raise ValueError(f"unknown decoder parameter {unknown[0]!r}; the parameters are "
                             f"{', '.join(sorted(names))}")
        if "lanes" not in obj:
            raise ValueError("decoder parameter 'lanes' is missing")
        obj = dict(obj)
        if isinstance(obj.get("delimiters"), list):
            obj["delimiters"] = tuple(obj["delimiters"])
        return cls(**obj)
