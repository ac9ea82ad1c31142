"""Partial participation: which clients the server asks in each phase (``[federation]
participation = q``).

Poisson sampling: in phase p, client m is asked exactly when ``u[m] < q``, where ``u`` is the
vector of M uniforms drawn from the stream ``(seed, "participation", p)`` (M draws whatever the
population, so a client's draw depends on nothing but the run seed, the phase and its id). Each
client is asked independently with probability q; the number asked per phase is Binomial(M, q),
and a phase may ask nobody (probability ``(1 - q)^M``).

The draw is a function of the run seed, which every party of a run holds (the clients draw their
noise from it): the server and each client compute the same asked set, on every transport and
after a restart, without a word on the wire. So the sample is *public* to the parties of the run;
what that means for privacy (no amplification by this sample) is in docs/privacy.md.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

import numpy as np

from fedxab.seeding import stream

__all__ = ["Participation"]


@dataclass
class Participation:
    """The asked sets of run ``seed`` with ``n_clients`` clients and rate ``rate`` (q in (0, 1))."""

    seed: int
    n_clients: int
    rate: float
    _last: tuple[int, np.ndarray] | None = field(default=None, repr=False, compare=False)

    def chosen(self, phase: int) -> np.ndarray:
        """Phase ``phase``'s sample as a mask over client ids: ``u < q`` for its M uniforms
        (kept for the phase last asked about: a process hosting many clients draws once)."""
        if self._last is None or self._last[0] != phase:
            u = stream(self.seed, "participation", phase).random(self.n_clients)
            self._last = (phase, u < self.rate)
        return self._last[1]

    def asks(self, client: int, phase: int) -> bool:
        """Whether client ``client`` is asked in phase ``phase``."""
        return bool(self.chosen(phase)[client])

    def asked(self, phase: int, active: Iterable[int]) -> list[int]:
        """The clients of ``active`` asked in phase ``phase``, in increasing order."""
        chosen = self.chosen(phase)
        return sorted(m for m in active if chosen[m])
