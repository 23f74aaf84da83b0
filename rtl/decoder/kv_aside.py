"""The K and V rows of an external KV cache's writes kept beside the attention, not sent through
it: the attention, behind its crossings, needs only a write's layer, head, position and
context to compute its row address (and to order its reads after it), so only those cross into
it and only the address comes back; the rows wait here and leave with their address."""

from amaranth.hdl import Cat, Module
from amaranth.lib import data, fifo, stream, wiring
from amaranth.lib.wiring import In, Out

from heteroreason.model import checks
from heteroreason.rtl.limits import SIZE_LIMIT

__all__ = ["ROWS_ASIDE_DEPTH", "KvRowsAside", "store_layout", "without_rows"]

# writes whose address has not come back yet: one a layer and KV head is written at a time,
# so a few are plenty; a full queue holds the writes back, never drops one
ROWS_ASIDE_DEPTH = 4


def without_rows(layout: data.StructLayout) -> data.StructLayout:
    """``layout`` without its ``k`` and ``v`` fields."""
    return data.StructLayout({name: field.shape for name, field in layout
                              if name not in ("k", "v")})


def store_layout(write_layout: data.StructLayout, addr_shape) -> data.StructLayout:
    """A store beat: the address and ``write_layout``'s ``k`` and ``v``."""
    fields = dict(write_layout)
    return data.StructLayout({"addr": addr_shape, "k": fields["k"].shape,
                              "v": fields["v"].shape})


class KvRowsAside(wiring.Component):
    """Splits each ``write`` into its position (``meta``) and its rows (queued), and joins each
    ``addr`` that comes back with the oldest rows into a ``store`` beat.

    Parameters
    ----------
    write_layout : data.StructLayout
        A KV write: ``k`` and ``v`` and the fields that place it (``meta`` carries those).
    addr_shape : shape-castable
        The row address the attention returns for each write, in order.
    depth : int
        Writes whose address is still to come (:data:`ROWS_ASIDE_DEPTH`).

    Members
    -------
    write : In(stream.Signature(write_layout))
    meta : Out(stream.Signature(write_layout without k, v))
    addr : In(stream.Signature(StructLayout addr))
    store : Out(stream.Signature(StructLayout addr, k, v))

    Latency
    -------
    None of its own: ``meta`` is ``write`` in the same cycle, ``store`` is ``addr`` with the
    rows (queued at least a cycle before their address can come back).

    Throughput
    ----------
    A write a cycle while the queue has room.
    """

    def __init__(self, *, write_layout, addr_shape, depth=ROWS_ASIDE_DEPTH):
        checks.integer("depth", depth, low=1, high=SIZE_LIMIT, error=TypeError)
        fields = dict(write_layout)
        if "k" not in fields or "v" not in fields:
            raise TypeError(f"write_layout must have fields 'k' and 'v', not {write_layout!r}")
        self._rows = data.StructLayout({"k": fields["k"].shape, "v": fields["v"].shape})
        self._depth = depth
        super().__init__({
            "write": In(stream.Signature(write_layout)),
            "meta": Out(stream.Signature(without_rows(write_layout))),
            "addr": In(stream.Signature(data.StructLayout({"addr": addr_shape}))),
            "store": Out(stream.Signature(store_layout(write_layout, addr_shape))),
        })

    @property
    def depth(self):
        return self._depth

    def elaborate(self, platform):
        m = Module()
        m.submodules.rows = rows = fifo.SyncFIFO(width=self._rows.size, depth=self._depth)
        w = self.write.payload
        queued = data.View(self._rows, rows.r_data)
        # a write leaves for the attention only with its rows queued, and the other way round
        take = self.write.valid & self.meta.ready & rows.w_rdy
        m.d.comb += [
            self.write.ready.eq(self.meta.ready & rows.w_rdy),
            self.meta.valid.eq(self.write.valid & rows.w_rdy),
            # the queue's word: ``k`` in its low bits, then ``v`` (the rows layout's order)
            rows.w_en.eq(take), rows.w_data.eq(Cat(w.k.as_value(), w.v.as_value())),
            self.store.valid.eq(self.addr.valid & rows.r_rdy),
            self.store.payload.addr.eq(self.addr.payload.addr),
            self.store.payload.k.eq(queued.k), self.store.payload.v.eq(queued.v),
            self.addr.ready.eq(self.store.ready & rows.r_rdy),
            rows.r_en.eq(self.addr.valid & self.store.ready),
        ]
        for name, _ in self.meta.payload.shape():
            m.d.comb += getattr(self.meta.payload, name).eq(getattr(w, name))
        return m

