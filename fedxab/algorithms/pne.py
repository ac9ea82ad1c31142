"""Quantities shared by the phased node elimination family: Fed-PNE, DP-Fed-PNE, PF-PNE.

As defined in [FX] §3 and [PF] §3 (Li et al. 2024)::

    L        = log(c1 T / delta)                       # T = per-client horizon
    tau_h    = ceil((c^2 / nu^2) L rho^(-2h))          # samples a depth-h node needs
    b(n)     = c sqrt(L / n)                           # confidence width after n samples

and the elimination rule at depth h: a node is eliminated iff
``est + width + nu rho^h < est(best) - width(best)``, best = argmax est (ties: smallest index).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from fedxab.validation import (
    check_choice,
    check_constant,
    check_delta,
    check_nu,
    check_positive_int,
    check_rho,
)

PRESETS = ("practical", "theory")


@dataclass(frozen=True)
class PNEConstants:
    """``nu, rho, c, c1, delta`` and the horizon ``T`` of a phased-elimination run."""

    nu: float
    rho: float
    c: float
    c1: float
    delta: float
    horizon: int

    @classmethod
    def resolve(
        cls,
        *,
        n_clients: int,
        horizon: int,
        nu: float = 1.0,
        rho: float = 0.5,
        preset: str = "practical",
        c: float | None = None,
        c1: float | None = None,
        delta: float | None = None,
        c1_exponent_clients: int = 1,
    ) -> PNEConstants:
        """Constants of a preset, explicit values taking precedence.

        ``practical`` (the papers' experiments, [FX] §4, [PF] §4): ``c = 0.1``, ``c1 = 1``.
        ``theory``: ``c = 2``, ``c1 = (2 M^e)^(1/8)`` with ``e = 1`` for Fed-PNE (Lemma B.2) and
        ``e = 2`` for PF-PNE (Lemma A.2). ``delta = min(1/M, 1/2)`` in both (fedxab's default).
        """
        check_choice("algorithm.preset", preset, PRESETS)
        check_positive_int("federation.clients", n_clients)
        check_positive_int("run.budget", horizon)
        if c is None:
            c = 2.0 if preset == "theory" else 0.1
        if c1 is None:
            c1 = (2.0 * n_clients**c1_exponent_clients) ** 0.125 if preset == "theory" else 1.0
        if delta is None:  # 1/M, capped at 1/2 so that one client still has a valid level
            delta = min(1.0 / n_clients, 0.5)
        return cls(
            nu=check_nu("algorithm.nu", nu),
            rho=check_rho("algorithm.rho", rho),
            c=check_constant("algorithm.c", c),
            c1=check_constant("algorithm.c1", c1),
            delta=check_delta("algorithm.delta", delta),
            horizon=horizon,
        )

    @property
    def log_term(self) -> float:
        """``L = log(c1 T / delta)``."""
        return math.log(self.c1 * self.horizon / self.delta)

    def tau(self, h: int) -> int:
        """``tau_h = ceil((c^2/nu^2) L rho^(-2h))``."""
        return math.ceil(self.c**2 / self.nu**2 * self.log_term * self.rho ** (-2 * h))

    def pulls_per_client(self, h: int, n_clients: int) -> int:
        """``ceil(tau_h / M)``: each of M clients' pulls of a depth-h node in one stage-1 depth."""
        return -(-self.tau(h) // n_clients)

    def width(self, n: int | np.ndarray) -> float | np.ndarray:
        """``b(n) = c sqrt(L / n)``."""
        return self.c * np.sqrt(self.log_term / n)

    def slack(self, h: int) -> float:
        """The smoothness slack ``nu rho^h`` added on the candidate's side."""
        return self.nu * self.rho**h


def children(indices: np.ndarray, k: int) -> np.ndarray:
    """All k children of every node in ``indices`` (same depth), in increasing index order."""
    return ((indices[:, None] - 1) * k + 1 + np.arange(k)).ravel()


def eliminate(est: np.ndarray, width: np.ndarray | float, slack: float) -> tuple[np.ndarray, int]:
    """The survivors mask of the elimination rule and the index of the best node.

    A node is eliminated iff ``est + width + slack < est[best] - width[best]``; ``best`` is the
    first argmax (smallest node index), which never eliminates itself.
    """
    w = np.broadcast_to(np.asarray(width, dtype=float), est.shape)
    best = int(np.argmax(est))
    survive = ~(est + w + slack < est[best] - w[best])
    return survive, best
