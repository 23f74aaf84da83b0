"""An HBM model for Amaranth-simulator testbenches: serves a decoder's weight and parameter
requests from :func:`heteroreason.model.decode_schedule.decode_schedule` images, in order, one
beat per cycle at most, each request's first beat ``latency`` cycles after it is taken, with
random gaps. Requests are taken every cycle and queue (a pipelined memory)."""

from __future__ import annotations

import random
from collections import deque

__all__ = ["hbm_processes"]


def hbm_processes(ports, schedule, *, rng: random.Random, stall: float = 0.0,
                  stream_bytes: int | None = None, latency: int = 0):
    """Two simulator processes serving ``ports.wreq/wdata`` (in beats of ``stream_bytes``,
    default the schedule's lanes) and ``ports.preq/pdata``."""
    if not 0.0 <= stall < 1.0:
        raise ValueError(f"stall must be in [0, 1), not {stall!r}")
    if isinstance(latency, bool) or not isinstance(latency, int) or latency < 0:
        raise ValueError(f"latency must be a non-negative integer, not {latency!r}")
    image = schedule.stream_image(schedule.lanes if stream_bytes is None else stream_bytes)

    def server(req, resp, fill):
        async def process(ctx):
            queue: deque[tuple[int, int]] = deque()  # (cycle the beat may leave, address)
            cycle = 0
            while True:
                ctx.set(req.ready, 1)
                if queue and queue[0][0] <= cycle and rng.random() >= stall:
                    fill(ctx, resp, queue[0][1])
                    ctx.set(resp.valid, 1)
                else:
                    ctx.set(resp.valid, 0)
                _, _, rv, addr, count, dv, dr = await ctx.tick().sample(
                    req.valid, req.payload.addr, req.payload.count, resp.valid, resp.ready)
                cycle += 1
                if dv and dr:
                    queue.popleft()
                if rv:
                    queue.extend((cycle + latency, a) for a in range(addr, addr + count))
        return process

    def weights(ctx, resp, addr):
        ctx.set(resp.payload, [int(v) for v in image[addr]])

    def params(ctx, resp, addr):
        value, mult, shift = (int(v) for v in schedule.param_image[addr])
        ctx.set(resp.payload.value, value)
        ctx.set(resp.payload.mult, mult)
        ctx.set(resp.payload.shift, shift)

    return server(ports.wreq, ports.wdata, weights), server(ports.preq, ports.pdata, params)
