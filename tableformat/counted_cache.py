"""What seqlake's caches share: entries behind one lock, each lookup counted as a hit or a miss."""

from __future__ import annotations

import threading
from collections.abc import Hashable
from typing import Generic, TypeVar

from cachetools import Cache

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")


class CountedCache(Generic[K, V]):
    """A cachetools cache behind one lock, safe to share between threads. `lookup` counts each lookup
    as a hit or a miss, which `hits`, `misses` and `hit_rate` report."""

    def __init__(self, entries: Cache[K, V]) -> None:
        self._entries = entries
        self._lock = threading.Lock()
        self.hits = self.misses = 0

    @property
    def hit_rate(self) -> float:
        lookups = self.hits + self.misses
        return self.hits / lookups if lookups else 0.0

    def lookup(self, key: K) -> V | None:
        """The value kept for `key` (None: not kept), counted as a hit or a miss."""
        with self._lock:
            found = self._entries.get(key)
            if found is None:
                self.misses += 1
                return None
            self.hits += 1
            return found
