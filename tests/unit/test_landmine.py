"""Landmine SVM tuning objective (spec-fedpne-pfpne §7.2, §12 F17; spec-dpftsde §7.2).

Tests on the real data read ``LandmineData.mat`` from ``$FEDXAB_LANDMINE`` when set, else from
``<repo root>/../shared/data/landmine/``, and are skipped with the reason when it is absent (the
file is not part of the repository). Tests of the error paths build their own small files.
"""

from __future__ import annotations

import importlib.util
import os
import warnings
from pathlib import Path

import numpy as np
import pytest
import scipy.io

from fedxab.errors import ConfigError, ObjectiveError
from fedxab.objectives.families import ClientFamily
from fedxab.objectives.landmine import (
    C_RANGE,
    COORDINATES,
    GAMMA_RANGE,
    LANDMINE_ENV,
    LANDMINE_SHA256,
    EvaluationCache,
    LandmineChecksumWarning,
    LandmineSVM,
    landmine_family,
    load_landmine,
    resolve_landmine_path,
)
from fedxab.seeding import stream

REPO = Path(__file__).resolve().parents[2]
SHARED_DATA = REPO.parent / "shared" / "data" / "landmine" / "LandmineData.mat"


def _find_data() -> Path | None:
    env = os.environ.get(LANDMINE_ENV, "").strip()
    for cand in ([Path(env)] if env else []) + [SHARED_DATA]:
        if cand.is_dir():
            cand = cand / "LandmineData.mat"
        if cand.is_file():
            return cand
    return None


DATA = _find_data()
HAVE_SKLEARN = importlib.util.find_spec("sklearn") is not None

needs_data = pytest.mark.skipif(
    DATA is None,
    reason="LandmineData.mat not found (set FEDXAB_LANDMINE, or place it in "
    "<repo root>/../shared/data/landmine/); it is distributed with the DP-FTS-DE authors' "
    "public code release",
)
needs_sklearn = pytest.mark.skipif(
    not HAVE_SKLEARN,
    reason="scikit-learn is not installed (pip install 'fedxab[landmine]')",
)


@pytest.fixture()
def data_path() -> str:
    assert DATA is not None
    return str(DATA)


def _write_fake_mat(path: Path, n_fields: int = 29, n_features: int = 9, labels=(0, 1)) -> Path:
    rng = np.random.default_rng(0)
    feats = np.empty((1, n_fields), dtype=object)
    labs = np.empty((1, n_fields), dtype=object)
    for j in range(n_fields):
        feats[0, j] = rng.standard_normal((20, n_features))
        labs[0, j] = np.resize(np.array(labels, dtype=np.uint8), 20).reshape(20, 1)
    scipy.io.savemat(path, {"feature": feats, "label": labs})
    return path


# ------------------------------------------------------------------------------------------
# Locating and verifying the file (no real data needed)


def test_missing_file_error_names_config_key_env_var_and_source(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(LANDMINE_ENV, raising=False)
    with pytest.raises(ConfigError) as nothing:
        load_landmine()
    missing = tmp_path / "nowhere" / "LandmineData.mat"
    with pytest.raises(ConfigError) as given:
        load_landmine(missing)
    monkeypatch.setenv(LANDMINE_ENV, str(missing))
    with pytest.raises(ConfigError) as from_env:
        load_landmine()
    for exc in (nothing.value, given.value, from_env.value):
        msg = str(exc)
        assert exc.field == "objective.data_path"
        assert msg.startswith("objective.data_path: ")
        for needed in ("LandmineData.mat", "29 landmine fields", LANDMINE_ENV, "DP-FTS-DE"):
            assert needed in msg, (needed, msg)
    assert "no landmine data file is configured" in str(nothing.value)
    assert str(missing) in str(given.value) and "from objective.data_path" in str(given.value)
    assert f"from environment variable {LANDMINE_ENV}" in str(from_env.value)


def test_directory_is_accepted_and_argument_beats_env(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    fake = _write_fake_mat(tmp_path / "LandmineData.mat")
    monkeypatch.setenv(LANDMINE_ENV, str(tmp_path / "missing.mat"))
    assert resolve_landmine_path(tmp_path) == fake.resolve()
    monkeypatch.setenv(LANDMINE_ENV, str(tmp_path))
    assert resolve_landmine_path() == fake.resolve()


@pytest.mark.parametrize(
    ("kwargs", "fragment"),
    [
        ({"n_fields": 28}, "found 28 feature and 28 label fields"),
        ({"n_features": 8}, "field 0 has features of shape (20, 8)"),
        ({"labels": (0, 2)}, "labels must be binary"),
        ({"labels": (0,)}, "labels must be binary"),
    ],
)
def test_malformed_files_are_config_errors(tmp_path: Path, kwargs: dict, fragment: str) -> None:
    bad = _write_fake_mat(tmp_path / "bad.mat", **kwargs)
    with pytest.raises(ConfigError, match="not a valid landmine data file") as info:
        load_landmine(bad, checksum="ignore")
    assert info.value.field == "objective.data_path"
    assert fragment in str(info.value)
    junk = tmp_path / "junk.mat"
    junk.write_bytes(b"not a MATLAB file")
    with pytest.raises(ConfigError, match="could not read it"):
        load_landmine(junk)


def test_checksum_mismatch_warns_by_default_errors_on_request(tmp_path: Path) -> None:
    fake = _write_fake_mat(tmp_path / "LandmineData.mat")
    with pytest.warns(LandmineChecksumWarning, match="not the published copy"):
        data = load_landmine(fake)
    assert data.n_fields == 29 and data.sha256 != LANDMINE_SHA256
    with pytest.raises(ConfigError, match="not the published copy"):
        load_landmine(fake, checksum="error")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        load_landmine(fake, checksum="ignore")  # no comparison, no warning
    with pytest.raises(ConfigError, match="objective.checksum"):
        load_landmine(fake, checksum="strict")


# ------------------------------------------------------------------------------------------
# The real data


@needs_data
def test_shapes_and_checksum(data_path: str) -> None:
    data = load_landmine(data_path, checksum="error")
    assert data.sha256 == LANDMINE_SHA256
    assert data.n_fields == 29 and data.n_samples == 14_820 and data.n_features == 9
    assert all(x.shape[1] == 9 for x in data.features)
    assert all(set(np.unique(y).tolist()) == {0, 1} for y in data.labels)
    assert load_landmine(data_path) is data  # cached per process
    positives = sum(int(y.sum()) for y in data.labels) / data.n_samples
    assert positives == pytest.approx(0.061, abs=0.001)


@needs_data
@needs_sklearn
def test_split_is_the_authors_stratified_half_split(data_path: str) -> None:
    from sklearn.model_selection import train_test_split

    data = load_landmine(data_path)
    raw = scipy.io.loadmat(data_path)
    for j in (0, 15, 28):
        sp = data.split(j)
        assert data.split(j) is sp  # cached
        X_tr, X_va, y_tr, y_va = train_test_split(
            raw["feature"][0][j],
            raw["label"][0][j],
            test_size=0.5,
            stratify=raw["label"][0][j],
            random_state=0,
        )
        np.testing.assert_array_equal(sp.X_train, X_tr)
        np.testing.assert_array_equal(sp.X_val, X_va)
        np.testing.assert_array_equal(sp.y_train, y_tr.ravel())
        np.testing.assert_array_equal(sp.y_val, y_va.ravel())
        assert abs(int(sp.y_train.sum()) - int(sp.y_val.sum())) <= 1


# ------------------------------------------------------------------------------------------
# The objective


@needs_data
@needs_sklearn
def test_auc_matches_independent_sklearn_computation(data_path: str) -> None:
    from sklearn.metrics import roc_auc_score
    from sklearn.model_selection import train_test_split
    from sklearn.svm import SVC

    obj = LandmineSVM(field=3, data_path=data_path)
    assert obj.dim == 2 and obj.coordinate_names == COORDINATES == ("gamma", "C")
    np.testing.assert_array_equal(obj.domain, [GAMMA_RANGE, C_RANGE])
    assert obj.optimum_value == 1.0 and obj.maximizer is None
    gamma, C = 0.5, 2.0
    value = obj([gamma, C])
    assert value.shape == (1,) and 0.0 <= value[0] <= 1.0

    raw = scipy.io.loadmat(data_path)
    X, y = raw["feature"][0][3], raw["label"][0][3].ravel()
    X_tr, X_va, y_tr, y_va = train_test_split(X, y, test_size=0.5, stratify=y, random_state=0)
    svm = SVC(kernel="rbf", gamma=gamma, C=C).fit(X_tr, y_tr)
    assert value[0] == roc_auc_score(y_va, svm.decision_function(X_va))
    assert obj.regret([[gamma, C]])[0] == 1.0 - value[0]


@needs_data
@needs_sklearn
def test_cache_hit_returns_identical_value_without_refitting(
    data_path: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    from sklearn.svm import SVC

    fits: list[tuple[float, float]] = []
    real_fit = SVC.fit

    def counting_fit(self, *args, **kwargs):
        fits.append((self.gamma, self.C))
        return real_fit(self, *args, **kwargs)

    monkeypatch.setattr(SVC, "fit", counting_fit)
    obj = LandmineSVM(field=0, data_path=data_path)
    a = obj([[1.0, 1.0]])
    b = obj([[1.0, 1.0], [1.0, 1.0], [2.0, 1.0]])  # a repeat and a duplicate within the batch
    assert b[0] == b[1] == a[0]
    assert fits == [(1.0, 1.0), (2.0, 1.0)] and obj.n_fits == 2
    assert obj.cache.hits == 2 and obj.cache.misses == 2

    small = LandmineSVM(field=0, data_path=data_path, cache_size=1)  # LRU of one entry
    small([[1.0, 1.0], [2.0, 1.0], [2.0, 1.0], [1.0, 1.0]])
    assert small.n_fits == 3 and len(small.cache) == 1
    off = LandmineSVM(field=0, data_path=data_path, cache_size=0)
    off([[1.0, 1.0], [1.0, 1.0]])
    assert off.n_fits == 2 and len(off.cache) == 0


def test_evaluation_cache_is_lru() -> None:
    cache = EvaluationCache(2)
    cache.put(("a",), 1.0)
    cache.put(("b",), 2.0)
    assert cache.get(("a",)) == 1.0  # "a" is now the most recent
    cache.put(("c",), 3.0)  # evicts "b"
    assert cache.get(("b",)) is None and cache.get(("c",)) == 3.0 and len(cache) == 2
    with pytest.raises(ConfigError, match="cache_size"):
        EvaluationCache(-1)


@needs_data
@needs_sklearn
def test_evaluation_is_deterministic(data_path: str) -> None:
    X = np.array([[0.01, 1e-4], [5.005, 5.00005], [10.0, 10.0]])
    first = LandmineSVM(field=7, data_path=data_path, cache_size=0)(X)
    second = LandmineSVM(field=7, data_path=data_path, cache_size=0)(X)
    np.testing.assert_array_equal(first, second)
    assert np.all((first >= 0.0) & (first <= 1.0))


@needs_data
@needs_sklearn
def test_log_scale_maps_correctly(data_path: str) -> None:
    log = LandmineSVM(field=1, data_path=data_path, log_scale=True)
    lin = LandmineSVM(field=1, data_path=data_path)
    np.testing.assert_allclose(log.domain, [[-2.0, 1.0], [-4.0, 1.0]], atol=0, rtol=0)
    np.testing.assert_allclose(log.hyperparameters(log.domain.T), [[0.01, 1e-4], [10.0, 10.0]])
    np.testing.assert_allclose(log.hyperparameters([0.0, -1.0]), [[1.0, 0.1]], rtol=1e-15)
    np.testing.assert_array_equal(lin.hyperparameters([1.0, 0.1]), [[1.0, 0.1]])
    assert log([0.0, -1.0])[0] == lin([1.0, 0.1])[0]


@needs_data
@needs_sklearn
def test_invalid_parameters_and_points(data_path: str) -> None:
    for bad in (29, -1, True, 1.5):
        with pytest.raises(ConfigError, match=r"objective\.field"):
            LandmineSVM(field=bad, data_path=data_path)
    with pytest.raises(ConfigError, match=r"objective\.log_scale"):
        LandmineSVM(log_scale="yes", data_path=data_path)  # type: ignore[arg-type]
    obj = LandmineSVM(field=0, data_path=data_path)
    with pytest.raises(ObjectiveError, match="outside the domain"):
        obj([[0.0, 1.0]])  # gamma = 0 is not allowed
    with pytest.raises(ObjectiveError, match="shape"):
        obj([[1.0, 1.0, 1.0]])
    assert obj([[10.0 + 1e-12, 10.0]])[0] == obj([[10.0, 10.0]])[0]  # rounding is clipped


# ------------------------------------------------------------------------------------------
# The family


@needs_data
@needs_sklearn
def test_family_global_is_mean_of_clients_and_shares_fits(data_path: str) -> None:
    fam = landmine_family(data_path=data_path)
    assert isinstance(fam, ClientFamily) and fam.kind == "landmine" and fam.n_clients == 29
    assert [c.field for c in fam.clients] == list(range(29))
    glob = fam.global_objective
    assert glob.optimum_value == 1.0 and glob.maximizer is None
    x = np.array([[0.5, 2.0]])
    g = glob(x)[0]
    per_client = np.array([c(x)[0] for c in fam.clients])
    assert g == pytest.approx(per_client.mean(), abs=1e-15)
    assert sum(c.n_fits for c in fam.clients) == 29  # the clients' calls were cache hits

    dup = landmine_family(fields=[4, 4, 9], data_path=data_path)
    vals = [c(x)[0] for c in dup.clients]
    assert vals[0] == vals[1] and sum(c.n_fits for c in dup.clients) == 2
    assert dup.global_objective(x)[0] == pytest.approx(np.mean(vals), abs=1e-15)


@needs_data
@needs_sklearn
def test_random_fields_with_replacement_reproducible_from_seed(data_path: str) -> None:
    a = landmine_family(n_clients=40, seed=5, data_path=data_path)
    b = landmine_family(n_clients=40, seed=5, data_path=data_path)
    c = landmine_family(n_clients=40, seed=6, data_path=data_path)
    fields_a = [k.field for k in a.clients]
    assert fields_a == [k.field for k in b.clients]
    assert fields_a != [k.field for k in c.clients]
    assert fields_a == stream(5, "landmine-fields").integers(0, 29, size=40).tolist()
    assert len(set(fields_a)) < 40  # with replacement
    # Client m's field does not depend on the number of clients.
    few = landmine_family(n_clients=10, fields="random", seed=5, data_path=data_path)
    assert [k.field for k in few.clients] == fields_a[:10]


@needs_data
@needs_sklearn
def test_family_argument_errors(data_path: str) -> None:
    with pytest.raises(ConfigError, match=r"family\.n_clients"):
        landmine_family(n_clients=3, fields=[0, 1], data_path=data_path)
    with pytest.raises(ConfigError, match=r"family\.n_clients"):
        landmine_family(n_clients=0, data_path=data_path)
    with pytest.raises(ConfigError, match=r"family\.fields"):
        landmine_family(fields=[0, 30], data_path=data_path)
    with pytest.raises(ConfigError, match=r"family\.fields"):
        landmine_family(fields="all", data_path=data_path)
    with pytest.raises(ConfigError, match="seed"):
        landmine_family(seed=-1, data_path=data_path)
