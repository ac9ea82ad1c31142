"""The opt-in DP release of a client's best value (fedxab.privacy.best, [privacy] release_best)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from fedxab.config import config_from_dict
from fedxab.errors import ConfigError
from fedxab.privacy.best import BEST_PHASE, BestRelease, release_best
from fedxab.privacy.ledger import PrivacyLedger
from fedxab.privacy.mechanisms import gaussian_sigma
from fedxab.privacy.run_ledger import RunLedger

SETTINGS = BestRelease(epsilon=0.5, delta=1e-5, low=0.0, high=1.0)
DP = {"name": "dpfedpne", "epsilon": 0.5, "privacy_delta": 1e-5, "composition": "sequential"}
BEST = {"release_best": True, "best_epsilon": 0.5, "best_low": 0.0, "best_high": 1.0}


def _gate(budget: float | None = None, client: int = 0):
    run_ledger = RunLedger(PrivacyLedger(":memory:"), "run-a", delta=1e-5, budget_epsilon=budget)
    return run_ledger, run_ledger.gate(client)


def test_release_is_charged_once_before_it_is_returned_and_a_replay_charges_nothing():
    run_ledger, gate = _gate()
    ledger = run_ledger.ledger
    out = release_best(SETTINGS, 0.73, gate, seed=4, client=0)
    history = ledger.history("run-a", 0)
    assert len(history) == 1  # one row, at the best value's own phase
    phase, _, _, event = history[0]
    assert phase == BEST_PHASE and event == SETTINGS.mechanism.event("run")
    assert gate.drain() == [(BEST_PHASE, event)]  # mirrored to the ledger topic
    assert "best_value" not in out and out["best_value_dp"] != 0.73
    assert out["epsilon"] == 0.5 and out["sigma"] == SETTINGS.mechanism.sigma
    again = release_best(SETTINGS, 0.73, gate, seed=4, client=0)  # a replayed run
    assert again == out  # the same seeded noise: the same value
    assert len(ledger.history("run-a", 0)) == 1  # and nothing new charged


def test_a_budget_that_cannot_afford_the_release_refuses_it_and_records_nothing():
    run_ledger, gate = _gate(budget=0.1)  # the release alone costs more than 0.1 (rdp)
    out = release_best(SETTINGS, 0.73, gate, seed=4, client=0)
    assert "best_value_dp" not in out and "over its budget" in out["refused"]
    assert run_ledger.ledger.history("run-a", 0) == []
    assert gate.drain() == []


def test_the_value_is_clipped_to_the_declared_range_before_the_noise():
    settings = BestRelease(epsilon=50.0, delta=1e-5, low=0.0, high=1.0)  # small noise
    _, gate = _gate()
    out = release_best(settings, 1e6, gate, seed=0, client=0)
    assert abs(out["best_value_dp"] - 1.0) < 10 * out["sigma"]


class _Admits:
    """A gate that admits every release (the mechanism alone is under test)."""

    def __init__(self) -> None:
        self.recorded: list[tuple[int, object]] = []

    def admit(self, phase: int, event: object) -> None:
        pass

    def record(self, phase: int, event: object) -> None:
        self.recorded.append((phase, event))


def test_noise_has_the_calibrated_standard_deviation():
    # Analytic Gaussian (Balle & Wang 2018) at sensitivity high - low = 2; over 4000 seeds the
    # sample sd of (release - clipped best) lies within 5% of sigma (the sd's relative standard
    # error is 1/sqrt(2n) = 1.1%: 5% is over 4 standard errors) and the mean within 4 sigma/sqrt(n).
    settings = BestRelease(epsilon=1.0, delta=1e-5, low=-1.0, high=1.0)
    sigma = gaussian_sigma(1.0, 1e-5, 2.0, "analytic")
    assert settings.mechanism.sigma == sigma
    gate = _Admits()
    noise = [
        release_best(settings, 0.25, gate, seed=seed, client=3)["best_value_dp"] - 0.25
        for seed in range(4000)
    ]
    assert len(gate.recorded) == 4000
    sd = float(np.std(noise, ddof=1))
    assert abs(sd / sigma - 1.0) < 0.05
    assert abs(float(np.mean(noise))) < 4 * sigma / math.sqrt(len(noise))


def _error(privacy: dict, algorithm: dict = DP) -> str:
    with pytest.raises(ConfigError) as info:
        config_from_dict({"algorithm": algorithm, "privacy": privacy})
    text = str(info.value)
    assert "\n" not in text
    return text


def test_release_best_config_is_accepted_under_local_dp_with_sequential_composition():
    config = config_from_dict({"algorithm": DP, "privacy": BEST})
    settings = BestRelease.of(config.privacy, 1e-5)
    assert settings == BestRelease(0.5, 1e-5, 0.0, 1.0)
    assert BestRelease.of(config_from_dict({"algorithm": DP}).privacy, 1e-5) is None


@pytest.mark.parametrize(
    ("privacy", "field"),
    [
        ({"release_best": True}, "privacy.best_epsilon"),
        ({**BEST, "best_epsilon": 0.0}, "privacy.best_epsilon"),
        ({**BEST, "best_epsilon": float("inf")}, "privacy.best_epsilon"),
        ({**BEST, "best_high": 0.0}, "privacy.best_high"),
        ({**BEST, "best_low": float("nan")}, "privacy.best_low"),
        ({"best_epsilon": 0.5}, "privacy.best_epsilon"),  # without release_best
        ({**BEST, "release_best": "yes"}, "privacy.release_best"),
    ],
)
def test_bad_release_best_fields_give_one_line_errors_naming_the_field(privacy, field):
    assert field in _error(privacy)


def test_release_best_needs_sequential_composition_and_local_dp():
    parallel = {**DP, "composition": "parallel"}
    assert "composition" in _error(BEST, parallel)
    central = {"name": "dpftsde"}
    assert "local DP only" in _error(BEST, central)
