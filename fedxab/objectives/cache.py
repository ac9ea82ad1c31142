"""A bounded, thread-safe memo of objective values, for objectives whose points cost a lot.

Objectives are noise-free and deterministic, so a value computed once can be reused whenever
the same point comes back: the landmine SVM objective keys its cache by (data file, field,
gamma, C), one SVM fit per entry; the average of M client objectives keys it by the point, M
evaluations per entry. The phased algorithms pull the centres of a shared partition's cells,
so the same points come back many times.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Hashable

import numpy as np

from fedxab.errors import ConfigError

__all__ = ["EvaluationCache", "check_cache_size"]


def check_cache_size(value: object, name: str = "objective.cache_size") -> int:
    """A cache size from config: an integer >= 0 (0 disables caching)."""
    if isinstance(value, bool) or not isinstance(value, int | np.integer) or value < 0:
        raise ConfigError(
            name, f"must be a non-negative integer (0 disables caching), got {value!r}"
        )
    return int(value)


class EvaluationCache:
    """A bounded, thread-safe LRU map from a hashable key to a float (``maxsize=0`` disables it).

    ``hits`` and ``misses`` count lookups. One cache may be shared by several objectives whose
    keys cannot collide, as the landmine family's clients share one.
    """

    def __init__(self, maxsize: int) -> None:
        self.maxsize = check_cache_size(maxsize)
        self._data: OrderedDict[Hashable, float] = OrderedDict()
        self._lock = threading.Lock()
        self.hits = 0
        self.misses = 0

    def get(self, key: Hashable) -> float | None:
        with self._lock:
            value = self._data.get(key)
            if value is None:
                self.misses += 1
                return None
            self._data.move_to_end(key)
            self.hits += 1
            return value

    def put(self, key: Hashable, value: float) -> None:
        if self.maxsize == 0:
            return
        with self._lock:
            self._data[key] = value
            self._data.move_to_end(key)
            while len(self._data) > self.maxsize:
                self._data.popitem(last=False)

    def clear(self) -> None:
        with self._lock:
            self._data.clear()
            self.hits = 0
            self.misses = 0

    def __len__(self) -> int:
        return len(self._data)

    def __repr__(self) -> str:
        return (
            f"EvaluationCache(size={len(self)}, maxsize={self.maxsize}, hits={self.hits}, "
            f"misses={self.misses})"
        )
