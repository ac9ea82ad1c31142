"""Only summary statistics travel: no message of a run carries a client's raw reward.

Every message the runner encodes is captured, and every float in every client report is compared
with every raw (noisy) reward that client drew. The runs use one client and settings where every
released statistic averages at least two pulls (with one pull, a mean *is* the reward, which is
what the papers' protocols send at depths where tau_h = 1). Centralised HCT, which deliberately
sends one raw reward per round (it models unlimited communication), is the positive control: the
detector must find its rewards.
"""

import numpy as np
import pytest

import fedxab.agents.federation as federation
import fedxab.agents.workers as workers
from fedxab.agents.federation import Federation
from fedxab.broker.codec import packb
from fedxab.config import config_from_dict

ALGORITHMS = {
    "fedpne": {},
    "dpfedpne": {"epsilon": 0.5, "privacy_delta": 1e-3},
    "pfpne": {"c": 0.5},
    "pfhct": {"c": 0.5},
    "parallel": {},
    "fed1ucb": {},
    "local-hct": {},
    "ftsde": {"grid_size": 50, "own_fit_every": 0, "n_features": 8, "own_features": 16},
    "ts": {"grid_size": 50, "own_fit_every": 0, "own_features": 16},
}


def _floats(obj):
    if isinstance(obj, dict):
        for v in obj.values():
            yield from _floats(v)
    elif isinstance(obj, list | tuple):
        for v in obj:
            yield from _floats(v)
    elif isinstance(obj, np.ndarray) and obj.dtype.kind == "f":
        yield from obj.ravel().tolist()
    elif isinstance(obj, float):
        yield obj


def _run_and_capture(monkeypatch, name, params):
    cfg = config_from_dict(
        {
            "run": {"seed": 4, "budget": 800},
            "objective": {"name": "garland", "noise": {"name": "uniform", "half_width": 0.1}},
            "algorithm": {"name": name, **params},
            "federation": {"clients": 1, "heterogeneity": "none"},
        }
    )
    fed = Federation(cfg, seed=4)
    raw: list[float] = []
    for client in fed.clients:
        answer = client.answer

        def capturing(broadcast, evaluate, answer=answer):
            def evaluate_and_record(X):
                rewards = evaluate(X)
                raw.extend(np.asarray(rewards, dtype=float).tolist())
                return rewards

            return answer(broadcast, evaluate_and_record)

        client.answer = capturing
    sent = []

    def capturing_packb(obj):
        sent.append(obj)
        return packb(obj)

    monkeypatch.setattr(federation, "packb", capturing_packb)  # broadcasts
    monkeypatch.setattr(workers, "packb", capturing_packb)  # reports (answer_client)
    fed.run()
    reports = [m for m in sent if str(m.get("kind", "")).endswith(".report")]
    leaked = set(raw) & {v for m in reports for v in _floats(m)}
    return raw, reports, leaked


@pytest.mark.parametrize("name", sorted(ALGORITHMS))
def test_no_report_carries_a_raw_reward(monkeypatch, name):
    raw, reports, leaked = _run_and_capture(monkeypatch, name, ALGORITHMS[name])
    assert len(raw) == 800 and reports
    assert not leaked


def test_the_detector_finds_the_raw_rewards_of_centralised_hct(monkeypatch):
    raw, _, leaked = _run_and_capture(monkeypatch, "central-hct", {})
    assert len(leaked) == len(set(raw)) > 0
