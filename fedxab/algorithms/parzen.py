"""Weighted Parzen estimators over a typed unit box: the densities l(x) and g(x) of TPE.

Bergstra, Bardenet, Bengio & Kégl 2011 ("Algorithms for hyper-parameter optimization", §4):
the Tree-structured Parzen Estimator models ``p(x | y)`` by two densities, ``l(x)`` built from
the observations whose value is among the best fraction gamma and ``g(x)`` from the others
(their eq. 2), and the expected improvement is monotone in ``l(x) / g(x)`` (their §4.1:
``EI(x) ∝ (gamma + (1 - gamma) g(x) / l(x))^-1``), so the next point is the candidate drawn from
``l`` with the largest ``log l(x) - log g(x)``.

Each density here is a weighted mixture with one component per observation plus one prior
component, each a product of one kernel per coordinate (the multivariate form of Falkner, Klein
& Hutter 2018, BOHB §3.2), on the encoded unit box of a typed search space
(``levels[j]``: None for a continuous coordinate, else its number of values n, cell k being
``[k/n, (k+1)/n)``):

- continuous: a normal truncated to [0, 1], centred at the observation, of standard deviation
  ``sigma0 * n_obs^(-1/(D+4))`` (Scott's rule's rate, as in Optuna's multivariate TPE; n_obs is
  the observations' total weight); the prior is N(0.5, 1) truncated;
- ordered discrete (``"int"``, a stepped float): the same normal, evaluated at the n cell centres
  and normalised over them (standard deviation at least one cell);
- categorical: ``(1 - eps)`` on the observation's category plus ``eps / n`` on every category
  (no order between categories); the prior is uniform.

With ``univariate=True`` the density is instead the product over coordinates of one mixture per
coordinate (the original TPE's independent one-dimensional estimators, [TPE] §4.2, as Optuna's
default sampler), and each continuous (or ordered) kernel's standard deviation is the greater of
the distances from its centre to its left and right neighbours along that coordinate (the box's
ends count as neighbours), clipped to ``[1 / min(100, n_obs + 1), 1]`` ([TPE] §4.2: "the
greater of the distances to the left and right neighbor, but clipped to remain in a reasonable
range"): narrow where observations cluster, wide where they are sparse.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from scipy.special import logsumexp, ndtr, ndtri

__all__ = ["KINDS", "ParzenEstimator", "snap"]

KINDS = ("float", "int", "categorical")
_LOG_SQRT_2PI = 0.5 * np.log(2.0 * np.pi)


def snap(U: np.ndarray, levels: Sequence[int | None]) -> np.ndarray:
    """Each discrete coordinate of ``U`` (rows in [0, 1]^D) moved to its cell's centre
    ``(k + 1/2) / n``: the canonical point of the value it decodes to."""
    U = np.array(U, dtype=float, copy=True)
    for j, n in enumerate(levels):
        if n is not None:
            k = np.clip(np.floor(U[..., j] * n), 0, n - 1)
            U[..., j] = (k + 0.5) / n
    return U


class ParzenEstimator:
    """``p(x) = sum_i w_i prod_j k_j(x_j | c_ij) / sum_i w_i`` over ``centres`` (n, D) with
    weights ``weights`` (n,), plus a prior component of weight ``prior_weight``."""

    def __init__(
        self,
        centres: np.ndarray,
        weights: np.ndarray,
        kinds: Sequence[str],
        levels: Sequence[int | None],
        *,
        sigma0: float = 0.2,
        categorical_eps: float = 0.5,
        prior_weight: float = 1.0,
        univariate: bool = False,
    ) -> None:
        self.kinds, self.levels = tuple(kinds), tuple(levels)
        self.univariate = univariate
        dim = len(self.kinds)
        centres = np.asarray(centres, dtype=float).reshape(-1, dim)
        self.centres = np.vstack([centres, np.full((1, dim), 0.5)])  # the prior last
        self.log_w = np.log(np.append(np.asarray(weights, dtype=float), prior_weight))
        self.log_w -= logsumexp(self.log_w)
        n_eff = max(float(np.sum(weights)), 1.0)  # the observations' total weight
        self.sigma = sigma0 * n_eff ** (-1.0 / (dim + 4))
        self.min_sigma = 1.0 / min(100.0, n_eff + 1.0)
        self.eps = categorical_eps
        self._tables = {j: self._level_table(j) for j in range(dim) if self.levels[j] is not None}

    # ------------------------------------------------------------------------ per coordinate
    def _sigmas(self, j: int) -> np.ndarray:
        """The standard deviation of every component along continuous or ordered coordinate j
        (the prior's is 1; an ordered one's at least one cell)."""
        n = self.levels[j]
        if self.univariate:
            s = self._neighbour_gaps(self.centres[:-1, j])
        else:
            s = np.full(len(self.centres) - 1, self.sigma)
        s = np.append(s if n is None else np.maximum(s, 1.0 / n), 1.0)
        return s

    def _neighbour_gaps(self, c: np.ndarray) -> np.ndarray:
        """Each centre's greater distance to its left and right neighbours along one
        coordinate (the ends 0 and 1 included), clipped to ``[min_sigma, 1]`` ([TPE] §4.2)."""
        order = np.argsort(c, kind="stable")
        ends = np.concatenate([[0.0], c[order], [1.0]])
        gaps = np.maximum(np.diff(ends)[:-1], np.diff(ends)[1:])
        out = np.empty_like(c)
        out[order] = np.clip(gaps, self.min_sigma, 1.0)
        return out

    def _level_table(self, j: int) -> np.ndarray:
        """log P(level k | component i) for discrete coordinate j: (components, n)."""
        n = self.levels[j]
        assert n is not None
        k = np.floor(np.clip(self.centres[:-1, j], 0.0, 1.0 - 1e-12) * n).astype(int)
        if self.kinds[j] == "categorical":
            table = np.full((len(self.centres), n), self.eps / n)
            table[np.arange(len(k)), k] += 1.0 - self.eps
            table[-1] = 1.0 / n
        else:
            mids = (np.arange(n) + 0.5) / n
            z = (mids[None, :] - self.centres[:, j, None]) / self._sigmas(j)[:, None]
            log_k = -0.5 * z**2  # normalised in log space: far cells do not underflow to 0
            return log_k - logsumexp(log_k, axis=1, keepdims=True)
        return np.log(table)

    # ------------------------------------------------------------------------------- density
    def log_pdf(self, X: np.ndarray) -> np.ndarray:
        """``log p(x)`` at each row of ``X`` (m, D) (discrete coordinates read by their cell)."""
        X = np.atleast_2d(np.asarray(X, dtype=float))
        if self.univariate:  # a product of one mixture per coordinate
            return sum(
                (logsumexp(self.log_w + self._log_kernel(X, j), axis=1) for j in self._coords()),
                np.zeros(len(X)),
            )
        total = np.tile(self.log_w, (len(X), 1))  # (m, components)
        for j in self._coords():
            total += self._log_kernel(X, j)
        return logsumexp(total, axis=1)

    def _coords(self) -> range:
        return range(len(self.kinds))

    def _log_kernel(self, X: np.ndarray, j: int) -> np.ndarray:
        """``log k_j(x_j | c_ij)`` for every row of ``X`` and component i: (m, components)."""
        if j in self._tables:
            n = self._tables[j].shape[1]  # the coordinate's number of values
            k = np.clip(np.floor(X[:, j] * n), 0, n - 1).astype(int)
            return self._tables[j][:, k].T
        mu, s = self.centres[:, j], self._sigmas(j)
        z = (X[:, j, None] - mu[None, :]) / s[None, :]
        mass = np.log(ndtr((1.0 - mu) / s) - ndtr(-mu / s))
        return -0.5 * z**2 - _LOG_SQRT_2PI - np.log(s) - mass

    def sample(self, rng: np.random.Generator, size: int) -> np.ndarray:
        """``size`` points drawn from the mixture (discrete coordinates at cell centres); in the
        univariate form each coordinate draws its own component."""
        component = rng.choice(len(self.centres), size=size, p=np.exp(self.log_w))
        X = np.empty((size, len(self.kinds)))
        for j in range(len(self.kinds)):
            if self.univariate and j > 0:
                component = rng.choice(len(self.centres), size=size, p=np.exp(self.log_w))
            u = rng.random(size)
            if j in self._tables:
                n = self._tables[j].shape[1]
                cdf = np.cumsum(np.exp(self._tables[j][component]), axis=1)
                k = np.minimum((u[:, None] > cdf).sum(axis=1), n - 1)
                X[:, j] = (k + 0.5) / n
            else:  # inverse CDF of the truncated normal
                mu, s = self.centres[component, j], self._sigmas(j)[component]
                lo, hi = ndtr(-mu / s), ndtr((1.0 - mu) / s)
                p = np.clip(lo + u * (hi - lo), 1e-300, 1.0 - 1e-16)
                X[:, j] = np.clip(mu + s * ndtri(p), 0.0, 1.0)
        return X
