"""One BLAS thread for the many small linear-algebra problems of the BO agents.

An FTS agent factors (t + M) x M matrices (M = 50..100) every round, hundreds of agents in a row.
At that size a multi-threaded BLAS spends far longer synchronising its threads than computing:
one 816 x 16 QR took 32 ms with OpenBLAS's 2 threads on a loaded 2-core machine, 0.15 ms with
one. :func:`single_threaded_blas` limits BLAS to one thread for the duration of a block (the
limit is process-wide while the block runs; parallelism, where wanted, comes from running
agents in several processes).
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Iterator

from threadpoolctl import ThreadpoolController

__all__ = ["single_threaded_blas"]


@functools.cache
def _controller() -> ThreadpoolController:
    return ThreadpoolController()


@contextlib.contextmanager
def single_threaded_blas() -> Iterator[None]:
    """Run the block with BLAS limited to one thread."""
    with _controller().limit(limits=1, user_api="blas"):
        yield
