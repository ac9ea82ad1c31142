"""Issue 2 acceptance: HCT's simple and average regret with the practical preset.

Uniform noise U(-0.1, 0.1), 10 seeds (0..9), through the same runner as ``fedxab run``.
Measured when written: SineProduct mean simple regret 0.0014 (bound 0.01); Garland mean simple
regret 0.024 (bound 0.1), average regret per step 0.112 at 2,000 and 0.084 at 20,000.
"""

import numpy as np
import pytest

from fedxab.agents.local import run_config
from fedxab.config import config_from_dict

pytestmark = pytest.mark.slow

SEEDS = 10


def _results(objective, budget, **algorithm):
    cfg = config_from_dict(
        {
            "run": {"seed": 0, "repeats": SEEDS, "budget": budget},
            "objective": {"name": objective, "noise": {"name": "uniform", "half_width": 0.1}},
            "algorithm": {"name": "hct", "preset": "practical", **algorithm},
        }
    )
    return run_config(cfg).runs


def test_smooth_multimodal_function_simple_regret_below_0_01():
    """SineProduct 1/2(sin 13x sin 27x + 1): peaks 0.9756 (x = 0.8675) and 0.9338 (x = 0.398).

    rho = 0.75 is the Fed-PNE paper's HCT setting; with rho = 0.5 the smoothness assumption
    nu rho^h >= f* - f fails at moderate depths for this curvature and HCT can settle on the
    second peak (simple regret 0.042).
    """
    runs = _results("sineproduct", 20_000, nu=1.0, rho=0.75)
    simple = np.array([r.simple_regret for r in runs])
    assert simple.mean() < 0.01, simple


def test_garland_simple_regret_below_0_1_and_average_regret_decreases():
    short = _results("garland", 2_000)
    long = _results("garland", 20_000)
    simple = np.array([r.simple_regret for r in long])
    assert simple.mean() < 0.1, simple
    avg_short = np.mean([r.final_average_regret for r in short])
    avg_long = np.mean([r.final_average_regret for r in long])
    assert avg_long < avg_short, (avg_short, avg_long)
