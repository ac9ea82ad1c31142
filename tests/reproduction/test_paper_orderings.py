"""Issue 3 acceptance: seeded statistical checks of the orderings the federated papers report
(spec-fedpne-pfpne §11), with the papers' hyper-parameters (§7.1, §8.1; see ``orderings.py``).

Every check compares means over 5 fixed seeds (0..4; paired: algorithms share a seed's client
objectives and noise streams) of the final cumulative regret per client, ``R(T) / M``. The
HCT baselines pay a message per pull (central HCT at T = 1000: about 1.6 CPU-seconds per seed
with 10 clients, 5.5 with 50), so the tests that run them use seeds 0..2 (:data:`HCT_SEEDS`) and
say what they compare. Uniform noise U(-0.1, 0.1); the spec's heterogeneity defaults: value
offsets xi_m ~ N(0, 1) ("offset", [FX]) and input shifts s_m ~ N(0, (0.05 x range)^2) per
coordinate ("shift", [PF]); M = 10 clients unless stated. Numbers in docstrings are "mean ±
population std over the 5 seeds" as measured when the tests were written; each test states its
budget and tolerance.

Where an ordering does not hold at any budget a test can afford, the test is
``xfail(strict=True)`` with the measured numbers: it documents the gap, and it will fail (XPASS)
the day the ordering starts to hold, so that the marker gets removed.

The m-player parallel algorithm's ordering (m = 16 < 4 < 1) is in tests/unit/test_parallel.py.
"""

from __future__ import annotations

import numpy as np
import pytest
from orderings import Outcome, Setting, mean_std, outcomes

from fedxab.algorithms.pfpne import transition_depth

pytestmark = pytest.mark.slow

SEEDS = 5
HCT_SEEDS = 3
"""Seeds 0..2 of the HCT baselines, whose seeds differ by a few percent against margins of 5% or
more (each test gives the per-seed values measured on seeds 0..4)."""


def _local(algorithm: str, objective: str, budget: int, repeats: int = SEEDS) -> Setting:
    return Setting(algorithm, objective, "shift", budget, repeats=repeats)


def _global(
    algorithm: str, objective: str, budget: int, clients: int, repeats: int = SEEDS
) -> Setting:
    return Setting(algorithm, objective, "offset", budget, clients=clients, repeats=repeats)


# ------------------------------------------------------------------ 1. PF-PNE, local regret
def test_pfpne_local_regret_below_fedpne_on_shifted_garland_at_t_1e5():
    """[PF] Fig. 1(a): PF-PNE's average local cumulative regret < Fed-PNE's on Garland.

    Budget T = 10^5 per client, M = 10. Tolerance: strict inequality of the 5-seed means.
    Measured: PF-PNE 14470 ± 2568, Fed-PNE 16630 ± 2574 (ratio 0.87; PF-PNE lower on each of the
    5 paired seeds). Other seed sets at T = 10^5: seeds 100..104 14913 vs 16692 (0.89), seeds
    200..204 15382 vs 16799 (0.92). This is the smallest budget tried at which the ordering holds:
    it is reversed at T = 5 x 10^4 (9117 vs 8524, 9520 vs 8610, 9886 vs 8592 on the three seed
    sets), 3 x 10^4 (5965 vs 5260), 10^4 (2332 vs 1855) and 10^3 (258 vs 222). PF-PNE's stage 2
    re-examines locally, with tau_h local samples each, every node the server eliminated
    (double elimination); tau_6 = 472 and tau_7 = 1887 at T = 10^4, so at small T the
    re-examination takes most of the budget.
    """
    pf, fed = outcomes(_local("pfpne", "garland", 100_000), _local("fedpne", "garland", 100_000))
    assert pf.local_regret.mean() < fed.local_regret.mean(), (
        f"PF-PNE {mean_std(pf.local_regret)} vs Fed-PNE {mean_std(fed.local_regret)}"
    )


@pytest.mark.xfail(
    strict=True,
    reason=(
        "Himmelblau with input shifts (sd 0.5), M = 10: PF-PNE's average local cumulative regret "
        "is ABOVE Fed-PNE's at every budget measured: T = 10^3 (stage 1 only) 86.7 ± 4.9 vs "
        "85.9 ± 4.9, "
        "3 x 10^3 362.7 vs 180.7, 10^4 1086 ± 13 vs 518 ± 80, 3 x 10^4 2196 vs 1187, "
        "10^5 5185 ± 880 vs 2816 ± 246, 3 x 10^5 (3 seeds) 8271 vs 5546; the ratio falls "
        "(2.1, 1.85, 1.49 at 10^4, 10^5, 3 x 10^5) but too slowly for an affordable test"
    ),
)
def test_pfpne_local_regret_below_fedpne_on_shifted_himmelblau():
    """[PF] Fig. 1(b): PF-PNE's average local cumulative regret < Fed-PNE's on Himmelblau.

    Budget T = 10^4, M = 10. Tolerance: strict inequality of the 5-seed means. Measured: PF-PNE
    1086 ± 13, Fed-PNE 518 ± 80 (see the xfail reason for other budgets). The shift sd 0.5 (the
    spec's [PROPOSED] 0.05 x range; [PF] does not state it) keeps the clients' maximisers close
    to the global one's on this smooth function, so Fed-PNE's answer for the average objective
    is fairly good locally too, while PF-PNE re-examines every globally eliminated node
    locally. None of the spec's
    alternative readings (reuse_samples = false, h0_rule = "ceil", skip_levels = true) nor a
    doubled shift sd reverses it at T = 10^4 (best: h0_rule = "ceil", 795 ± 67).

    Diagnosis (checked against [PF] Algs. 1-3 and spec §6: the implementation follows them, no
    deviation found). PF-PNE pays stage 1 AND a local tau_h for every node of K_m^h minus K^h
    (Alg. 3 line 4; the text says explicitly that this includes E^h), and the global survivors
    S^h are never locally eliminated (line 9), so at depth H0 + 1 every child of S^{H0} needs
    tau_{H0+1} local pulls. Seeds 0..4, T = 10^4: PF-PNE with H0 = 0 (Delta = 1, i.e. one local
    phased elimination per client) 776 ± 53 is already below the default's 1086, and is 4.4x
    local HCT's 177 ± 17; H0 = 9 (Delta = 0.001) degenerates to Fed-PNE, 520 ± 81. Two readings
    that skip the local re-examination of E^h, measured by monkeypatching (not offered as
    options): E^h keep their stage-1 local statistics 1205 ± 85; E^h take global statistics
    (which the server does not broadcast in [PF]) 469 ± 157, below Fed-PNE's 518 ± 80 on the
    mean only, and 2.7x local HCT's. The ordering also fails at shift sd 0.05, 1, 2 (3 seeds)
    and with M = 50.
    """
    pf, fed = outcomes(
        _local("pfpne", "himmelblau", 10_000), _local("fedpne", "himmelblau", 10_000)
    )
    assert pf.local_regret.mean() < fed.local_regret.mean(), (
        f"PF-PNE {mean_std(pf.local_regret)} vs Fed-PNE {mean_std(fed.local_regret)}"
    )


@pytest.mark.xfail(
    strict=True,
    reason=(
        "PF-PNE's average local cumulative regret is ABOVE local HCT's (PyXAB defaults, one HCT "
        "per client) at every budget measured, by a factor 1.8 to 6. Garland (shift sd 0.05), "
        "M = 10: T = 10^3 258 ± 7 vs 140 ± 9, 3 x 10^3 797 ± 28 vs 313 ± 12, 10^4 2332 ± 142 vs "
        "760 ± 66, 3 x 10^4 5965 ± 643 vs 1722 ± 175 (3 seeds). Himmelblau (shift sd 0.5): "
        "10^3 86.7 ± 4.9 vs 40.3 ± 2.4, 10^4 1086 ± 13 vs 177 ± 17"
    ),
)
def test_pfpne_local_regret_below_local_hct_on_shifted_garland():
    """[PF] Fig. 1(a): PF-PNE's average local cumulative regret < local HCT's on Garland.

    Budget T = 3000 (the smallest at which PF-PNE spends most of its budget in stage 2: the
    handover comes at 0.24..0.36 T; at T = 1000 it comes at 0.63..0.94 T), M = 10. Tolerance:
    strict inequality of the means over seeds 0..2 (:data:`HCT_SEEDS`). Measured on seeds 0..4:
    PF-PNE 782.0, 753.6, 835.2, 796.9, 816.3 (797 ± 28), local HCT 305.9, 330.3, 319.9, 313.1,
    295.5 (313 ± 12): PF-PNE is 2.3 to 2.8 times local HCT on every seed. Local
    HCT is adaptive (it samples a node only while its upper bound is the best), whereas PF-PNE's
    stage 2 pulls every non-protected active node tau_h times (tau_7 = 1887 at T = 10^4).
    Himmelblau's numbers, in the reason, are not run here (local HCT on the 2-D shifted family
    costs about 10 s per seed at T = 10^4).

    Diagnosis (see the Himmelblau test above): the algorithm follows [PF] Algs. 1-3; PE's cost
    is inherent. Seeds 0..4, Garland, T = 3000 / 10^4: PF-PNE 797 ± 28 / 2332 ± 143, with
    H0 = 0 (Delta = 1, one local phased elimination per client) 652 ± 10 / 1666 ± 40, Fed-PNE
    598 ± 57 / 1855 ± 251, local HCT 313 ± 12 / 760 ± 66. Even H0 = 0 is 2x HCT, so no reading
    of PE at depths <= H0 can reach HCT; collaboration makes it worse because the 10 to 11
    protected global survivors of depth 6 (fbar, the average of the shifted Garlands, is much
    flatter than any f_m) cannot be eliminated locally, and their 20 to 22 children each need
    tau_7 = 1887 local pulls. With shift sd 0.05 the real max_m |fbar* - f_m*| is 0.13 to 0.18
    (seeds 0..2), not Delta = 0.01 (Assumption 3 does not hold); Delta = 0.1 (H0 = 3) gives
    654 ± 12 / 1663 ± 43. No shift sd from 0.001 to 0.2 puts PF-PNE below Fed-PNE at T = 3000
    (seeds 0..2).

    The baseline is not the reason either. PyXAB 0.3.0's own HCT (the one the papers' authors
    ran; it re-expands internal nodes and has higher regret than fedxab's, see
    benchmarks/README.md), run per client by a one-off script on shifted Garland (shift sd 0.05,
    U(-0.1, 0.1) noise, its own draws, seeds 0..4), T = 3000: 433 ± 8, still below PF-PNE's
    797 ± 28; [FX]'s rho = 0.75 for fedxab's local HCT: 281 ± 2.
    """
    pf, hct = outcomes(
        _local("pfpne", "garland", 3000, HCT_SEEDS), _local("local-hct", "garland", 3000, HCT_SEEDS)
    )
    assert pf.local_regret.mean() < hct.local_regret.mean(), (
        f"PF-PNE {mean_std(pf.local_regret)} vs local HCT {mean_std(hct.local_regret)}"
    )


# ---------------------------------------------------------------- 2. Fed-PNE, global regret
@pytest.mark.parametrize(
    "objective",
    [
        pytest.param("garland", id="garland"),
        pytest.param("doublesine", id="doublesine"),
    ],
)
def test_fedpne_global_regret_below_central_hct_and_fed1ucb_with_50_clients(objective):
    """[FX] Fig. 2(a, b): Fed-PNE's average global cumulative regret < centralised HCT's (HCT on
    the global objective, rho = 0.75, one round = every client's evaluation of one point) and
    < Fed1-UCB's (20 random-offset arms, kappa = 1), with value offsets.

    Budget T = 1000, M = 50 (a value of the spec's proposed M-sweep {5, 10, 50, 500}; [FX] does
    not state Fig. 2's M). Tolerances: Fed-PNE < 0.95 central HCT on each of the paired seeds
    0..2 (:data:`HCT_SEEDS`: central HCT costs about 5.5 CPU-seconds per seed here, Fed-PNE 0.1),
    and mean(Fed-PNE) < 0.8 mean(Fed1-UCB) over seeds 0..4. Per seed 0..4, Fed-PNE / central
    HCT: Garland 124.6/137.5, 122.4/137.2, 122.0/134.7, 122.0/138.6, 122.4/138.4 (ratios 0.88 to
    0.91), DoubleSine 38.5 on every seed / 64.8, 66.6, 66.3, 65.1, 65.7 (0.58 to 0.59); Fed1-UCB
    Garland 172.5, 145.1, 313.2, 312.0, 249.5, DoubleSine 230.8, 236.3, 131.9, 99.5, 99.7.
    Measured on seeds 0..4 / 100..104 / 200..204:
    Garland: Fed-PNE 122.7 ± 1.0 / 121.6 ± 0.9 / 121.9 ± 0.7, central HCT 137.2 ± 1.4 /
    137.6 ± 0.5 / 138.1 ± 0.6, Fed1-UCB 238.4 ± 69.6 / 274.7 ± 49.4 / 232.5 ± 53.4;
    DoubleSine: Fed-PNE 38.5 ± 0.0 (all sets), central HCT 65.7 ± 0.7 / 65.8 ± 0.7 / 66.3 ± 0.4,
    Fed1-UCB 159.6 ± 61.5 / 131.9 ± 52.7 / 171.2 ± 52.8. Fed-PNE is below central HCT on every
    paired seed.

    The ordering against central HCT needs many clients relative to the horizon. Fed-PNE's
    regret per client falls with M (test 3) while central HCT's hardly moves (Garland, T = 1000,
    seeds 0, 1: 134.8 with M = 10, 137.3 with M = 50, 138.5 with M = 100), so central HCT's
    M = 10 values (T = 3 x 10^3, 10^4) stand in below for the runs too slow to make with more
    clients. Garland: it fails with M = 10 (next test) and with M = 50 at longer horizons
    (T = 3 x 10^3: 276.8 vs 276.5 measured with M = 50; T = 10^4: 641.7 vs 588.5); with M = 100
    Fed-PNE's 105.7, 210.9, 425.6 at T = 10^3, 3 x 10^3, 10^4 are below 138.5, 281.4, 588.5.
    DoubleSine: with M = 10 it fails at T = 10^3 (83.0 vs 66.4) and 3 x 10^3 (135.2 vs 132.3) and
    holds at 10^4 (261.3 vs 302.5); with M = 50 Fed-PNE's 38.5, 79.0, 231.8 are below 65.7,
    132.3, 302.5.
    """
    fed, central, ucb = outcomes(
        _global("fedpne", objective, 1000, 50),
        _global("central-hct", objective, 1000, 50, HCT_SEEDS),
        _global("fed1ucb", objective, 1000, 50),
    )
    paired = fed.global_regret[:HCT_SEEDS]  # the seeds central HCT ran
    summary = (
        f"Fed-PNE {fed.global_regret.round(1)}, central HCT {central.global_regret.round(1)}, "
        f"Fed1-UCB {ucb.global_regret.round(1)}"
    )
    assert np.all(paired < 0.95 * central.global_regret), summary
    assert fed.global_regret.mean() < 0.8 * ucb.global_regret.mean(), summary


@pytest.mark.xfail(
    strict=True,
    reason=(
        "Garland with value offsets, M = 10 (the spec's proposed default): Fed-PNE's average "
        "global cumulative regret is ABOVE centralised HCT's at every budget measured, and the "
        "gap grows with T: T = 10^3 153.3 ± 0.8 vs 135.1 ± 2.4, 3 x 10^3 363.5 ± 0.8 vs "
        "281.4 ± 6.2, 10^4 1004 ± 7 vs 589 ± 5 (Fed1-UCB is far above both: 306, 745, 2082)"
    ),
)
def test_fedpne_global_regret_below_central_hct_on_garland_with_10_clients():
    """[FX] Fig. 2(a) with the spec's default M = 10: Fed-PNE < centralised HCT on Garland.

    Budget T = 1000. Tolerance: strict inequality of the means over seeds 0..2
    (:data:`HCT_SEEDS`). Measured on seeds 0..4: Fed-PNE 153.0, 153.0, 155.0, 152.7, 153.0
    (153.3 ± 0.8), central HCT 134.9, 134.7, 138.7, 136.2, 131.3 (135.1 ± 2.4). With M = 10
    each depth-h node costs every client ceil(tau_h / 10) pulls, and Fed-PNE reaches depth 8 to 9
    by T = 10^4, where even the centre of the cell holding Garland's cusp x* = pi/6 is 0.082
    (depth 8) or 0.055 (depth 9) below f*: its regret per round is still 0.10 at T = 10^4,
    central HCT's 0.059.

    With PyXAB 0.3.0's own HCT as the centralised baseline (what the papers' authors ran; its
    regret is higher than fedxab's, see benchmarks/README.md), rho = 0.75, each round's reward
    the mean of the 10 clients' noisy values (a one-off script, its own draws, seeds 0..4):
    152.5 ± 3.0 at T = 10^3 and 714.7 ± 9.0 at 10^4, level with or below Fed-PNE's 153.3 and
    1004.
    """
    fed, central = outcomes(
        _global("fedpne", "garland", 1000, 10, HCT_SEEDS),
        _global("central-hct", "garland", 1000, 10, HCT_SEEDS),
    )
    assert fed.global_regret.mean() < central.global_regret.mean(), (
        f"Fed-PNE {mean_std(fed.global_regret)} vs central HCT {mean_std(central.global_regret)}"
    )


# ----------------------------------------------------------- 3. Fed-PNE, more clients M
@pytest.mark.parametrize("objective", ["garland", "doublesine"])
def test_fedpne_per_client_regret_decreases_with_more_clients(objective):
    """[FX] Fig. 3: larger M gives smaller average (per-client) global cumulative regret.

    Budget T = 1000, value offsets, M in {5, 20, 80}. Tolerance: each step at least 5% lower,
    mean(M = 20) < 0.95 mean(M = 5) and mean(M = 80) < 0.95 mean(M = 20). Measured (seeds 0..4):
    Garland 163.1 ± 3.7 > 132.3 ± 2.1 > 113.3 ± 0.6; DoubleSine 101.7 ± 4.0 > 54.8 ± 0.0 >
    36.3 ± 0.0. Seeds 100..104: Garland 166.3 > 134.4 > 114.1, DoubleSine 101.7 > 54.8 > 36.3;
    seeds 200..204: Garland 161.9 > 130.3 > 113.6, DoubleSine 102.9 > 54.8 > 36.3. Also at
    T = 3000 and 10^4 (Garland 1191 > 834 > 480 at 10^4). DoubleSine's std is 0 for M >= 20: the
    1-D partition does not depend on the seed and the clients' noise averages out.
    """
    small, medium, large = outcomes(*(_global("fedpne", objective, 1000, m) for m in (5, 20, 80)))
    summary = ", ".join(
        f"M={o.setting.clients}: {mean_std(o.global_regret)}" for o in (small, medium, large)
    )
    assert medium.global_regret.mean() < 0.95 * small.global_regret.mean(), summary
    assert large.global_regret.mean() < 0.95 * medium.global_regret.mean(), summary


# ------------------------------------------------------------------ 4. communication
FRACTIONS = (1 / 16, 1 / 8, 1 / 4, 1 / 2, 1.0)


def _communication_summary(name: str, outcome: Outcome) -> str:
    curve = outcome.message_curve(FRACTIONS)
    means = ", ".join(
        f"{f:g}T: {v:.0f}" for f, v in zip(FRACTIONS, curve.mean(axis=0), strict=True)
    )
    starts = np.round(outcome.last_phase_start(), 3).tolist()
    return f"{name} cumulative messages {means}; last phase starts at {starts} T"


@pytest.mark.parametrize(
    ("objective", "budget"),
    [
        pytest.param("garland", 100_000, id="garland"),
        pytest.param("himmelblau", 30_000, id="himmelblau"),
    ],
)
def test_pfpne_communication_stops_after_stage_one_while_fedpne_keeps_growing(objective, budget):
    """[PF] Fig. 3: PF-PNE's cumulative communication stops growing after stage 1; Fed-PNE's
    keeps growing. Input shifts, M = 10; Garland at T = 10^5 (the runs of the first test),
    Himmelblau at T = 3 x 10^4.

    From the per-phase communication records, a phase's messages (up + down) counted at the round
    its broadcast goes out. Checked on every seed (exact, no tolerance): PF-PNE has H0 + 1 = 7
    phases (6 stage-1 depths and the handover) and its cumulative messages at T/8, T/4, T/2 and T
    are equal; Fed-PNE's at T/8 are fewer than at T (a phase starts after T/8).
    Measured on seeds 0..4: PF-PNE's last phase (the handover) starts at 0.011..0.015 T (Garland)
    and 0.062..0.070 T (Himmelblau); Fed-PNE's last phase at 0.44..0.96 T (Garland) and
    0.21..0.79 T (Himmelblau). Every phase sends 2M = 20 messages: mean cumulative messages at
    T/16, T/8, T/4, T/2, T are PF-PNE 140, 140, 140, 140, 140 and Fed-PNE 136, 148, 152, 168, 184
    (Garland); PF-PNE 128, 140, 140, 140, 140 and Fed-PNE 108, 120, 128, 140, 144 (Himmelblau).
    Seeds 100..104 and 200..204: PF-PNE's handover at <= 0.016 T (Garland), <= 0.081 T
    (Himmelblau); Fed-PNE's last phase at >= 0.30 T (Garland), >= 0.21 T (Himmelblau). Smaller
    budgets do not separate the two robustly: at T = 10^4 PF-PNE's handover comes as late as
    0.13 T (Garland) and 0.20 T (Himmelblau), and Fed-PNE's last phase as early as 0.21 T
    (Himmelblau).
    """
    pf, fed = outcomes(_local("pfpne", objective, budget), _local("fedpne", objective, budget))
    summary = _communication_summary("PF-PNE", pf) + " | " + _communication_summary("Fed-PNE", fed)
    h0 = transition_depth(0.01, 1.0, 0.5)
    assert all(len(phases) == h0 + 1 for phases in pf.phases), summary
    pf_curve = pf.message_curve(FRACTIONS)
    assert np.all(pf_curve[:, 1:] == pf_curve[:, -1:]), summary
    fed_curve = fed.message_curve(FRACTIONS)
    assert np.all(fed_curve[:, 1] < fed_curve[:, -1]), summary
