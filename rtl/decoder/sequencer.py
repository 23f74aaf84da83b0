"""The decoder core's control: the sequencer, a program counter over the operator table
(:data:`heteroreason.rtl.decoder.operators.OPERATORS`) with the counters every operator shares.
Used by :class:`heteroreason.rtl.decoder.core.DecoderCore`. Its rooms:

* :mod:`~heteroreason.rtl.decoder.scratchpad`: the activations and their row readers;
* :mod:`~heteroreason.rtl.decoder.sequencer_streams`: the handshakes, payloads, gathers and
  writes, elaborated once outside the operators' cases from registered flags;
* :mod:`~heteroreason.rtl.decoder.sequencer_cases`: one method per unit that elaborates an
  operator's case of the program counter."""

from amaranth.hdl import Mux, Signal, signed, unsigned
from amaranth.lib import data, memory

from heteroreason.model.spec.numerics.qwen2_int8 import QuantizedModel
from heteroreason.rtl.compare import equals
from heteroreason.rtl.decoder.mvu import OutBits
from heteroreason.rtl.decoder.operators import (
    OPERATORS,
    Operator,
    Sink,
    Unit,
    first_layer_pc,
    last_layer_pc,
    lm_head_pc,
)
from heteroreason.rtl.decoder.params import DecoderParams
from heteroreason.rtl.decoder.pipeline import GROUP_BITS, Mirrored
from heteroreason.rtl.decoder.scratchpad import (
    READ_LATENCY,
    SCRATCH_BUFFERS,
    BankedScratchpad,
    Port,
    RowReader,
    Scratchpad,
)
from heteroreason.rtl.decoder.sequencer_cases import EMBED_LATENCY, SequencerCases
from heteroreason.rtl.decoder.sequencer_streams import SequencerStreams

__all__ = ["EMBED_LATENCY", "LEAVE_LATENCY", "LOGIT_LATENCY", "READ_LATENCY", "SCRATCH_BUFFERS",
           "Port", "RowReader", "Scratchpad", "Sequencer", "Units"]

# the registered flags the handshakes and writes follow (:meth:`Sequencer.feeds`,
# :meth:`Sequencer.writes`): the embedding's row parameter and its beats, the norm's rows and
# gains, a product's vector load, the rows RoPE rotates, a head's rows gathered, its query and
# its KV write sent, the attention's results drained, the SiLU table's entries; the units'
# commands (the LM head's, ``cmd_sample``, waits for the sampler); the embedding's writes
FEEDS = ("embed_param", "embed_row", "feed_norm", "loading", "feed_rope", "gather", "send_q",
         "send_kv", "draining", "silu", "cmd_norm", "cmd_mvu", "cmd_sample", "cmd_rope", "cmd_att",
         "embedding")
# an operator's first phase sends its unit a command: the flag of its valid
COMMAND_FLAGS = {Unit.NORM: "cmd_norm", Unit.MATVEC: "cmd_mvu", Unit.ROPE: "cmd_rope",
                 Unit.ATTENTION: "cmd_att"}
# the flags that load the beat: a copy a group of its bits (:class:`~heteroreason.rtl.decoder.
# pipeline.Mirrored`)
BEAT_FLAGS = ("embed_row", "loading")
# the operators a batch runs token by token (the matrix-vector ones take every token's vector
# in one job; the SiLU table is the layer's)
PER_TOKEN = frozenset({Unit.EMBED, Unit.NORM, Unit.ROPE, Unit.KV_WRITE, Unit.ATTENTION})
LOGIT_LATENCY = 1  # an LM head result -> the sampler's input
LEAVE_LATENCY = 1  # an operator's last handshake -> the next operator's first cycle, less one



class Units:
    def __init__(self, **units):
        for name, unit in units.items():
            setattr(self, name, unit)


class Sequencer(SequencerStreams, SequencerCases):
    """The operators' control: a program counter over :data:`OPERATORS` (the per-layer ones
    repeated with a layer counter), the counters every operator shares, and one method per
    unit that elaborates an operator's case."""

    def __init__(self, m, model: QuantizedModel, params: DecoderParams, units: Units, token,
                 weights: Port, param_port: Port):
        c, p = model.config, params
        self.m, self.c, self.p, self.units, self.token = m, c, p, units, token
        self.q_model = model
        self.w, self.param = weights, param_port
        self.batch = p.ingest_batch
        # the pass runs the LM head: its token keeps its logits (with contexts, any token)
        self.keep_any = token.keep if p.contexts == 1 else token.keep.any()
        if self.batch == 1:
            self.sp = Scratchpad(m, c, p.vector_width)
            self.pos = token.pos
        else:
            self._batch_state(m, token, param_port)
        self.n_layers = len(model.layers)
        self.pc = Signal(range(len(OPERATORS) + 1), name="pc")
        self.layer = Signal(range(self.n_layers), name="layer")
        layers = model.layers
        self.exp_mult = self._per_layer([ql.exp_req[0] for ql in layers], unsigned(31))
        self.exp_shift = self._per_layer([ql.exp_req[1] for ql in layers], unsigned(6))
        self.out_mult = self._per_layer([ql.attn_req[0] for ql in layers], unsigned(31))
        self.out_shift = self._per_layer([ql.attn_req[1] for ql in layers], unsigned(6))
        self.act_mult = self._per_layer([ql.act_req[0] for ql in layers], unsigned(31))
        self.act_shift = self._per_layer([ql.act_req[1] for ql in layers], unsigned(6))
        self.phase = Signal(range(8))
        self.i = Signal(range(max(c.vocab, c.ffn, 256) + 1))
        self.j = Signal(range(max(c.vocab, c.ffn, 256) + 1))
        self.k = Signal(range(c.ffn + 1))  # SwiGLU results stored (they trail ``j``)
        self.lane = Signal(range(p.beat_bytes + 1))
        self.head = Signal(range(max(c.heads, 1) + 1))
        # the first query head of the attention job whose outputs are drained (``head``: of
        # the job whose command and queries are sent; the unit holds two jobs at once)
        self.drain_head = Signal(range(max(c.heads, 1) + 1), name="drain_head")
        # a product's vector beat (``lanes``) or the embedding's weight beat (whole); no reset
        self.beat = Signal(data.ArrayLayout(signed(8), p.beat_bytes), reset_less=True)
        self.row = Signal(data.ArrayLayout(signed(8), c.head_dim))
        self.krow = Signal(data.ArrayLayout(signed(8), c.head_dim))
        # a gather's rows go to ``krow`` (K rows for a KV write) or ``row`` (:meth:`gathers`)
        self.gather_k = Signal(name="gather_k")
        # the beat's controls (and its loading flags): a copy a group of bits (:meth:`feeds`)
        groups = -(-8 * p.beat_bytes // GROUP_BITS)
        self.have = Mirrored(groups, name="have")
        # the rows loaded from now on are past the vector (set as its last loads, then cleared)
        self.padding = Mirrored(groups, name="padding")
        self.p_mult, self.p_shift = Signal(unsigned(31)), Signal(unsigned(6))
        # a matrix-vector operator's weights flow, and where its results go: registered as it
        # enters its streaming phase, no program-counter decode before the unit's take
        self.streaming = Signal(name="streaming")
        self.sink_of = {sink: Signal(name=f"sink_{sink.value}") for sink in Sink}
        # likewise every other handshake with a prefetch buffer, a reader or a unit's data
        # stream: a flag registered as the operator enters the phase that makes it (see
        # :meth:`feeds`)
        self.flag = {name: Mirrored(groups, name=name) if name in BEAT_FLAGS else
                     Signal(name=name) for name in FEEDS}
        self.head_rows = c.head_dim // p.vector_width  # scratchpad rows of a head
        self.index_bits = max(1, (self.head_rows - 1).bit_length())
        # the first element of the buffer the operator writes (registered as it begins)
        self.w_base = Signal(range(self.sp.rows * p.vector_width), name="w_base")
        # the operator's matrix-vector command and its readers' first rows and counts,
        # registered as it begins (see :meth:`_arrive`): no program-counter decode reaches a
        # unit's command or a read address
        self.mvu_cmd = Signal(units.mvu.cmd.payload.shape(), name="mvu_cmd")
        rows = self.sp.rows
        self.first = [Signal(range(rows + 1), name=f"reader{k}_first") for k in (0, 1)]
        self.count = [Signal(range(rows + 1), name=f"reader{k}_count") for k in (0, 1)]
        # an operator's first cycle: the counters ``i``, ``j``, ``k`` are cleared then rather
        # than with the last handshake of the operator before (see :meth:`next_op`), so that
        # no unit's handshake reaches their next-state logic; an operator's own assignments
        # in that cycle take precedence (elaborated after these)
        self.fresh = Signal(name="fresh")
        m.d.sync += self.fresh.eq(0)
        # an operator's last handshake raises ``leaving`` and nothing else: the next cycle
        # (:data:`LEAVE_LATENCY`), with the operator's case idle, its flags are lowered and the
        # next operator's raised (see :meth:`leave`), so that no unit's handshake reaches the
        # many registers an operator's change sets
        self.leaving = Signal(name="leaving")
        m.d.sync += self.leaving.eq(0)
        with m.If(self.fresh):
            m.d.sync += [self.i.eq(0), self.j.eq(0), self.k.eq(0), self.padding.eq(0)]
        self._embed_pipeline()

    def _batch_state(self, m, token, param_port: Port) -> None:
        """A batch's state: the token being run (its bank), its position, the batch's last,
        a scratchpad bank per token and the gain memory the first token's norms fill."""
        c, p = self.c, self.p
        # the batch's token being run (its bank) and its position; the batch's last
        self.tok = Signal(range(self.batch), name="tok")
        self.last_tok = Signal(range(self.batch), name="last_tok")
        self.pos = Signal(range(c.max_context), name="tok_pos")
        if p.contexts > 1:  # the token's context
            self.ctx = Signal(range(p.contexts), name="tok_ctx")
        self.sp = BankedScratchpad(m, c, p.vector_width, self.batch, self.tok)
        self.first_tok = Signal(name="first_tok")
        m.d.comb += self.first_tok.eq(equals(self.tok, 0))
        # a norm's gains come once a pass: the first token's are kept and replayed for
        # the others
        depth = c.hidden // p.param_width
        m.submodules.gains = gains = memory.Memory(shape=param_port.data.shape(),
                                                   depth=depth, init=[])
        self.gain_write = gains.write_port()
        self.gain_count = Signal(range(depth + 1), name="gain_count")
        self.replay = RowReader(m, gains.read_port(), depth, param_port.data.shape(),
                                name="gain_replay")

    def param_entry(self, index: int):
        """Entry ``index`` of the parameter buffer's beat."""
        return self.param.data if self.p.param_width == 1 else self.param.data[index]

    @property
    def silu_index(self):
        """The SiLU table's entry this cycle: it may take one in its first (``fresh``)."""
        return Mux(self.fresh, 0, self.i)

    def _per_layer(self, values, shape):
        """The current layer's entry of a constant table, registered (the layer changes
        operators before any of them reads it)."""
        out = Signal(shape)
        with self.m.Switch(self.layer):
            for k, v in enumerate(values):
                with self.m.Case(k):
                    self.m.d.sync += out.eq(int(v))
        return out

    def _counters(self):
        """The state every operator starts from, but the counters ``fresh`` clears."""
        return [self.phase.eq(0), self.lane.eq(0),
                self.head.eq(0), self.drain_head.eq(0), self.have.eq(0), self.streaming.eq(0),
                self.gather_k.eq(0),
                *(flag.eq(0) for flag in self.sink_of.values()),
                *(flag.eq(0) for flag in self.flag.values())]

    def _stream(self, op: Operator):
        """Assignments that enter ``op``'s streaming phase (phase 2)."""
        return [self.phase.eq(2), self.streaming.eq(1), self.sink_of[op.sink].eq(1),
                self.flag["loading"].eq(0)]

    def _enter(self, name: str, phase: int | None = None, *, leave: str | None = None):
        """Assignments that raise flag ``name`` (and lower ``leave``), entering ``phase``."""
        out = [self.flag[name].eq(1)]
        if leave is not None:
            out.append(self.flag[leave].eq(0))
        if phase is not None:
            out.append(self.phase.eq(phase))
        return out

    def reset(self) -> None:
        """A new token: the first operator, the first layer."""
        assert OPERATORS[0].unit is Unit.EMBED
        self.m.d.sync += [*self._counters(), self.i.eq(0), self.j.eq(0), self.k.eq(0),
                          self.padding.eq(0),
                          self.pc.eq(0), self.layer.eq(0),
                          self.flag["embed_param"].eq(1), self.flag["embedding"].eq(1),
                          self.w_base.eq(self.sp.start[OPERATORS[0].dst])]
        if self.batch > 1:
            self.m.d.sync += [self.tok.eq(0), *self._token_at(0),
                              self.last_tok.eq(self.token.count - 1)]

    def _token_at(self, index):
        """Assignments that make the batch's token ``index`` (0 or ``tok + 1``) the one run:
        its position (a batched ingest's: the batch's plus the index) and context."""
        token = self.token
        if self.p.contexts == 1:
            return [self.pos.eq(token.pos if isinstance(index, int) else self.pos + 1)]
        return [self.pos.eq(token.pos[index]), self.ctx.eq(token.ctx[index])]

    def run(self, op: Operator) -> None:
        """Elaborate operator ``op``'s case of the program counter."""
        {Unit.EMBED: self.embed, Unit.NORM: self.norm, Unit.MATVEC: self.linear,
         Unit.ROPE: self.rope, Unit.KV_WRITE: self.kv_write, Unit.ATTENTION: self.attention,
         Unit.SILU_TABLE: self.silu_table}[op.unit](op)

    def next_op(self, op: Operator) -> None:
        """``op`` is done (its last handshake): on to the next operator a cycle later."""
        self.m.d.sync += self.leaving.eq(1)

    def leave(self) -> None:
        """The cycle after an operator's last handshake (``leaving``; its case is idle then):
        on to the next operator (after a layer's last, the next layer). Elaborated once,
        outside the operators' cases."""
        m = self.m
        with m.If(self.leaving):
            m.d.sync += [*self._counters(), self.fresh.eq(1)]
            with m.Switch(self.pc):
                for pc in range(len(OPERATORS)):
                    with m.Case(pc):
                        if self.batch > 1 and OPERATORS[pc].unit in PER_TOKEN:
                            # the batch's next token through the same operator, or on
                            with m.If(self.tok != self.last_tok):
                                m.d.sync += [self.tok.eq(self.tok + 1),
                                             *self._token_at(self.tok + 1), *self._arrive(pc)]
                            with m.Else():
                                m.d.sync += [self.tok.eq(0), *self._token_at(0)]
                                self._advance(pc)
                        else:
                            self._advance(pc)

    def _advance(self, pc: int) -> None:
        """The assignments that move on from operator ``pc`` (after a layer's last, to the
        next layer)."""
        m = self.m
        if pc == last_layer_pc():  # the next layer, or the final norm
            with m.If(self.layer == self.n_layers - 1):
                m.d.sync += [self.pc.eq(pc + 1), *self._arrive(pc + 1)]
            with m.Else():
                m.d.sync += [self.pc.eq(first_layer_pc()), self.layer.eq(self.layer + 1),
                             *self._arrive(first_layer_pc())]
        else:
            m.d.sync += [self.pc.eq(pc + 1), *self._arrive(pc + 1)]

    def _arrive(self, pc: int):
        """Assignments that raise the flags operator ``pc`` starts with — its unit's command
        (the LM head's only when the token keeps its logits), the SiLU table's entries — and
        register the first element of the buffer it writes."""
        if pc >= len(OPERATORS):
            return []
        op = OPERATORS[pc]
        out = [self.w_base.eq(self.sp.start[op.dst])] if op.dst is not None else []
        for k, run in enumerate(self._reads(op)):
            if run is not None:
                out += [self.first[k].eq(run[0]), self.count[k].eq(run[1])]
        if op.unit is Unit.MATVEC:
            cols, rows = getattr(self.c, op.cols), getattr(self.c, op.rows)
            command = {"rows": rows // self.p.rows_per_beat, "beats": -(-cols // self.p.lanes),
                       "out_bits": OutBits[f"INT{op.out_bits}"], "reuse": op.reuse}
            out.append(self.mvu_cmd.eq(self.mvu_cmd.shape().const(command)))
            if self.batch > 1:  # every token's vector
                out.append(self.mvu_cmd.vectors.eq(self.token.count))
        if op.unit is Unit.EMBED:  # a batch's later tokens (the first's: :meth:`reset`)
            out += [self.flag["embed_param"].eq(1), self.flag["embedding"].eq(1)]
        if op.unit is Unit.SILU_TABLE:
            out.append(self.flag["silu"].eq(1))
        elif pc == lm_head_pc():  # it waits for the sampler (:meth:`matvec_streams`)
            out.append(self.flag["cmd_sample"].eq(self.keep_any))
        elif op.unit in COMMAND_FLAGS:
            out.append(self.flag[COMMAND_FLAGS[op.unit]].eq(1))
        return out

    def _reads(self, op: Operator):
        """``(first row, rows)`` of the runs ``op``'s two readers make (``None``: no run).
        The attention's and the KV write's first run; each later one follows from it."""
        c, vw, row_of = self.c, self.p.vector_width, self.sp.row_of
        if op.unit is Unit.NORM:
            return (row_of[op.src], c.hidden // vw), None
        if op.unit is Unit.ROPE:
            return (row_of[op.src], getattr(c, op.heads) * c.head_dim // vw), None
        if op.unit is Unit.KV_WRITE:
            return (row_of["k"], self.head_rows), None
        if op.unit is Unit.ATTENTION:
            return (row_of[op.src], self.p.heads_parallel * self.head_rows), None
        if op.unit is Unit.MATVEC:
            load = None if op.reuse else (row_of[op.src], getattr(c, op.cols) // vw)
            rows = getattr(c, op.rows) // vw  # the residual's rows, or the gate's
            if op.sink is Sink.ADD:
                return load, (row_of[op.dst], rows)
            if op.sink is Sink.SWIGLU:
                return load, (row_of["g"], rows)
            return load, None
        return None, None

    def _start(self, k: int) -> None:
        """Reader ``k`` begins the run registered for it."""
        (self.sp.reader0, self.sp.reader1)[k].start(self.first[k], self.count[k])
