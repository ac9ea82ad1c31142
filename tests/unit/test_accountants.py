"""Privacy accountants: the paper's epsilon values, cross-checks, properties, bad input."""

from __future__ import annotations

import pytest

from fedxab.errors import ConfigError
from fedxab.privacy.accountants import make_accountant
from fedxab.privacy.mechanisms import PrivacyEvent

MOMENTS = make_accountant("moments")
RDP = make_accountant("rdp")


def _events(q: float, z: float, steps: int, scope: str = "") -> list[PrivacyEvent]:
    return [PrivacyEvent("gaussian", z, q, 1.0, steps, scope)]


# spec-dpftsde §4.3: the DP-FTS-DE paper's synthetic grid (N = 200, delta = 200^-1.1, T = 40)
# and its release's landmine grid (N = 29, delta = 29^-1.1, T = 60), all 14 values.
SYNTHETIC = [(0.15, 1.0, 5.93), (0.25, 1.0, 9.91), (0.50, 1.0, 20.12), (0.25, 1.2, 7.39),
             (0.25, 1.5, 5.22)]  # fmt: skip
LANDMINE = [(0.35, 1.0, 15.17), (0.35, 1.6, 7.12), (0.35, 2.0, 5.14), (0.35, 3.0, 3.05),
            (0.35, 4.0, 2.16), (0.10, 1.0, 3.75), (0.15, 1.0, 5.98), (0.20, 1.0, 7.69),
            (0.25, 1.0, 9.82)]  # fmt: skip


@pytest.mark.parametrize(("q", "z", "epsilon"), SYNTHETIC)
def test_moments_accountant_reproduces_the_synthetic_grid(q, z, epsilon):
    assert round(MOMENTS.epsilon(_events(q, z, 40), 200**-1.1), 2) == epsilon


@pytest.mark.parametrize(("q", "z", "epsilon"), LANDMINE)
def test_moments_accountant_reproduces_the_landmine_grid(q, z, epsilon):
    assert round(MOMENTS.epsilon(_events(q, z, 60), 29**-1.1), 2) == epsilon
    # spec §4.3: 61 rounds would give another value (15.36 ... 9.93), so T counts 60 rounds
    assert round(MOMENTS.epsilon(_events(q, z, 61), 29**-1.1), 2) != epsilon


def test_rdp_backend_uses_the_improved_conversion():
    # spec §4.2: dp-accounting's default conversion gives 8.41 where the paper's gives 9.91
    assert round(RDP.epsilon(_events(0.25, 1.0, 40), 200**-1.1), 2) == 8.41


@pytest.mark.parametrize("q", [0.01, 0.1, 0.5, 1.0])
@pytest.mark.parametrize("z", [0.8, 1.5, 4.0])
@pytest.mark.parametrize("steps", [1, 40, 1000])
def test_moments_is_never_below_rdp(q, z, steps):
    events = _events(q, z, steps)
    assert MOMENTS.epsilon(events, 1e-5) >= RDP.epsilon(events, 1e-5) - 1e-9


@pytest.mark.parametrize("accountant", [MOMENTS, RDP], ids=["moments", "rdp"])
def test_epsilon_grows_with_steps_and_q_and_falls_with_sigma(accountant):
    eps = accountant.epsilon
    by_steps = [eps(_events(0.1, 1.2, t), 1e-5) for t in (1, 10, 100, 1000)]
    by_q = [eps(_events(q, 1.2, 50), 1e-5) for q in (0.01, 0.05, 0.2, 1.0)]
    by_sigma = [eps(_events(0.1, z, 50), 1e-5) for z in (0.7, 1.0, 2.0, 5.0)]
    assert by_steps == sorted(by_steps) and by_q == sorted(by_q)
    assert by_sigma == sorted(by_sigma, reverse=True)


@pytest.mark.parametrize("accountant", [MOMENTS, RDP], ids=["moments", "rdp"])
def test_a_replayed_or_split_event_stream_gives_the_same_epsilon(accountant):
    whole = _events(0.2, 1.1, 30)
    split = [PrivacyEvent("gaussian", 1.1, 0.2, 1.0, 1) for _ in range(30)]
    assert accountant.epsilon(whole, 1e-5) == pytest.approx(accountant.epsilon(split, 1e-5))
    assert accountant.epsilon(whole, 1e-5) == accountant.epsilon(list(whole), 1e-5)


@pytest.mark.parametrize("accountant", [MOMENTS, RDP], ids=["moments", "rdp"])
def test_disjoint_scopes_compose_in_parallel(accountant):
    a, b = _events(0.3, 1.0, 20, "phase-1"), _events(0.3, 1.0, 80, "phase-2")
    assert accountant.epsilon(a + b, 1e-5) == accountant.epsilon(b, 1e-5)
    assert accountant.epsilon([], 1e-5) == 0.0


@pytest.mark.parametrize("accountant", [MOMENTS, RDP], ids=["moments", "rdp"])
def test_delta_at_the_reported_epsilon_is_at_most_the_target(accountant):
    events = _events(0.25, 1.0, 40)
    epsilon = accountant.epsilon(events, 1e-4)
    assert accountant.delta(events, epsilon) <= 1e-4 * (1 + 1e-6)
    assert accountant.delta(events, epsilon / 2) > 1e-4


@pytest.mark.parametrize(
    ("event", "delta", "field"),
    [
        (PrivacyEvent("gaussian", 0.0, 0.5), 1e-5, "event.noise_multiplier"),
        (PrivacyEvent("gaussian", -1.0, 0.5), 1e-5, "event.noise_multiplier"),
        (PrivacyEvent("gaussian", 1.0, 0.0), 1e-5, "event.sampling_rate"),
        (PrivacyEvent("gaussian", 1.0, 1.5), 1e-5, "event.sampling_rate"),
        (PrivacyEvent("gaussian", 1.0, 0.5, count=0), 1e-5, "event.count"),
        (PrivacyEvent("laplace", 1.0, 0.5), 1e-5, "event.mechanism"),
        (PrivacyEvent("gaussian", 1.0, 0.5), 0.0, "privacy.delta"),
        (PrivacyEvent("gaussian", 1.0, 0.5), 1.0, "privacy.delta"),
    ],
)
def test_bad_events_and_deltas_are_one_clear_error(event, delta, field):
    for accountant in (MOMENTS, RDP):
        with pytest.raises(ConfigError, match=field):
            accountant.epsilon([event], delta)


def test_unknown_accountant_names_the_choices():
    with pytest.raises(ConfigError, match="privacy.accountant.*moments"):
        make_accountant("renyi")
