"""The KV cache side of the attention unit (:class:`~heteroreason.rtl.decoder.attention.
Attention`): the cache's rows and ports, on chip or behind the memory ports, the requests a job
makes, and the rows each pass takes."""

from amaranth.hdl import Array, Cat, Const, Signal, signed
from amaranth.lib import data, memory, stream, wiring
from amaranth.lib.wiring import In, Out

from heteroreason.rtl.compare import equals
from heteroreason.rtl.decoder.crossing_shared import SharedCrossingSender
from heteroreason.rtl.decoder.kv_aside import KvRowsAside, store_layout
from heteroreason.rtl.decoder.pipeline import delay

__all__ = ["AttentionMemory", "kv_cache_rows", "kv_memory_ports"]


def kv_cache_rows(*, layers: int, kv_heads: int, max_context: int, contexts: int = 1) -> int:
    """Rows of the KV cache (a K and a V row each): every layer's KV heads' ``max_context``
    positions; with several contexts a region each, padded to a power of two (the context id
    is the row address's top bits: no adder on the address path)."""
    rows = layers * kv_heads * max_context
    return rows if contexts == 1 else contexts << (rows - 1).bit_length()


def kv_memory_ports(*, head_dim: int, rows: int, max_context: int, kv_rows: int = 1) -> dict:
    """The members of an external KV cache's ports (see :class:`Attention`): a read beat
    carries ``kv_rows`` rows."""
    row = data.ArrayLayout(signed(8), head_dim)
    group = data.ArrayLayout(row, kv_rows)
    request = stream.Signature(data.StructLayout({
        "addr": range(rows), "count": range(1, max_context + 1)}))
    return {
        "kv_store": Out(stream.Signature(data.StructLayout({
            "addr": range(rows), "k": row, "v": row}))),
        "k_req": Out(request), "v_req": Out(request),
        "k_rows": In(stream.Signature(group)), "v_rows": In(stream.Signature(group)),
    }


class AttentionMemory:
    """The KV cache half of :class:`~heteroreason.rtl.decoder.attention.Attention` (which
    holds the ports, the parameters and the stages' signals: ``f`` the score stage's, ``b``
    the stage after it)."""

    def _base(self, layer, kv_head):
        """The cache row of position 0 of ``kv_head`` in ``layer`` within a region, read from
        a table of the bases (a multiply would put a DSP on the address path)."""
        head_bits = len(kv_head)
        bases = [((index >> head_bits) * self._kv_heads + (index & ((1 << head_bits) - 1)))
                 * self._max_context for index in range(1 << (len(layer) + head_bits))]
        rows = self._cache_rows // self._contexts
        return Array(Const(b if b <= rows else 0, range(rows + 1)) for b in bases)[
            Cat(kv_head, layer)]

    def _address(self, beat, pos=None):
        """The cache row of ``pos`` (``None``: 0) of ``beat``'s layer, KV head and context
        (the region's top bits, see :func:`kv_cache_rows`)."""
        row = self._base(beat.layer, beat.kv_head)
        row = row if pos is None else row + pos
        if self._contexts == 1:
            return row
        return Cat(row[:(self._cache_rows // self._contexts - 1).bit_length()], beat.ctx)

    def far_members(self) -> dict:
        """The members :meth:`far_side` gives its surroundings in place of the crossings'
        (name -> ``In``/``Out``): the KV write and store with their rows, and the key and
        value rows that reach it on one crossing (``kv_read``)."""
        if not self._rows_aside:
            return {}
        store = store_layout(self._write_layout, range(self._cache_rows))
        rows = In(stream.Signature(self._read_layout))
        return {"kv_write": In(stream.Signature(self._write_layout)),
                "kv_store": Out(stream.Signature(store)), "k_rows": rows, "v_rows": rows}

    def far_side(self, m, ends: dict) -> dict:
        """What the unit's surroundings use of it, built in ``m`` from the far halves of its
        crossings (:func:`~heteroreason.rtl.decoder.crossing.far_ends`, name -> stream): the
        same streams, but with an external cache behind crossings, ``kv_write`` and
        ``kv_store`` carry the rows again (a :class:`~heteroreason.rtl.decoder.kv_aside.
        KvRowsAside`, submodule ``xing_kv_rows_aside``, which the fit counts as glue,
        keeps them beside the unit), and ``k_rows`` and ``v_rows`` are the two ways of the
        unit's ``kv_read`` crossing (a :class:`~heteroreason.rtl.decoder.crossing_shared.
        SharedCrossingSender`, submodule ``xing_kv_read_tx``)."""
        if not self._rows_aside:
            return dict(ends)
        m.submodules.xing_kv_rows_aside = aside = KvRowsAside(
            write_layout=self._write_layout, addr_shape=range(self._cache_rows))
        wiring.connect(m, aside.meta, ends["kv_write"])
        wiring.connect(m, ends["kv_store"], aside.addr)
        m.submodules.xing_kv_read_tx = read = SharedCrossingSender(shape=self._read_layout,
                                                                   ways=2)
        wiring.connect(m, read.link, self.kv_read)
        return dict(ends) | {"kv_write": aside.write, "kv_store": aside.store,
                             "k_rows": read.streams[0], "v_rows": read.streams[1]}

    def _cache(self, m, f, b, idle) -> None:
        """The KV cache: on chip, or behind the memory ports; writes are accepted whenever
        neither stage holds a job (``idle``). The score stage reads the key rows, the stage
        after it the value rows."""
        w = self._io.kv_write.payload
        f.write_pending = Const(0)
        if self._external_kv:
            m.d.comb += [
                self._io.kv_store.valid.eq(self._io.kv_write.valid & idle),
                self._io.kv_store.payload.addr.eq(self._address(w, w.pos)),
                self._io.kv_write.ready.eq(idle & self._io.kv_store.ready),
            ]
            if not self._rows_aside:  # the rows leave with their address
                m.d.comb += [self._io.kv_store.payload.k.eq(w.k),
                             self._io.kv_store.payload.v.eq(w.v)]
            if self._crossings:
                # a write is pending until the memory's port has taken it (every credit of
                # the crossing home): a job's reads go out after it
                f.write_pending = ~self._halves["kv_store"].idle
            return
        nr = self._kv_rows
        shift = (nr - 1).bit_length()
        row = data.ArrayLayout(signed(8), self._head_dim)
        rows = self._cache_rows
        # a bank a position modulo ``kv_rows``: a job's rows start at a multiple of it
        k_wrs, v_wrs, k_rds, v_rds = [], [], [], []
        for bank in range(nr):
            suffix = "" if nr == 1 else str(bank)
            keys = memory.Memory(shape=row, depth=rows // nr, init=[])
            values = memory.Memory(shape=row, depth=rows // nr, init=[])
            m.submodules["keys" + suffix], m.submodules["values" + suffix] = keys, values
            k_wrs.append(keys.write_port())
            v_wrs.append(values.write_port())
            k_rds.append(keys.read_port())
            v_rds.append(values.read_port())
        # a write is registered on its way in (address, rows, enable): the cache's ports are
        # fed from flip-flops; a job waits for it (``write_pending``)
        taken = self._io.kv_write.valid & idle
        addr = Signal(range(rows), name="kv_write_addr")
        k = Signal(row, name="kv_write_k", reset_less=True)
        v = Signal(row, name="kv_write_v", reset_less=True)
        en = Signal(name="kv_write_en")
        m.d.sync += [addr.eq(self._address(w, w.pos)), k.eq(w.k), v.eq(w.v),
                     en.eq(taken)]
        f.write_pending = en
        m.d.comb += self._io.kv_write.ready.eq(idle)
        for bank, (k_wr, v_wr) in enumerate(zip(k_wrs, v_wrs, strict=True)):
            bank_en = en & equals(addr[:shift], bank) if nr > 1 else en
            m.d.comb += [k_wr.addr.eq(addr[shift:]), k_wr.data.eq(k), k_wr.en.eq(bank_en),
                         v_wr.addr.eq(addr[shift:]), v_wr.data.eq(v), v_wr.en.eq(bank_en)]
        for ports, stage in ((k_rds, f), (v_rds, b)):
            for port in ports:
                m.d.comb += port.addr.eq(stage.start[shift:] + stage.issued)
        f.k_rd = Cat(p.data for p in k_rds)
        b.v_rd = Cat(p.data for p in v_rds)

    def _rows(self, m, s, state, kind):
        """The pass's cache rows (``kv_rows`` of them), registered beside its multipliers:
        ``(rows, valid, last)`` two cycles after each cycle's rows are taken (from the on-chip
        banks' synchronous read, or from the port and a register); ``last``: they are the
        pass's last cycle of rows. ``s``: the stage whose pass takes them."""
        in_pass = s.state[state] & s.issuing
        group = data.ArrayLayout(data.ArrayLayout(signed(8), self._head_dim), self._kv_rows)
        if self._external_kv:
            port = self._io.k_rows if kind == "k" else self._io.v_rows
            m.d.comb += port.ready.eq(in_pass)
            taken = port.valid & in_pass
            # the port's rows land in a fabric register of their own (kept: not packed into
            # the multipliers' input registers), where a crossing from the memory's side ends
            rows = delay(m, port.payload, 1, name=f"{kind}_port_row", reset_less=True,
                         keep=True)
        else:
            taken = in_pass
            rows = data.View(group, s.k_rd if kind == "k" else s.v_rd)
        last = delay(m, taken & s.issue_last, 2, name=f"{kind}_row_last")
        self._issue(m, s, taken)
        return (delay(m, rows, 1, name=f"{kind}_row", reset_less=True),
                delay(m, taken, 2, name=f"{kind}_row_valid"), last)

    def _requests(self, m, f, b, handoff, divide) -> None:
        """The key rows' request goes out as the score stage starts a job; the value rows'
        once the stage after it holds the job and either the score stage has requested the
        key rows of a later job (on shared memory ports those come first: the score stage
        takes them while this job's exponentials are computed) or the division begins
        (``divide``: no later job has come; its 47 cycles cover part of the memory's
        latency)."""
        k_pending, v_pending = Signal(name="k_pending"), Signal(name="v_pending")
        v_waiting = Signal(name="v_waiting")  # the job handed over, its values not requested
        k_since = Signal(name="k_since")  # a key request taken since the last hand-over
        starting = delay(m, f.starting, 1, name="starting")
        with m.If(starting):  # ``start`` is ready the cycle after the command
            m.d.sync += k_pending.eq(1)
        with m.If(handoff):
            m.d.sync += [v_waiting.eq(1), k_since.eq(0)]
        with m.If(v_waiting & (k_since | divide)):
            m.d.sync += [v_waiting.eq(0), v_pending.eq(1)]
        for req, pending, s in ((self._io.k_req, k_pending, f), (self._io.v_req, v_pending, b)):
            m.d.comb += [req.valid.eq(pending), req.payload.addr.eq(s.start),
                         req.payload.count.eq(s.job.length)]
            with m.If(req.valid & req.ready):
                m.d.sync += pending.eq(0)
        with m.If(self._io.k_req.valid & self._io.k_req.ready):  # never in a hand-over's cycle
            m.d.sync += k_since.eq(1)
