"""Deterministic random streams derived from the run seed.

Every random draw in fedxab comes from a stream keyed by ``(seed, role, *keys)`` through
:class:`numpy.random.SeedSequence`: a party that restarts, or that builds
the same object in another process, redraws exactly the same numbers. The global numpy RNG is
never used.
"""

from __future__ import annotations

import hashlib

import numpy as np

_MASK64 = (1 << 64) - 1


def _key_word(key: int | str) -> int:
    """Map a stream key to a non-negative integer usable in a ``SeedSequence`` spawn key."""
    if isinstance(key, bool):
        raise TypeError("stream keys must be int or str, not bool")
    if isinstance(key, int):
        if key < 0:
            raise ValueError(f"stream keys must be non-negative, got {key}")
        return key
    digest = hashlib.blake2b(key.encode("utf-8"), digest_size=8).digest()
    return int.from_bytes(digest, "little")


def seed_sequence(seed: int, role: str, *keys: int | str) -> np.random.SeedSequence:
    """The seed sequence of the stream named ``role`` (e.g. ``"noise"``) and ``keys``."""
    if isinstance(seed, bool) or not isinstance(seed, int) or seed < 0:
        raise ValueError(f"seed must be a non-negative integer, got {seed!r}")
    return np.random.SeedSequence(
        entropy=seed, spawn_key=tuple(_key_word(k) for k in (role, *keys))
    )


def stream(seed: int, role: str, *keys: int | str) -> np.random.Generator:
    """A fresh generator for the stream ``(seed, role, *keys)``."""
    return np.random.Generator(np.random.PCG64(seed_sequence(seed, role, *keys)))


def stream_word(seed: int, role: str, *keys: int | str) -> int:
    """A 64-bit integer drawn once from the stream ``(seed, role, *keys)``."""
    return int(seed_sequence(seed, role, *keys).generate_state(1, np.uint64)[0])


def mix64(*words: int) -> int:
    """A fast, order-sensitive 64-bit hash of integers (SplitMix64 finaliser, Steele et al. 2014).

    Used where a keyed draw is needed millions of times (per partition node) and building a
    ``SeedSequence`` each time would dominate the cost.
    """
    z = 0x9E3779B97F4A7C15
    for w in words:
        z = (z ^ (w & _MASK64)) & _MASK64
        z = (z + 0x9E3779B97F4A7C15) & _MASK64
        z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & _MASK64
        z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & _MASK64
        z ^= z >> 31
    return z
