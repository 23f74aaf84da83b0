"""Where sweeps run: serially (the default), on a local Dask cluster of ``workers`` processes, or
on an existing cluster (``scheduler`` address, or the ``DASK_SCHEDULER_ADDRESS`` environment
variable that Dask itself reads).

Work goes out in chunks of points, one task per chunk, and comes back in submission order, so
results are identical whichever executor ran them. An executor given ``progress`` calls it with
``(chunks done, chunks)`` as a map starts and as each chunk completes (in completion order on
Dask): what a progress bar needs.

Searches whose next point depends on the last one's result (a capacity search's doubling and
bisection) go out one evaluation at a time (:func:`run_searches`): every search advances at once,
so the workers stay busy to the end instead of each holding one search; a search may name the
points it is likely to ask for next (:class:`Ask`), which a worker otherwise idle evaluates
ahead. A search asks for the same points whichever executor runs it, so its answer is the same.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Generator, Hashable, Iterator, Sequence
from contextlib import contextmanager
from typing import NamedTuple

from heteroreason.model import checks

__all__ = ["SCHEDULER_ENV", "Ask", "chunks", "drive", "executor", "run_chunked",
           "run_searches"]

SCHEDULER_ENV = "DASK_SCHEDULER_ADDRESS"


def chunks(items: Sequence, size: int) -> list[list]:
    if size < 1:
        raise ValueError(f"chunk size must be at least 1, not {size!r}")
    return [list(items[i:i + size]) for i in range(0, len(items), size)]


def _run_chunk(fn: Callable, chunk: list) -> list:
    return [fn(x) for x in chunk]


Progress = Callable[[int, int], None]


class Ask(NamedTuple):
    """What a search yields: the point it needs evaluated now, and the points it is likely to
    ask for next (evaluated ahead only by a worker that would otherwise idle; hashable, so that
    a later ask finds them)."""

    point: Hashable
    ahead: tuple = ()


Search = Generator[Ask, object, object]


def drive(search: Search, fn: Callable):
    """Run one search to its answer here, evaluating each point it asks for with ``fn``."""
    try:
        ask = next(search)
        while True:
            ask = search.send(fn(ask.point))
    except StopIteration as stop:
        return stop.value


class _Serial:
    def __init__(self, progress: Progress | None = None):
        self.progress = progress

    def map(self, fn: Callable, chunked: list[list]) -> list[list]:
        out = []
        for done, chunk in enumerate(chunked):
            if self.progress:
                self.progress(done, len(chunked))
            out.append(_run_chunk(fn, chunk))
        if self.progress:
            self.progress(len(chunked), len(chunked))
        return out

    def searches(self, fn: Callable, searches: list[Search]) -> list:
        out = []
        for done, search in enumerate(searches):
            if self.progress:
                self.progress(done, len(searches))
            out.append(drive(search, fn))
        if self.progress:
            self.progress(len(searches), len(searches))
        return out


class _Dask:
    def __init__(self, client, progress: Progress | None = None):
        self.client = client
        self.progress = progress

    def map(self, fn: Callable, chunked: list[list]) -> list[list]:
        futures = [self.client.submit(_run_chunk, fn, c, pure=False) for c in chunked]
        if self.progress:
            from distributed import as_completed

            self.progress(0, len(futures))
            for done, _ in enumerate(as_completed(futures), 1):
                self.progress(done, len(futures))
        return self.client.gather(futures)

    def searches(self, fn: Callable, searches: list[Search]) -> list:
        """Advance every search at once: a task per point asked for; while fewer tasks run than
        the cluster has threads, the points the searches expect to ask for next."""
        from distributed import as_completed

        slots = max(1, sum(self.client.nthreads().values()))
        futures: dict = {}  # point -> future, asked or evaluated ahead
        waiting: dict = {}  # future -> the searches waiting for it
        asks: list = [None] * len(searches)
        answers: list = [None] * len(searches)
        running = as_completed()
        done = 0

        def submit(point):
            if point not in futures:
                future = self.client.submit(fn, point, pure=False)
                futures[point] = future
                running.add(future)
            return futures[point]

        def advance(k: int, result=None, first=False) -> None:
            nonlocal done
            try:
                ask = next(searches[k]) if first else searches[k].send(result)
            except StopIteration as stop:
                answers[k], asks[k] = stop.value, None
                done += 1
                if self.progress:
                    self.progress(done, len(searches))
                return
            asks[k] = ask
            future = submit(ask.point)
            if future.done():  # evaluated ahead: the search goes on at once
                advance(k, future.result())
            else:
                waiting.setdefault(future, []).append(k)

        def fill() -> None:
            busy = sum(1 for f in futures.values() if not f.done())
            for ask in asks:
                for point in () if ask is None else ask.ahead:
                    if busy >= slots:
                        return
                    if point not in futures:
                        submit(point)
                        busy += 1

        if self.progress:
            self.progress(0, len(searches))
        try:
            for k in range(len(searches)):
                advance(k, first=True)
            fill()
            for future in running:
                for k in waiting.pop(future, ()):
                    advance(k, future.result())
                # a point no search asks for any more is forgotten
                wanted = {ask.point for ask in asks if ask is not None} | \
                    {p for ask in asks if ask is not None for p in ask.ahead}
                for point in [p for p in futures if p not in wanted]:
                    futures.pop(point).cancel()
                fill()
        finally:
            for future in futures.values():
                future.cancel()
        return answers


def _reachable(address: str) -> None:
    """Refuse at once a scheduler address that is malformed or refuses connections (Dask's own
    client retries until its timeout)."""
    import socket
    from urllib.parse import urlsplit

    where = f"the Dask scheduler at {address!r} (--scheduler / ${SCHEDULER_ENV})"
    try:
        parts = urlsplit(address if "://" in address else f"tcp://{address}")
        scheme, host, port = parts.scheme, parts.hostname, parts.port
    except ValueError:  # a malformed host or port
        scheme = host = port = None
    if scheme not in ("tcp", "tls") or not host or port is None:
        raise RuntimeError(f"{where}: not an address of the form tcp://HOST:PORT")
    try:
        with socket.create_connection((host, port), timeout=5):
            pass
    except OSError as exc:
        raise RuntimeError(f"cannot reach {where}: {exc.strerror or exc}") from None


@contextmanager
def executor(*, workers: int | None = None, scheduler: str | None = None,
             progress: Progress | None = None) -> Iterator:
    """A serial executor, or a Dask one (a local cluster of ``workers`` processes, or the
    cluster at ``scheduler`` / ``$DASK_SCHEDULER_ADDRESS``); ``progress`` hears of each
    chunk done."""
    if workers is not None:
        checks.integer("workers", workers, low=1)
    scheduler = scheduler or (None if workers else os.environ.get(SCHEDULER_ENV))
    if not workers and not scheduler:
        yield _Serial(progress)
        return
    try:
        from distributed import Client, LocalCluster
    except ImportError:
        raise RuntimeError("Dask is not installed: pip install -e '.[dask]' (or run serially, "
                           "without --workers / --scheduler)") from None
    if scheduler:
        _reachable(scheduler)
        try:
            client = Client(scheduler, timeout="10s")
        except (OSError, TimeoutError) as exc:
            raise RuntimeError(f"cannot reach the Dask scheduler at {scheduler!r} "
                               f"(--scheduler / ${SCHEDULER_ENV}): {exc}") from None
        try:
            yield _Dask(client, progress)
        finally:
            client.close()
        return
    # no dashboard, and the scheduler's HTTP endpoint on a free port (its default, 8787, is
    # taken when two local clusters run at once)
    cluster = LocalCluster(n_workers=workers, threads_per_worker=1, processes=True,
                           dashboard_address=None,
                           scheduler_kwargs={"dashboard": False, "dashboard_address": ":0"})
    client = Client(cluster)
    try:
        yield _Dask(client, progress)
    finally:
        client.close()
        cluster.close()


def run_searches(ex, fn: Callable, searches: Sequence[Search]) -> list:
    """Each search's answer, in order: a search is a generator that yields :class:`Ask`, is
    sent ``fn(ask.point)``, and returns its answer."""
    return ex.searches(fn, list(searches))


def run_chunked(ex, fn: Callable, points: Sequence, *, chunk_size: int) -> list:
    """``[fn(p) for p in points]`` through ``ex``, ``chunk_size`` points per task."""
    out = []
    for part in ex.map(fn, chunks(points, chunk_size)):
        out.extend(part)
    return out
