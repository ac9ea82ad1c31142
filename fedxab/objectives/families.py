"""Heterogeneous client families: M local objectives built from one base objective.

Two constructions, each drawing client m's randomness from ``fedxab.seeding.stream(seed,
"family", m)`` (so a client's objective does not depend on how many clients there are):

* :func:`value_offset_family` (Fed-PNE's experiments, [FX]): ``f_m = f + xi_m``; the global
  objective is ``f`` itself.
* :func:`input_shift_family` (PF-PNE's experiments, [PF]): ``f_m(x) = f(clip_X(x - s_m))``;
  the global objective is the average of the clients.
* :func:`gp_sample_family` (DP-FTS-DE's experiments, [DP] App. B.1.1): a GP sample ``f`` on a 1-D
  grid and clients ``f^n = f + d(n, x)``, ``d = +-0.02``; or the heterogeneity study's mixtures
  ``alpha f^n + (1 - alpha) f_base``. The base function is drawn from ``stream(seed, "gp-family")``.

Every client is an :class:`~fedxab.objectives.base.Objective` with its own optimum value and
maximiser (regret is measured per client in PF-PNE, on the global objective in Fed-PNE).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from fedxab.errors import ConfigError, ObjectiveError
from fedxab.objectives.base import Objective
from fedxab.objectives.cache import EvaluationCache, check_cache_size
from fedxab.objectives.gp import (
    GP_FAMILY_ROLE,
    GridObjective,
    _check_grid_size,
    _check_lengthscale,
    gp_grid_values,
)
from fedxab.objectives.optimize import known_maximizers, maximize_on_box
from fedxab.seeding import stream
from fedxab.validation import check_nonnegative

__all__ = [
    "GP_PERTURBATIONS",
    "AverageObjective",
    "ClientFamily",
    "OffsetObjective",
    "ShiftedObjective",
    "gp_sample_family",
    "input_shift_family",
    "value_offset_family",
]


DEFAULT_AVERAGE_CACHE = 1 << 16
"""Points whose value :class:`AverageObjective` keeps (about 10 MB in 1 to 10 dimensions)."""


def _freeze(points: np.ndarray) -> np.ndarray:
    points = np.array(points, dtype=float)
    points.setflags(write=False)
    return points


class OffsetObjective(Objective):
    """``f(x) + offset``: same domain and maximisers as ``base``, optimum shifted by ``offset``."""

    def __init__(self, base: Objective, offset: float) -> None:
        self.base = base
        self.offset = float(offset)
        self.name = f"{base.name}+offset"
        self.separable = bool(getattr(base, "separable", False))
        ms = known_maximizers(base)
        opt = None if base.optimum_value is None else base.optimum_value + self.offset
        super().__init__(base.domain, opt, ms[0] if ms.shape[0] else None)
        self.maximizers = _freeze(ms)

    def _evaluate(self, X: np.ndarray) -> np.ndarray:
        return self.base(X) + self.offset


class ShiftedObjective(Objective):
    """``f_s(x) = f(clip_X(x - s))``: ``base`` with its input shifted by ``shift`` ([PF]'s clients).

    Values stay in the range of ``base`` because the clipped argument stays in X. The optimum:
    for every known maximiser x* of ``base`` with ``x* + s`` in X, ``x* + s`` is a maximiser and
    ``f_s* = f*`` (``f_s <= f*`` everywhere). If none stays inside (or ``base`` has no known
    optimum), ``f_s*`` is the maximum of ``base`` on the reachable set ``clip_X(X - s)`` (per
    coordinate ``[clip(a - s), clip(b - s)]``), computed by :func:`maximize_on_box`, and the
    maximiser is the reachable maximiser y* mapped back as ``clip_X(y* + s)``.
    """

    def __init__(self, base: Objective, shift: Sequence[float] | np.ndarray) -> None:
        self.base = base
        self.name = f"{base.name}+shift"
        s = np.array(shift, dtype=float).reshape(-1)
        if s.shape != (base.dim,) or not np.all(np.isfinite(s)):
            raise ObjectiveError(
                f"{self.name}: shift must be {base.dim} finite numbers, got {np.asarray(shift)!r}"
            )
        s.setflags(write=False)
        self.shift = s
        self.separable = bool(getattr(base, "separable", False))
        lo, hi = base.domain[:, 0], base.domain[:, 1]
        known = known_maximizers(base)
        moved = known + s
        inside = np.all((moved >= lo) & (moved <= hi), axis=1)
        if base.optimum_value is not None and np.any(inside):
            opt = base.optimum_value
            maximizers = moved[inside]
        else:
            reach = np.column_stack([np.clip(lo - s, lo, hi), np.clip(hi - s, lo, hi)])
            res = maximize_on_box(
                base,
                reach,
                candidates=np.clip(known, reach[:, 0], reach[:, 1]),
                separable=self.separable,
            )
            maximizers = np.clip(res.x + s, lo, hi).reshape(1, -1)
            opt = None  # set from the evaluation below
        super().__init__(base.domain, opt, maximizers[0])
        if opt is None:
            self.optimum_value = float(self(maximizers)[0])
        self.maximizers = _freeze(maximizers)

    def _evaluate(self, X: np.ndarray) -> np.ndarray:
        lo, hi = self.domain[:, 0], self.domain[:, 1]
        return self.base(np.clip(X - self.shift, lo, hi))


class AverageObjective(Objective):
    """``fbar(x) = (1/M) sum_m f_m(x)`` over objectives sharing one domain.

    Its optimum has no closed form in general and is computed numerically at construction by
    :func:`maximize_on_box` (dense sample + local polish), seeded with every known maximiser of
    the components as candidates; with ``compute_optimum=False`` it is left unknown.

    A point costs M evaluations, and the global regret of a run with M clients evaluates fbar
    at every client's pulls, so two things keep that linear in M rather than quadratic:

    * values are memoised per point (an :class:`EvaluationCache` of ``cache_size`` points;
      the phased algorithms pull the centres of shared cells again and again), and a batch
      evaluates each distinct point once;
    * when every component is a :class:`ShiftedObjective` of one base (the input-shift family),
      the M shifted copies of a point go to the base as one vectorized batch.

    Either way the sum runs over the components in order, as ``f_1(x) + f_2(x) + ...``, so the
    values are the same to the last bit as a loop over the components.
    """

    _BATCH_ROWS = 1 << 20
    """Rows per call of the base in the vectorized path (bounds its temporary arrays)."""

    def __init__(
        self,
        objectives: Sequence[Objective],
        *,
        compute_optimum: bool = True,
        cache_size: int = DEFAULT_AVERAGE_CACHE,
    ) -> None:
        objs = tuple(objectives)
        if not objs:
            raise ObjectiveError("average: needs at least one objective")
        dom = objs[0].domain
        for o in objs[1:]:
            if o.domain.shape != dom.shape or not np.array_equal(o.domain, dom):
                raise ObjectiveError(
                    f"average: all objectives must share one domain, got {dom.tolist()} and "
                    f"{o.domain.tolist()}"
                )
        self.objectives = objs
        self.name = f"mean({objs[0].name}, M={len(objs)})"
        self.separable = all(bool(getattr(o, "separable", False)) for o in objs)
        self.cache = EvaluationCache(check_cache_size(cache_size, "average.cache_size"))
        base = getattr(objs[0], "base", None)
        shifts = [o.shift for o in objs if type(o) is ShiftedObjective and o.base is base]
        self._shifts = np.array(shifts) if len(shifts) == len(objs) else None
        super().__init__(dom)
        if compute_optimum:
            cands = np.vstack([known_maximizers(o) for o in objs])
            # the dense search would only fill the memo with points no run pulls
            res = maximize_on_box(self._mean, dom, candidates=cands, separable=self.separable)
            self.optimum_value = res.value
            m = res.x.copy()
            m.setflags(write=False)
            self.maximizer = m

    def _evaluate(self, X: np.ndarray) -> np.ndarray:
        points, where = _distinct_rows(X)
        keys = [p.tobytes() for p in points]
        cached = [self.cache.get(k) for k in keys]
        todo = [i for i, v in enumerate(cached) if v is None]
        values = np.array([0.0 if v is None else v for v in cached])
        if todo:
            values[todo] = self._mean(points[todo])
            for i in todo:
                self.cache.put(keys[i], float(values[i]))
        return values[where.reshape(-1)]

    def _mean(self, X: np.ndarray) -> np.ndarray:
        """``(1/M) sum_m f_m(X)``, the sum accumulated over m in order, without the memo."""
        if self._shifts is None:
            total = np.zeros(X.shape[0])
            for o in self.objectives:
                total += o(X)
            return total / len(self.objectives)
        base = self.objectives[0].base  # type: ignore[attr-defined]
        lo, hi = self.domain[:, 0], self.domain[:, 1]
        m, d = self._shifts.shape
        per_call = max(1, self._BATCH_ROWS // m)
        out = np.empty(X.shape[0])
        for start in range(0, X.shape[0], per_call):
            chunk = X[start : start + per_call]
            moved = np.clip(chunk[None, :, :] - self._shifts[:, None, :], lo, hi)
            values = base(moved.reshape(-1, d)).reshape(m, chunk.shape[0])
            # a running sum over m, in order: the loop's sums (a plain sum may pair terms)
            out[start : start + chunk.shape[0]] = np.cumsum(values, axis=0)[-1]
        return out / m


def _distinct_rows(X: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``np.unique(X, axis=0, return_inverse=True)`` (inverse flat), sorting only the first row
    of each run of equal rows: a phased schedule pulls each cell centre many times in a row, and
    sorting every row of a 10^5-row batch as a record took most of such a run's time."""
    first = np.ones(X.shape[0], dtype=bool)
    first[1:] = np.any(X[1:] != X[:-1], axis=1)
    if X.shape[0] and not first[1:].any():  # one point (a single pull): nothing to sort
        return X[:1].copy(), np.zeros(X.shape[0], dtype=np.intp)
    points, where = np.unique(X[first], axis=0, return_inverse=True)
    return points, where.reshape(-1)[np.cumsum(first) - 1]


@dataclass(frozen=True)
class ClientFamily:
    """A global objective, the M client objectives, and the construction (``kind``).

    A user family (``kind = "user"``, :func:`fedxab.run.assembly.client_family`) has no global
    objective, and holds None for the clients another process hosts."""

    global_objective: Objective | None
    clients: tuple[Objective | None, ...]
    kind: str

    @property
    def n_clients(self) -> int:
        return len(self.clients)

    def client(self, m: int) -> Objective:
        """Client ``m``'s objective, which this process must host (else ObjectiveError)."""
        objective = self.clients[m]
        if objective is None:
            raise ObjectiveError(f"client {m}'s objective is hosted by another process")
        return objective


def _check_common(base: object, n_clients: object, seed: object) -> int:
    if not isinstance(base, Objective):
        raise ConfigError("family.base", f"must be an Objective, got {type(base).__name__}")
    if isinstance(n_clients, bool) or not isinstance(n_clients, int | np.integer) or n_clients < 1:
        raise ConfigError("family.n_clients", f"must be a positive integer, got {n_clients!r}")
    if isinstance(seed, bool) or not isinstance(seed, int | np.integer) or seed < 0:
        raise ConfigError("seed", f"must be a non-negative integer, got {seed!r}")
    return int(n_clients)


def value_offset_family(
    base: Objective, n_clients: int, seed: int, scale: float = 1.0
) -> ClientFamily:
    """Fed-PNE's clients ([FX], experiments): ``f_m = base + xi_m``, ``xi_m ~ N(0, scale^2)``.

    ``xi_m`` is drawn once from ``stream(seed, "family", m)`` ("consistent unit-normal random
    perturbation", PyXAB ``Perturbed_Garland``). Every client shares the base maximisers and has
    optimum ``base* + xi_m``. The global objective is the base itself ([FX]'s global objective is
    the original function; the mean of the offsets is not added), so regret uses the true base f*.
    """
    m_count = _check_common(base, n_clients, seed)
    sd = check_nonnegative("family.scale", scale)
    clients = tuple(
        OffsetObjective(base, sd * float(stream(int(seed), "family", m).standard_normal()))
        for m in range(m_count)
    )
    return ClientFamily(global_objective=base, clients=clients, kind="value_offset")


def input_shift_family(
    base: Objective,
    n_clients: int,
    seed: int,
    shift_scale: float | Sequence[float] | None = None,
) -> ClientFamily:
    """PF-PNE's clients ([PF], experiments): ``f_m(x) = base(clip_X(x - s_m))``.

    ``s_m ~ N(0, diag(sigma_s^2))`` is drawn from ``stream(seed, "family", m)``. ``shift_scale`` is
    sigma_s in input units: one number for every coordinate or one per coordinate; the default
    (None) is 0.05 x the width of each coordinate range (fedxab's choice: [PF] does not give the
    scale). Each client is a :class:`ShiftedObjective` with its optimum: the base optimum at
    ``x* + s_m`` when that stays in X for some known maximiser x*, otherwise computed numerically on
    the reachable inputs.

    The global objective is the average of the client objectives ``fbar`` (an
    :class:`AverageObjective`), whose optimum is computed numerically by :func:`maximize_on_box`.
    """
    m_count = _check_common(base, n_clients, seed)
    widths = base.domain[:, 1] - base.domain[:, 0]
    if shift_scale is None:
        sigma = 0.05 * widths
    elif isinstance(shift_scale, int | float | np.integer | np.floating) and not isinstance(
        shift_scale, bool
    ):
        sigma = np.full(base.dim, check_nonnegative("family.shift_scale", shift_scale))
    else:
        try:
            values = list(shift_scale)  # type: ignore[arg-type]
        except TypeError as exc:
            raise ConfigError(
                "family.shift_scale",
                f"must be a number, a list of {base.dim} numbers or None, got {shift_scale!r}",
            ) from exc
        if len(values) != base.dim:
            raise ConfigError(
                "family.shift_scale",
                f"must have one entry per dimension ({base.dim}), got {len(values)}",
            )
        sigma = np.array([check_nonnegative("family.shift_scale", v) for v in values])
    clients = tuple(
        ShiftedObjective(base, sigma * stream(int(seed), "family", m).standard_normal(base.dim))
        for m in range(m_count)
    )
    return ClientFamily(
        global_objective=AverageObjective(clients), clients=clients, kind="input_shift"
    )


GP_PERTURBATIONS = ("point", "client")
"""How :func:`gp_sample_family` draws the sign of d: per (client, grid point) or per client."""


def gp_sample_family(
    n_clients: int,
    seed: int,
    *,
    lengthscale: float = 0.03,
    grid_size: int = 1000,
    magnitude: float | None = None,
    per: str | None = None,
    alpha: float | None = None,
    sample_seed: int | None = None,
) -> ClientFamily:
    """DP-FTS-DE's synthetic clients ([DP] App. B.1.1).

    The base function ``f`` is a GP sample (SE kernel, ``lengthscale``) on ``grid_size`` equally
    spaced points of [0, 1], min-max normalised to [0, 1] (:class:`~fedxab.objectives.gp.GPGrid`),
    drawn from ``stream(sample_seed if given else seed, "gp-family")``. Every client and the
    global objective is a :class:`~fedxab.objectives.gp.GridObjective` on that grid (nearest-point
    evaluation, exact optimum and maximisers).

    ``alpha = None`` (default), the main construction of App. B.1.1: client n has
    ``f^n(x) = f(x) + d(n, x)`` with ``d = +magnitude`` or ``-magnitude`` with probability 1/2
    each (``magnitude`` default 0.02), drawn from ``stream(seed, "family", n)``:

    * ``per = "point"`` (default, the literal reading of the paper): independently per (client, grid
      point), so ``|f^n - f| = magnitude`` everywhere and ``|f^1 - f^n| <= 2 magnitude``;
    * ``per = "client"``: one sign per client, a constant offset (the alternative reading).

    The global objective is ``f`` itself (client values lie in [-magnitude, 1 + magnitude]).

    ``alpha`` in [0, 1], the heterogeneity study (App. B.1.2): client n draws its own GP
    sample ``g^n`` from ``stream(seed, "family", n)``, and ``f^n = alpha g^n + (1 - alpha) f``
    with ``f`` (= f_base) and each ``g^n`` normalised to [0, 1] before mixing (fedxab's choice),
    so every ``f^n`` lies in [0, 1]; ``alpha = 1`` gives independent functions, ``alpha = 0``
    identical ones. No +-d perturbation is added (``magnitude``/``per`` must be left out). The
    global objective is the clients' average ``(1/N) sum_n f^n`` (itself a grid function with an
    exact optimum): the study only states per-agent regret, and with ``alpha = 1`` the base
    function is unrelated to every client.

    Client n depends only on ``(seed, n)`` (and the base function), never on ``n_clients``.
    """
    if isinstance(n_clients, bool) or not isinstance(n_clients, int | np.integer) or n_clients < 1:
        raise ConfigError("family.n_clients", f"must be a positive integer, got {n_clients!r}")
    if isinstance(seed, bool) or not isinstance(seed, int | np.integer) or seed < 0:
        raise ConfigError("seed", f"must be a non-negative integer, got {seed!r}")
    ell = _check_lengthscale(lengthscale, "family.lengthscale")
    size = _check_grid_size(grid_size, "family.grid_size")
    if sample_seed is not None and (
        isinstance(sample_seed, bool)
        or not isinstance(sample_seed, int | np.integer)
        or sample_seed < 0
    ):
        raise ConfigError(
            "family.sample_seed", f"must be a non-negative integer or None, got {sample_seed!r}"
        )
    m_count, seed = int(n_clients), int(seed)
    base_seed = seed if sample_seed is None else int(sample_seed)
    f = gp_grid_values(stream(base_seed, GP_FAMILY_ROLE), size, ell)

    if alpha is not None:
        a = check_nonnegative("family.alpha", alpha)
        if a > 1.0:
            raise ConfigError("family.alpha", f"must lie in [0, 1], got {alpha!r}")
        for name, value in (("magnitude", magnitude), ("per", per)):
            if value is not None:
                raise ConfigError(
                    f"family.{name}",
                    "the mixture family (alpha set) adds no +-d perturbation; leave it out, or "
                    "set alpha = None for the perturbed family",
                )
        mixed = [
            a * gp_grid_values(stream(seed, "family", n), size, ell) + (1.0 - a) * f
            for n in range(m_count)
        ]
        clients = tuple(GridObjective(v, name=f"gp-mixture[{n}]") for n, v in enumerate(mixed))
        total = np.zeros(size)
        for v in mixed:
            total += v
        glob = GridObjective(total / m_count, name=f"mean(gp-mixture, N={m_count})")
        return ClientFamily(global_objective=glob, clients=clients, kind="gp_mixture")

    d = 0.02 if magnitude is None else check_nonnegative("family.magnitude", magnitude)
    mode = "point" if per is None else per
    if mode not in GP_PERTURBATIONS:
        raise ConfigError(
            "family.per", f"unknown value {per!r}; allowed: {', '.join(GP_PERTURBATIONS)}"
        )
    glob = GridObjective(f, name="gp-grid")
    out = []
    for n in range(m_count):
        rng = stream(seed, "family", n)
        signs = 2.0 * rng.integers(0, 2, size=size if mode == "point" else 1) - 1.0
        out.append(GridObjective(f + d * signs, name=f"gp-perturbed[{n}]"))
    return ClientFamily(global_objective=glob, clients=tuple(out), kind="gp_perturbed")
