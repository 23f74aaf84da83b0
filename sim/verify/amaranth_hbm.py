"""An HBM model for Amaranth-simulator testbenches: serves a decoder's weight and parameter
requests from :func:`heteroreason.rtl.decoder.decode_schedule.decode_schedule` images, in order, one
beat per cycle at most, each request's first beat ``latency`` cycles after it is taken, with
random gaps. Requests are taken every cycle and queue (a pipelined memory)."""

from __future__ import annotations

import random
from collections import deque

from heteroreason.model import checks

__all__ = ["hbm_processes", "kv_memory_processes"]


def _server(req, resp, fill, *, rng: random.Random, stall: float, latency: int,
            per_beat: int = 1):
    """A process taking requests on ``req`` every cycle and answering each in order on ``resp``,
    a beat each ``per_beat`` addresses from the request's (``fill`` sets the payload of a beat
    from its first address and the request's end)."""
    async def process(ctx):
        # (cycle the beat may leave, its first address, the request's end)
        queue: deque[tuple[int, int, int]] = deque()
        cycle = 0
        while True:
            ctx.set(req.ready, 1)
            if queue and queue[0][0] <= cycle and rng.random() >= stall:
                fill(ctx, resp, *queue[0][1:])
                ctx.set(resp.valid, 1)
            else:
                ctx.set(resp.valid, 0)
            _, _, rv, addr, count, dv, dr = await ctx.tick().sample(
                req.valid, req.payload.addr, req.payload.count, resp.valid, resp.ready)
            cycle += 1
            if dv and dr:
                queue.popleft()
            if rv:
                queue.extend((cycle + latency, a, addr + count)
                             for a in range(addr, addr + count, per_beat))
    return process


def hbm_processes(ports, schedule, *, rng: random.Random, stall: float = 0.0,
                  stream_bytes: int | None = None, latency: int = 0):
    """Two simulator processes serving ``ports.wreq/wdata`` (in beats of ``stream_bytes``,
    default a whole weight beat) and ``ports.preq/pdata``."""
    if not 0.0 <= stall < 1.0:
        raise ValueError(f"stall must be in [0, 1), not {stall!r}")
    checks.integer("latency", latency, low=0)
    image = schedule.stream_image(schedule.beat_bytes if stream_bytes is None else stream_bytes)

    def weights(ctx, resp, addr, _end):
        ctx.set(resp.payload, [int(v) for v in image[addr]])

    def params(ctx, resp, addr, _end):
        beat = schedule.param_image[addr]
        entries = [resp.payload] if schedule.param_width == 1 else \
            [resp.payload[k] for k in range(schedule.param_width)]
        for entry, (value, mult, shift) in zip(entries, beat.tolist(), strict=True):
            ctx.set(entry.value, value)
            ctx.set(entry.mult, mult)
            ctx.set(entry.shift, shift)

    return (_server(ports.wreq, ports.wdata, weights, rng=rng, stall=stall, latency=latency),
            _server(ports.preq, ports.pdata, params, rng=rng, stall=stall, latency=latency))


def kv_memory_processes(ports, *, rng: random.Random, stall: float = 0.0, latency: int = 0,
                        kv_rows: int = 1):
    """Simulator processes of an external KV cache: ``kv_store`` beats write rows (K and V at
    one address); requests on ``k_req``/``v_req`` read rows back on ``k_rows``/``v_rows``, in
    order, ``kv_rows`` a beat, like :func:`hbm_processes`; a beat's rows past the request's
    count are random bytes (the unit must ignore them). Returns the processes and the dict of
    stored rows."""
    if not 0.0 <= stall < 1.0:
        raise ValueError(f"stall must be in [0, 1), not {stall!r}")
    rows: dict[int, tuple[list[int], list[int]]] = {}

    async def store(ctx):
        ctx.set(ports.kv_store.ready, 1)
        async for _, _, valid, addr, k, v in ctx.tick().sample(
                ports.kv_store.valid, ports.kv_store.payload.addr, ports.kv_store.payload.k,
                ports.kv_store.payload.v):
            if valid:
                rows[addr] = ([int(x) for x in k], [int(x) for x in v])

    def reader(which):
        def fill(ctx, resp, addr, end):
            beat = []
            for a in range(addr, addr + kv_rows):
                if a >= end:  # past the request: whatever the memory holds
                    beat.append([rng.randrange(-128, 128) for _ in range(len(resp.payload[0]))])
                    continue
                if a not in rows:
                    raise AssertionError(f"{which} row {a} read before it was written")
                beat.append(rows[a][which == "v"])
            ctx.set(resp.payload, beat)
        return fill

    return (store,
            _server(ports.k_req, ports.k_rows, reader("k"), rng=rng, stall=stall,
                    latency=latency, per_beat=kv_rows),
            _server(ports.v_req, ports.v_rows, reader("v"), rng=rng, stall=stall,
                    latency=latency, per_beat=kv_rows)), rows
