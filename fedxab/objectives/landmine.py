"""Landmine detection: tuning an RBF SVM per landmine field (a real-data federated objective).

Data: ``LandmineData.mat`` (Liu, Liao & Carin, NIPS 2007, "Semi-supervised multitask learning"):
29 landmine fields, 14,820 radar-image samples in all, 9 features, binary labels (mine / no mine,
about 6.1% positives). The file is distributed with the DP-FTS-DE authors' public code release
(GitHub daizhongxiang/Differentially-Private-Federated-Bayesian-Optimization); fedxab does not ship
it. Its location comes from the config key ``objective.data_path`` or the environment variable
``FEDXAB_LANDMINE`` (a file, or a directory that contains ``LandmineData.mat``).

Objective (the landmine experiments of [FX], [PF] and Dai, Low & Jaillet 2021): each client is ONE
field.
The field is split 50/50 into train and validation halves, stratified by label, with
``random_state=0`` (exactly the authors' ``preprocess.py``: ``train_test_split(features[j],
label[j], test_size=0.5, stratify=label[j], random_state=0)``; the raw features are used, without
standardisation, as in their code). A point ``x = (gamma, C)`` is scored by training
``sklearn.svm.SVC(kernel="rbf", gamma=gamma, C=C)`` on the train half and computing the validation
AUC-ROC of its ``decision_function`` scores. The reward is that AUC, to be MAXIMISED.

Scores: the papers' code calls ``SVC(probability=True)`` and scores ``predict_proba``. That fits
Platt's sigmoid by an internal 5-fold cross-validation drawn from an unseeded random state, so the
same point can give different rewards on different calls. The sigmoid is monotone, so the
AUC usually equals, or nearly equals, the decision-function AUC; but on these imbalanced fields the
cross-validated sigmoid is sometimes fitted with the wrong sign and the ranking is reversed (for
field 28 at the domain centre, one such fit gave a probability AUC of 0.378 against 0.622 from the
decision function). ``SVC(probability=True)`` is also deprecated from scikit-learn 1.9. fedxab
therefore scores the decision function: the reward is a deterministic function of the point, with
no hidden noise.

Optimum: unknown; regret uses ``f* = 1`` (the perfect AUC), the convention of the Fed-PNE paper
([FX]) that PF-PNE follows, so ``optimum_value = 1.0`` and ``maximizer = None``.

Cost: one SVM fit per new point (a few milliseconds on a field of ~500 samples). Evaluations are
cached per (data file, field, gamma, C) in a bounded LRU cache, so repeated pulls of the same node
centre, and evaluations of the global objective at points the clients have already pulled, cost
nothing. Needs scikit-learn (the optional extra ``fedxab[landmine]``).
"""

from __future__ import annotations

import hashlib
import importlib
import math
import os
import threading
import warnings
from collections.abc import Sequence
from dataclasses import dataclass
from dataclasses import field as dc_field
from functools import lru_cache
from pathlib import Path
from typing import Any

import numpy as np
import scipy.io

from fedxab.errors import ConfigError, ObjectiveError
from fedxab.objectives.base import Objective
from fedxab.objectives.cache import EvaluationCache, check_cache_size
from fedxab.objectives.families import AverageObjective, ClientFamily
from fedxab.seeding import stream
from fedxab.validation import check_bool

__all__ = [
    "COORDINATES",
    "C_RANGE",
    "GAMMA_RANGE",
    "LANDMINE_ENV",
    "LANDMINE_FILENAME",
    "LANDMINE_SHA256",
    "N_FEATURES",
    "N_FIELDS",
    "EvaluationCache",
    "FieldSplit",
    "LandmineChecksumWarning",
    "LandmineData",
    "LandmineSVM",
    "landmine_family",
    "load_landmine",
    "resolve_landmine_path",
]

LANDMINE_ENV = "FEDXAB_LANDMINE"
LANDMINE_FILENAME = "LandmineData.mat"
#: sha256 of the published copy (1,085,456 bytes).
LANDMINE_SHA256 = "2163ab20a80e33a8b65593c48cf283c540599dcb291105e63fa4af2ce24c2bea"
N_FIELDS = 29
N_FEATURES = 9
#: Coordinate order of every landmine point: ``x[0]`` is the RBF gamma, ``x[1]`` the SVM C.
COORDINATES = ("gamma", "C")
GAMMA_RANGE = (0.01, 10.0)
C_RANGE = (1e-4, 10.0)
DEFAULT_CACHE_SIZE = 4096
"""SVM fits kept per field."""

_DATA_FIELD = "objective.data_path"
_CHECKSUM_POLICIES = ("warn", "error", "ignore")


class LandmineChecksumWarning(UserWarning):
    """The data file is valid, but its bytes differ from the published copy's (sha256)."""


def _where_to_get_it() -> str:
    return (
        f"fedxab needs the file {LANDMINE_FILENAME} (29 landmine fields, Liu, Liao & Carin 2007). "
        f"Give its location (the file, or the directory holding it) with the config key "
        f"{_DATA_FIELD} or the environment variable {LANDMINE_ENV}. The file is distributed with "
        "the DP-FTS-DE authors' public code release (GitHub "
        "daizhongxiang/Differentially-Private-Federated-Bayesian-Optimization)."
    )


def resolve_landmine_path(path: str | os.PathLike[str] | None = None) -> Path:
    """The data file to read: ``path`` if given, else ``$FEDXAB_LANDMINE``.

    Either may name the file itself or a directory containing ``LandmineData.mat``. Raises
    ``ConfigError("objective.data_path", ...)`` when neither is set or the file does not exist,
    saying what the file is, how to configure it and where it is distributed.
    """
    if path is not None and not isinstance(path, str | os.PathLike):
        raise ConfigError(_DATA_FIELD, f"must be a path (a string) or null, got {path!r}")
    if path is not None and str(path).strip():
        source, raw = _DATA_FIELD, os.fspath(path)
    else:
        env = os.environ.get(LANDMINE_ENV, "")
        if not env.strip():
            raise ConfigError(
                _DATA_FIELD, f"no landmine data file is configured. {_where_to_get_it()}"
            )
        source, raw = f"environment variable {LANDMINE_ENV}", env
    candidate = Path(raw).expanduser()
    if candidate.is_dir():
        candidate = candidate / LANDMINE_FILENAME
    if not candidate.is_file():
        raise ConfigError(
            _DATA_FIELD,
            f"the landmine data file {str(candidate)!r} (from {source}) does not exist. "
            f"{_where_to_get_it()}",
        )
    return candidate.resolve()


def _read_only(a: np.ndarray) -> np.ndarray:
    a.setflags(write=False)
    return a


@dataclass(frozen=True)
class FieldSplit:
    """One field's stratified 50/50 split: train half for fitting, validation half for the AUC."""

    X_train: np.ndarray
    y_train: np.ndarray
    X_val: np.ndarray
    y_val: np.ndarray


@dataclass(frozen=True)
class LandmineData:
    """The 29 fields: ``features[j]`` is (n_j, 9) float, ``labels[j]`` is (n_j,) int in {0, 1}.

    Arrays are read-only. :meth:`split` gives a field's train/validation split (cached: the object
    itself is cached per process by :func:`load_landmine`, so each split is computed once).
    """

    features: tuple[np.ndarray, ...]
    labels: tuple[np.ndarray, ...]
    path: str
    sha256: str
    _splits: dict[int, FieldSplit] = dc_field(default_factory=dict, repr=False, compare=False)
    _lock: threading.Lock = dc_field(default_factory=threading.Lock, repr=False, compare=False)

    @property
    def n_fields(self) -> int:
        return len(self.features)

    @property
    def n_samples(self) -> int:
        return sum(int(x.shape[0]) for x in self.features)

    @property
    def n_features(self) -> int:
        return int(self.features[0].shape[1])

    def split(self, field_index: int) -> FieldSplit:
        """Field ``field_index``'s split: ``train_test_split(test_size=0.5, stratify=y,
        random_state=0)``, as the papers' preprocessing."""
        j = _check_field(field_index, self.n_fields)
        with self._lock:
            cached = self._splits.get(j)
        if cached is not None:
            return cached
        train_test_split = _sklearn().train_test_split
        X_tr, X_va, y_tr, y_va = train_test_split(
            self.features[j],
            self.labels[j],
            test_size=0.5,
            stratify=self.labels[j],
            random_state=0,
        )
        sp = FieldSplit(*(_read_only(np.ascontiguousarray(a)) for a in (X_tr, y_tr, X_va, y_va)))
        with self._lock:
            return self._splits.setdefault(j, sp)


def _bad_file(path: Path, problem: str) -> ConfigError:
    return ConfigError(
        _DATA_FIELD,
        f"{str(path)!r} is not a valid landmine data file: {problem}. Expected {LANDMINE_FILENAME} "
        f"with cell arrays 'feature' ({N_FIELDS} fields of n_j x {N_FEATURES} numbers) and "
        f"'label' ({N_FIELDS} fields of n_j x 1 values in {{0, 1}}). {_where_to_get_it()}",
    )


@lru_cache(maxsize=4)
def _read(path_str: str, size: int, mtime_ns: int) -> LandmineData:
    """Read and verify the shape of the file (cached per process by path, size and mtime)."""
    del size, mtime_ns  # cache key only: a changed file is read again
    path = Path(path_str)
    raw = path.read_bytes()
    digest = hashlib.sha256(raw).hexdigest()
    try:
        mat = scipy.io.loadmat(path)
    except Exception as exc:  # scipy raises several types for a non-MAT file
        raise _bad_file(path, f"scipy.io.loadmat could not read it ({exc})") from exc
    missing = [k for k in ("feature", "label") if k not in mat]
    if missing:
        raise _bad_file(path, f"variable(s) {', '.join(missing)} missing")
    feats = np.asarray(mat["feature"], dtype=object).reshape(-1)
    labs = np.asarray(mat["label"], dtype=object).reshape(-1)
    if feats.shape[0] != N_FIELDS or labs.shape[0] != N_FIELDS:
        raise _bad_file(path, f"found {feats.shape[0]} feature and {labs.shape[0]} label fields")
    features: list[np.ndarray] = []
    labels: list[np.ndarray] = []
    for j in range(N_FIELDS):
        try:
            X = np.array(feats[j], dtype=float)
            y = np.array(labs[j], dtype=float)
        except (TypeError, ValueError) as exc:
            raise _bad_file(path, f"field {j} is not numeric ({exc})") from exc
        if X.ndim != 2 or X.shape[1] != N_FEATURES or X.shape[0] < 4:
            raise _bad_file(path, f"field {j} has features of shape {X.shape}")
        if not np.all(np.isfinite(X)):
            raise _bad_file(path, f"field {j} has non-finite features")
        if y.size != X.shape[0] or (y.ndim == 2 and 1 not in y.shape) or y.ndim > 2:
            raise _bad_file(
                path, f"field {j} has labels of shape {y.shape} for {X.shape[0]} samples"
            )
        y = y.reshape(-1)
        values = set(np.unique(y).tolist())
        if not values <= {0.0, 1.0} or len(values) != 2:
            raise _bad_file(
                path,
                f"field {j} labels must be binary (both 0 and 1 present), got {sorted(values)}",
            )
        features.append(_read_only(X))
        labels.append(_read_only(y.astype(np.int64)))
    return LandmineData(tuple(features), tuple(labels), str(path), digest)


def load_landmine(
    path: str | os.PathLike[str] | None = None, *, checksum: str = "warn"
) -> LandmineData:
    """Load ``LandmineData.mat`` from ``path``, else from ``$FEDXAB_LANDMINE`` (cached per process).

    A missing file raises ``ConfigError("objective.data_path", ...)`` saying what the file is, how
    to configure its location and where it is distributed. The structure is always verified (29
    fields, 9 features, binary labels with both classes in every field) and a violation is a
    ``ConfigError``. The sha256 of the file is compared with the published copy's
    (:data:`LANDMINE_SHA256`) according to ``checksum``:

    * ``"warn"`` (default): a mismatch emits a :class:`LandmineChecksumWarning` and the data is
      used (a re-saved copy of the same data has other bytes but the same content; results may
      then differ from the papers' if the content differs too);
    * ``"error"``: a mismatch raises ``ConfigError("objective.data_path", ...)``;
    * ``"ignore"``: no comparison.
    """
    if checksum not in _CHECKSUM_POLICIES:
        raise ConfigError(
            "objective.checksum",
            f"must be one of {', '.join(map(repr, _CHECKSUM_POLICIES))}, got {checksum!r}",
        )
    resolved = resolve_landmine_path(path)
    st = resolved.stat()
    data = _read(str(resolved), st.st_size, st.st_mtime_ns)
    if checksum != "ignore" and data.sha256 != LANDMINE_SHA256:
        msg = (
            f"{data.path!r} has sha256 {data.sha256}, not the published copy's {LANDMINE_SHA256}; "
            "its structure is valid, but results may differ from the papers'"
        )
        if checksum == "error":
            raise ConfigError(_DATA_FIELD, msg)
        warnings.warn(msg, LandmineChecksumWarning, stacklevel=2)
    return data


# --------------------------------------------------------------------------------------------
# scikit-learn (optional dependency)


@dataclass(frozen=True)
class _Sklearn:
    SVC: Any
    roc_auc_score: Any
    train_test_split: Any
    config_context: Any


@lru_cache(maxsize=1)
def _sklearn() -> _Sklearn:
    try:
        sklearn = importlib.import_module("sklearn")
        svm = importlib.import_module("sklearn.svm")
        metrics = importlib.import_module("sklearn.metrics")
        selection = importlib.import_module("sklearn.model_selection")
    except ImportError as exc:
        raise ConfigError(
            "objective.name",
            "the landmine objective needs scikit-learn >= 1.4, which is not installed; install "
            "the optional extra: pip install 'fedxab[landmine]'",
        ) from exc
    return _Sklearn(
        svm.SVC, metrics.roc_auc_score, selection.train_test_split, sklearn.config_context
    )


# --------------------------------------------------------------------------------------------
# The objective


def _check_field(value: object, n_fields: int = N_FIELDS, name: str = "objective.field") -> int:
    if isinstance(value, bool) or not isinstance(value, int | np.integer):
        raise ConfigError(name, f"must be an integer field index 0..{n_fields - 1}, got {value!r}")
    if not 0 <= int(value) < n_fields:
        raise ConfigError(name, f"must be a field index 0..{n_fields - 1}, got {value!r}")
    return int(value)


def _domain(log_scale: bool) -> list[list[float]]:
    if log_scale:
        return [[math.log10(lo), math.log10(hi)] for lo, hi in (GAMMA_RANGE, C_RANGE)]
    return [list(GAMMA_RANGE), list(C_RANGE)]


class LandmineSVM(Objective):
    """Validation AUC of an RBF SVM on ONE landmine field, as a function of ``(gamma, C)``.

    Coordinates, in this order: ``x[0]`` = RBF ``gamma`` in [0.01, 10], ``x[1]`` = SVM ``C`` in
    [1e-4, 10] (the Fed-PNE paper prints gamma first; PyXAB's and the DP-FTS-DE code put C
    first, so mind the order when comparing). By default the domain is linear in both (the papers'
    scale); with ``log_scale=True`` the coordinates are ``log10(gamma)`` in [-2, 1] and
    ``log10(C)`` in [-4, 1], and a point ``x`` means ``gamma = 10**x[0]``, ``C = 10**x[1]``.
    :meth:`hyperparameters` gives the ``(gamma, C)`` values of points.

    The reward at ``x`` is the validation AUC-ROC (in [0, 1]) of ``SVC(kernel="rbf", gamma, C)``
    trained on the field's train half, from its ``decision_function`` scores (deterministic; see
    the module docstring for why not ``probability=True``). ``optimum_value`` is 1.0 ([FX]'s regret
    convention f* = 1, the true optimum being unknown); ``maximizer`` is None.

    Points outside the domain (beyond a 1e-9 relative tolerance, which is clipped) raise
    :class:`ObjectiveError`. Evaluations are cached in ``self.cache`` (an LRU
    :class:`EvaluationCache` of ``cache_size`` entries, keyed by data file, field, gamma and C);
    ``n_fits`` counts the SVM fits this objective actually performed.

    Parameters (config-friendly): ``field`` (0..28), ``data_path`` (file or directory; default
    ``$FEDXAB_LANDMINE``), ``log_scale`` (bool), ``cache_size`` (entries, 0 disables caching).
    The data is loaded, and the field's split computed, at construction, so a missing file fails
    early.
    """

    name = "landmine"
    coordinate_names = COORDINATES

    def __init__(
        self,
        field: int = 0,
        data_path: str | None = None,
        log_scale: bool = False,
        cache_size: int = DEFAULT_CACHE_SIZE,
    ) -> None:
        self.field = _check_field(field)
        self.log_scale = check_bool("objective.log_scale", log_scale)
        self.cache = EvaluationCache(check_cache_size(cache_size))
        _sklearn()  # fail early, with the install hint, when scikit-learn is missing
        self.data = load_landmine(data_path)
        self.data_path = self.data.path
        self._split = self.data.split(self.field)
        self.n_fits = 0
        self.name = f"landmine[field={self.field}]"
        super().__init__(_domain(self.log_scale), optimum_value=1.0)

    def hyperparameters(
        self, X: np.ndarray | Sequence[float] | Sequence[Sequence[float]]
    ) -> np.ndarray:
        """The ``(gamma, C)`` values of points ``X`` (shape (n, 2) or (2,)), as an (n, 2) array."""
        arr = np.asarray(X, dtype=float)
        if arr.ndim == 1 and arr.shape[0] == self.dim:
            arr = arr.reshape(1, self.dim)
        if arr.ndim != 2 or arr.shape[1] != self.dim:
            raise ObjectiveError(
                f"{self.name}: points must have shape (n, {self.dim}), got {arr.shape}"
            )
        lo, hi = self.domain[:, 0], self.domain[:, 1]
        tol = 1e-9 * (hi - lo)
        bad = ~np.all(np.isfinite(arr) & (arr >= lo - tol) & (arr <= hi + tol), axis=1)
        if np.any(bad):
            i = int(np.flatnonzero(bad)[0])
            raise ObjectiveError(
                f"{self.name}: point {arr[i].tolist()} (row {i}) is outside the domain "
                f"{self.domain.tolist()} ({', '.join(self.coordinate_names)}"
                f"{', log10 scale' if self.log_scale else ''})"
            )
        arr = np.clip(arr, lo, hi)
        return np.power(10.0, arr) if self.log_scale else arr

    def _auc(self, gamma: float, C: float) -> float:
        key = (self.data_path, self.data.sha256, self.field, gamma, C)
        cached = self.cache.get(key)
        if cached is not None:
            return cached
        sk = _sklearn()
        sp = self._split
        # The split is finite and gamma, C are checked above: skipping scikit-learn's per-call
        # input and parameter validation saves about 10 % of a fit, with the same results.
        with sk.config_context(assume_finite=True, skip_parameter_validation=True):
            model = sk.SVC(kernel="rbf", gamma=gamma, C=C)
            model.fit(sp.X_train, sp.y_train)
            scores = model.decision_function(sp.X_val)
            auc = float(sk.roc_auc_score(sp.y_val, scores))
        self.n_fits += 1
        self.cache.put(key, auc)
        return auc

    def _evaluate(self, X: np.ndarray) -> np.ndarray:
        hp = self.hyperparameters(X)
        return np.array([self._auc(float(g), float(c)) for g, c in hp], dtype=float)

    def __repr__(self) -> str:
        return (
            f"LandmineSVM(field={self.field}, log_scale={self.log_scale}, "
            f"cache_size={self.cache.maxsize})"
        )


# --------------------------------------------------------------------------------------------
# Family: one client per field


def _family_fields(n_clients: int | None, fields: object, seed: int) -> list[int]:
    if isinstance(fields, str):
        if fields != "random":
            raise ConfigError(
                "family.fields",
                f"must be a list of field indices, 'random' or null, got {fields!r}",
            )
        n = N_FIELDS if n_clients is None else n_clients
        return [int(f) for f in stream(seed, "landmine-fields").integers(0, N_FIELDS, size=n)]
    if fields is not None:
        try:
            chosen = [_check_field(f, name="family.fields") for f in fields]  # type: ignore[attr-defined]
        except TypeError as exc:
            raise ConfigError(
                "family.fields", f"must be a list of field indices 0..28, got {fields!r}"
            ) from exc
        if not chosen:
            raise ConfigError("family.fields", "must list at least one field")
        if n_clients is not None and n_clients != len(chosen):
            raise ConfigError(
                "family.n_clients",
                f"is {n_clients} but family.fields lists {len(chosen)} fields (one client per "
                "listed field); give one of them, or make them agree",
            )
        return chosen
    n = N_FIELDS if n_clients is None else n_clients
    if n <= N_FIELDS:
        return list(range(n))
    return [int(f) for f in stream(seed, "landmine-fields").integers(0, N_FIELDS, size=n)]


def landmine_family(
    n_clients: int | None = None,
    fields: Sequence[int] | str | None = None,
    seed: int = 0,
    data_path: str | None = None,
    log_scale: bool = False,
    cache_size: int = DEFAULT_CACHE_SIZE,
) -> ClientFamily:
    """One :class:`LandmineSVM` client per field, and their mean as the global objective.

    Which field each client gets:

    * ``fields`` a list: client m gets ``fields[m]`` (``n_clients``, if given, must equal its
      length);
    * ``fields=None`` (default): ``n_clients`` (default 29) <= 29 gives clients the fields
      0..n_clients-1, one each; ``n_clients > 29`` assigns fields uniformly at random WITH
      replacement (fedxab's choice; the papers use at most 29 clients);
    * ``fields="random"``: uniformly at random with replacement for any ``n_clients`` (the papers'
      "each client is assigned a random field").

    Random assignments draw ``integers(0, 29, size=n_clients)`` from
    ``fedxab.seeding.stream(seed, "landmine-fields")``: reproducible from ``seed``, and client m's
    field does not depend on how many clients there are. ``kind`` is ``"landmine"``.

    The global objective is the mean of the clients' AUCs (a client counted once per assignment,
    so repeated fields weigh more), with ``optimum_value = 1.0`` and no known maximiser. All
    clients share one :class:`EvaluationCache` of ``cache_size`` entries per distinct field, so
    clients on the same field and the global objective reuse each other's SVM fits.
    """
    if n_clients is not None and (
        isinstance(n_clients, bool) or not isinstance(n_clients, int | np.integer) or n_clients < 1
    ):
        raise ConfigError("family.n_clients", f"must be a positive integer, got {n_clients!r}")
    if isinstance(seed, bool) or not isinstance(seed, int | np.integer) or seed < 0:
        raise ConfigError("seed", f"must be a non-negative integer, got {seed!r}")
    per_field = check_cache_size(cache_size, "family.cache_size")
    chosen = _family_fields(None if n_clients is None else int(n_clients), fields, int(seed))
    shared = EvaluationCache(per_field * len(set(chosen)))
    clients: list[LandmineSVM] = []
    for f in chosen:
        client = LandmineSVM(f, data_path=data_path, log_scale=log_scale, cache_size=0)
        client.cache = shared
        clients.append(client)
    glob = AverageObjective(clients, compute_optimum=False)
    glob.name = f"landmine-mean(M={len(clients)})"
    glob.optimum_value = 1.0
    return ClientFamily(global_objective=glob, clients=tuple(clients), kind="landmine")
