"""An HBM model for Amaranth-simulator testbenches: serves a decoder's weight and parameter
requests from :func:`heteroreason.model.decode_schedule.decode_schedule` images, in order, one
beat per cycle at most, with random gaps."""

from __future__ import annotations

import random

__all__ = ["hbm_processes"]


def hbm_processes(ports, schedule, *, rng: random.Random, stall: float = 0.0):
    """Two simulator processes serving ``ports.wreq/wdata`` and ``ports.preq/pdata``."""
    if not 0.0 <= stall < 1.0:
        raise ValueError(f"stall must be in [0, 1), not {stall!r}")

    def server(req, resp, fill):
        async def process(ctx):
            queue: list[int] = []
            while True:
                ctx.set(req.ready, 1)
                if queue and rng.random() >= stall:
                    fill(ctx, resp, queue[0])
                    ctx.set(resp.valid, 1)
                else:
                    ctx.set(resp.valid, 0)
                _, _, rv, addr, count, dv, dr = await ctx.tick().sample(
                    req.valid, req.payload.addr, req.payload.count, resp.valid, resp.ready)
                if dv and dr:
                    queue.pop(0)
                if rv:
                    queue.extend(range(addr, addr + count))
        return process

    def weights(ctx, resp, addr):
        ctx.set(resp.payload, [int(v) for v in schedule.weight_image[addr]])

    def params(ctx, resp, addr):
        value, mult, shift = (int(v) for v in schedule.param_image[addr])
        ctx.set(resp.payload.value, value)
        ctx.set(resp.payload.mult, mult)
        ctx.set(resp.payload.shift, shift)

    return server(ports.wreq, ports.wdata, weights), server(ports.preq, ports.pdata, params)
