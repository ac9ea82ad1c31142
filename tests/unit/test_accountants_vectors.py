"""Published RDP values of the Poisson-subsampled Gaussian, reproduced by dp-accounting as the
"rdp" backend composes it."""

from __future__ import annotations

import math

import dp_accounting
import pytest
from dp_accounting.rdp import rdp_privacy_accountant

from fedxab.privacy.accountants import _rdp_accountant
from fedxab.privacy.mechanisms import PrivacyEvent

# google/differential-privacy, python/dp_accounting/dp_accounting/rdp/
# rdp_privacy_accountant_test.py, test_compute_rdp_poisson_sampled_gaussian: q 0.01, sigma 2.5,
# 50 self-composed PoissonSampledDpEvent(0.01, GaussianDpEvent(2.5)), np.allclose(rtol=1e-4).
ORDERS = [1.5, 2.5, 5, 50, 100, math.inf]
PUBLISHED = [6.70579741e-04, 1.08548710e-03, 2.18075656e-03, 2.38460375e-02, 1.67416308e02,
             math.inf]  # fmt: skip
# The older layout of the same test (python/dp_accounting/rdp/rdp_privacy_accountant_test.py,
# commit 1ac116b3, as in tensorflow_privacy's compute_rdp test) published, with rtol 1e-4,
# [6.5007e-04, 1.0854e-03, 2.1808e-03, 2.3846e-02, 1.6742e+02, inf]. Those are the exact values
# (multi-precision quadrature gives 6.50070897e-04 and 1.08541806e-03; Opacus agrees, see
# test_accountants_opacus.py); dp-accounting 0.6 sums the fractional-order series' absolute
# values, an upper bound, 3.2% above at order 1.5. At integer orders both publications agree.
OLDER_AT_INTEGER_ORDERS = {5: 2.1808e-03, 50: 2.3846e-02, 100: 1.6742e02}


def _dp_accounting_rdp() -> list[float]:
    accountant = rdp_privacy_accountant.RdpAccountant(orders=ORDERS)
    accountant.compose(
        dp_accounting.SelfComposedDpEvent(
            dp_accounting.PoissonSampledDpEvent(0.01, dp_accounting.GaussianDpEvent(2.5)), 50
        )
    )
    return [float(r) for r in accountant._rdp]


def test_dp_accounting_reproduces_its_published_rdp_values():
    rdp = _dp_accounting_rdp()
    assert rdp[-1] == math.inf
    assert rdp[:-1] == pytest.approx(PUBLISHED[:-1], rel=1e-4, abs=1e-8)


def test_the_rdp_backend_composes_the_same_rdp_as_the_published_test():
    events = [PrivacyEvent("gaussian", 2.5, 0.01, 1.0, 50)]
    split = [PrivacyEvent("gaussian", 2.5, 0.01, 1.0, 1) for _ in range(50)]
    for stream in (events, split):
        rdp = [float(r) for r in _rdp_accountant(tuple(stream), tuple(ORDERS))._rdp]
        assert rdp[-1] == math.inf
        assert rdp[:-1] == pytest.approx(PUBLISHED[:-1], rel=1e-4, abs=1e-8)


@pytest.mark.parametrize(("order", "value"), sorted(OLDER_AT_INTEGER_ORDERS.items()))
def test_integer_orders_match_the_older_publication_too(order, value):
    assert _dp_accounting_rdp()[ORDERS.index(order)] == pytest.approx(value, rel=1e-4)
