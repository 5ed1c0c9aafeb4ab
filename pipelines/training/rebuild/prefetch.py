"""Read ahead: produce the next item on a background thread while the consumer works on this one, or
several items on a few threads, in order."""

from __future__ import annotations

import queue
import threading
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from typing import TypeVar

T = TypeVar("T")
R = TypeVar("R")


class PrefetchingIterator:
    """Iterate `source` on a background thread, `depth` items ahead of the consumer: the next batch is
    rebuilt while the current one is used. Errors surface in the consumer; `close()` stops early."""

    _DONE = object()

    def __init__(self, source: Iterator, depth: int = 1) -> None:
        self._queue: queue.Queue = queue.Queue(maxsize=max(1, depth))
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, args=(source,), daemon=True, name="seqlake-prefetch")
        self._thread.start()

    def _run(self, source: Iterator) -> None:
        try:
            for item in source:
                if not self._put(item):
                    return
            self._put(self._DONE)
        except BaseException as error:  # handed to the consumer, raised there
            self._put(error)

    def _put(self, item) -> bool:
        """Queue `item`, waiting for room unless the consumer closed; whether it was queued."""
        while not self._stop.is_set():
            try:
                self._queue.put(item, timeout=0.1)
                return True
            except queue.Full:
                continue
        return False

    def __iter__(self) -> PrefetchingIterator:
        return self

    def __next__(self):
        item = self._queue.get()
        if item is self._DONE:
            self._queue.put(item)  # iteration stays finished
            raise StopIteration
        if isinstance(item, BaseException):
            raise item
        return item

    def close(self) -> None:
        self._stop.set()
        self._thread.join()

    def __enter__(self) -> PrefetchingIterator:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def ordered_map(function: Callable[[T], R], items: Iterable[T], workers: int = 2) -> Iterator[R]:
    """`function` over `items` on `workers` threads, results in the order of `items`, at most
    `workers` items in flight (bounded memory). Worth it where the work releases the GIL (Arrow,
    numpy, DuckDB, Parquet decoding), as a batch's rebuild does."""
    if workers <= 1:
        yield from map(function, items)
        return
    with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="seqlake-rebuild") as pool:
        pending: deque[Future] = deque()
        try:
            for item in items:
                pending.append(pool.submit(function, item))
                if len(pending) >= workers:
                    yield pending.popleft().result()
            while pending:
                yield pending.popleft().result()
        finally:
            for future in pending:
                future.cancel()
