"""The ``pld`` accountant, and the time limit of the backends that compute in the worker process.

``pld`` is dp-accounting's PLD accountant: it must equal that accountant used directly (same
neighbouring relation, same discretization interval) to 1e-9, be at most ``rdp`` everywhere, and
give the issue's landmine figure. A computation that runs out of time, or whose worker dies, is
answered by ``rdp``, counted and logged, and the worker is started again for the next one.
"""

from __future__ import annotations

import importlib.util
import logging
import math
import os
import subprocess
import sys

import dp_accounting
import pytest

import fedxab
from fedxab.errors import ConfigError
from fedxab.privacy import accountants
from fedxab.privacy.accountants import (
    FALLBACK,
    PLD_VALUE_INTERVAL,
    TIME_LIMITED,
    make_accountant,
)
from fedxab.privacy.ledger import PrivacyLedger
from fedxab.privacy.mechanisms import PrivacyEvent
from fedxab.privacy.run_ledger import RunLedger

PLD = make_accountant("pld")
RDP = make_accountant("rdp")


def _event(q: float, z: float, count: int, scope: str = "") -> PrivacyEvent:
    return PrivacyEvent("gaussian", z, q, 1.0, count, scope)


def _direct(*events: tuple[float, float, int]) -> dp_accounting.pld.PLDAccountant:
    """dp-accounting's PLD accountant with ``(q, z, count)`` releases composed, built here
    without fedxab's code."""
    accountant = dp_accounting.pld.PLDAccountant(
        neighboring_relation=dp_accounting.NeighboringRelation.ADD_OR_REMOVE_ONE,
        value_discretization_interval=PLD_VALUE_INTERVAL,
    )
    for q, z, count in events:
        gaussian = dp_accounting.GaussianDpEvent(z)
        release = gaussian if q == 1 else dp_accounting.PoissonSampledDpEvent(q, gaussian)
        accountant.compose(release, count)
    return accountant


# Settings not used anywhere else (so not tuned to pass): one release kind, two kinds that
# compose in one scope, the plain Gaussian (q = 1); at deltas and epsilons far apart.
HELD_OUT = [
    ([(0.02, 1.3, 700)], 1e-5, 1.0),
    ([(0.27, 2.2, 45)], 1e-3, 0.5),
    ([(1.0, 3.1, 12)], 1e-4, 2.0),
    ([(0.005, 0.9, 4000), (0.05, 1.7, 300)], 1e-6, 3.0),
]


@pytest.mark.parametrize(("releases", "delta", "epsilon"), HELD_OUT)
def test_pld_equals_dp_accountings_pld_accountant_used_directly(releases, delta, epsilon):
    events = [_event(q, z, n) for q, z, n in releases]
    direct = _direct(*releases)
    assert PLD.epsilon(events, delta) == pytest.approx(direct.get_epsilon(delta), rel=1e-9)
    assert PLD.delta(events, epsilon) == pytest.approx(direct.get_delta(epsilon), rel=1e-9)


def test_pld_combines_scopes_by_their_maximum():
    a, b = (0.1, 1.1, 200), (0.4, 2.5, 30)
    events = [_event(*a, scope="phase-1"), _event(*b, scope="phase-2")]
    epsilon = max(_direct(a).get_epsilon(1e-5), _direct(b).get_epsilon(1e-5))
    delta = max(_direct(a).get_delta(1.5), _direct(b).get_delta(1.5))
    for order in (events, events[::-1]):
        assert PLD.epsilon(order, 1e-5) == pytest.approx(epsilon, rel=1e-9)
        assert PLD.delta(order, 1.5) == pytest.approx(delta, rel=1e-9)
    assert PLD.epsilon([], 1e-5) == PLD.delta([], 1.0) == 0.0


# The plain Gaussian at 10^4 releases and z < 4 takes 5 to 30 s per value: left out.
GRID = [
    (q, z, count, delta)
    for q in (0.01, 0.1, 0.35, 1.0)
    for z in (0.8, 1.5, 4.0)
    for count in (1, 100, 10_000)
    for delta in (1e-5, 1e-3)
    if not (q == 1 and count == 10_000 and z < 4)
]


@pytest.mark.parametrize(("q", "z", "count", "delta"), GRID)
def test_pld_is_never_above_rdp(q, z, count, delta):
    events = [_event(q, z, count)]
    rdp = RDP.epsilon(events, delta)
    assert PLD.epsilon(events, delta) <= rdp
    # and at rdp's epsilon, pld's delta is at most the delta rdp reached it at
    assert PLD.delta(events, rdp) <= delta * (1 + 1e-9)


def test_the_issues_landmine_figure():
    # DP-FTS-DE's landmine setting: q = 0.35, z = 1, 61 releases, delta = 1e-5
    events = [_event(0.35, 1.0, 61)]
    assert RDP.epsilon(events, 1e-5) == pytest.approx(21.78, abs=0.01)
    assert PLD.epsilon(events, 1e-5) == pytest.approx(19.93, abs=0.01)


def test_clients_with_the_same_history_share_one_computation(monkeypatch):
    calls = []
    run = accountants._WORKER.run

    def counting(*args):
        calls.append(args)
        return run(*args)

    monkeypatch.setattr(accountants._WORKER, "run", counting)
    accountant = make_accountant("pld")
    values = {accountant.epsilon([_event(0.03, 1.9, 321)], 1e-5) for _ in range(1000)}
    assert len(values) == 1
    assert len(calls) == 1


# --- the time limit -------------------------------------------------------------------------


def _needs(name: str) -> None:
    if name.startswith("opacus") and importlib.util.find_spec("opacus") is None:
        pytest.skip("optional extra: pip install torch==2.13.0 'fedxab[opacus]'")


@pytest.mark.parametrize("name", TIME_LIMITED)
def test_a_computation_out_of_time_is_answered_by_rdp_counted_and_logged(name, caplog):
    _needs(name)
    accountant = make_accountant(name, timeout_s=1e-3)
    # not computed by any other test: takes about 0.1 s in a running worker, far over 1 ms
    events = [_event(0.29, 0.93, 517)]
    with caplog.at_level(logging.WARNING, logger=accountants.__name__):
        epsilon = accountant.epsilon(events, 1e-5)
    assert FALLBACK == "rdp"
    assert epsilon == RDP.epsilon(events, 1e-5)
    assert accountant.fallbacks == 1
    (record,) = caplog.records
    assert f"{name!r} accountant ran out of time" in record.message
    assert "accountant_timeout_s = 0.001 s" in record.message
    assert make_accountant(name).fallbacks == 0  # counted per accountant


def test_pld_delta_out_of_time_is_rdps_delta():
    accountant = make_accountant("pld", timeout_s=1e-3)
    events = [_event(0.31, 1.07, 233)]
    assert accountant.delta(events, 4.0) == RDP.delta(events, 4.0)
    assert accountant.fallbacks == 1


def test_after_a_timeout_the_worker_is_started_again_and_answers():
    worker = accountants._WORKER
    PLD.epsilon([_event(0.011, 2.3, 50)], 1e-5)  # a running worker
    before = worker._process.pid
    slow = make_accountant("pld", timeout_s=1e-3)
    slow.epsilon([_event(0.33, 0.87, 611)], 1e-5)
    assert slow.fallbacks == 1
    assert worker._process is None  # killed
    events = [_event(0.012, 2.4, 60)]
    assert PLD.epsilon(events, 1e-5) == pytest.approx(_direct((0.012, 2.4, 60)).get_epsilon(1e-5))
    assert PLD.fallbacks == 0
    assert worker._process.poll() is None and worker._process.pid != before


def test_a_worker_that_dies_is_an_answer_of_none_and_is_replaced():
    worker = accountants._WORKER
    assert worker.run(os._exit, (3,), 60.0) is None  # the worker exits mid-computation
    assert worker.failure == "its worker process stopped (exit status 3)"
    assert worker._process is None
    assert worker.run(math.fsum, ([0.25, 0.5],), 60.0) == 0.75


def test_an_interrupted_call_leaves_no_stale_answer_for_the_next(monkeypatch):
    worker = accountants._WORKER
    assert worker.run(math.fsum, ([1.0],), 60.0) == 1.0  # a running worker

    def interrupted(timeout: float) -> bytes:
        raise KeyboardInterrupt

    monkeypatch.setattr(worker._answers, "get", interrupted)
    with pytest.raises(KeyboardInterrupt):
        worker.run(math.fsum, ([2.0],), 60.0)  # sent, then interrupted before the answer
    monkeypatch.undo()
    assert worker.run(math.fsum, ([3.0],), 60.0) == 3.0  # not the 2.0 left in a pipe


def test_an_error_in_the_worker_is_raised_in_the_caller():
    with pytest.raises(ValueError, match="math domain error"):
        accountants._WORKER.run(math.sqrt, (-1.0,), 60.0)
    assert accountants._WORKER._process.poll() is None  # an error is an answer: it stays


def test_a_runs_privacy_block_reports_the_fallbacks():
    events = [_event(0.37, 0.96, 1), _event(0.37, 0.96, 1, scope="phase-2")]
    blocks = {}
    for timeout_s in (1e-3, 60.0):
        ledger = PrivacyLedger(":memory:", accountant="pld", accountant_timeout_s=timeout_s)
        run = RunLedger(ledger, "r", delta=1e-5)
        for phase, event in enumerate(events, 1):
            ledger.record("r", 0, phase, event)
        blocks[timeout_s] = run.block([0], {})
        run.close()
    slow, fast = blocks[1e-3], blocks[60.0]
    assert slow["accountant"] == "pld"
    assert slow["accountant_fallbacks"] >= 1
    assert slow["fallback_accountant"] == "rdp"
    assert slow["fallback_reason"].startswith("the 'pld' accountant did not answer")
    assert "ran out of time (privacy.accountant_timeout_s = 0.001 s)" in slow["fallback_reason"]
    assert slow["epsilon"] == [RDP.epsilon(events, 1e-5)]
    assert fast["accountant_fallbacks"] == 0 and fast["fallback_accountant"] is None
    assert fast["fallback_reason"] is None
    assert fast["epsilon"] == [PLD.epsilon(events, 1e-5)]
    assert fast["epsilon"][0] < slow["epsilon"][0]


@pytest.mark.parametrize("timeout_s", [0.0, -1.0, math.inf, math.nan, None])
def test_a_bad_time_limit_is_a_config_error_naming_the_field(timeout_s):
    with pytest.raises(ConfigError) as info:
        make_accountant("pld", timeout_s=timeout_s)
    assert info.value.field == "privacy.accountant_timeout_s"


# --- the worker never runs the user's program again ------------------------------------------

LANDMINE = """
from fedxab.privacy.accountants import make_accountant
from fedxab.privacy.mechanisms import PrivacyEvent
accountant = make_accountant("pld")
epsilon = accountant.epsilon([PrivacyEvent("gaussian", 1.0, 0.35, 1.0, 61)], 1e-5)
print(f"{epsilon:.2f} {accountant.fallbacks}")
"""
"""The issue's landmine figure (q = 0.35, z = 1, 61 releases, delta = 1e-5) by ``pld``, and
the number of computations ``rdp`` answered instead."""


def _python(*args: str, stdin: str | None = None, cwd=None) -> str:
    done = subprocess.run(
        [sys.executable, *args],
        input=stdin,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        cwd=cwd,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_pld_from_python_stdin_is_pld_not_rdp():
    # multiprocessing's spawn died here at once ('<stdin>') and rdp answered: 21.78
    assert _python("-", stdin=LANDMINE).split() == ["19.93", "0"]


def test_pld_from_python_c_is_pld_not_rdp():
    assert _python("-c", LANDMINE).split() == ["19.93", "0"]


def test_a_script_without_a_main_guard_runs_once(tmp_path):
    script = tmp_path / "user_script.py"
    runs = tmp_path / "runs.txt"
    script.write_text(f"with open({str(runs)!r}, 'a') as f:\n    f.write('ran\\n')\n{LANDMINE}")
    assert _python(str(script), cwd=tmp_path).split() == ["19.93", "0"]
    assert runs.read_text() == "ran\n"  # spawn ran it again in the worker: twice


def test_a_notebook_style_session_is_pld_not_rdp():
    # as a Jupyter kernel does: the cells are exec'd in an interactive __main__ with no file
    kernel = (
        "import sys, types\n"
        "main = types.ModuleType('__main__')\n"
        "sys.modules['__main__'] = main\n"
        f"exec(compile({LANDMINE!r}, '<cell 1>', 'exec'), main.__dict__)\n"
    )
    assert _python("-c", kernel).split() == ["19.93", "0"]


def test_pld_in_a_jupyter_kernel_is_pld_not_rdp(tmp_path):
    # a real IPython kernel (this interpreter, this environment: PYTHONPATH as above)
    jupyter_client = pytest.importorskip("jupyter_client", reason="pip install 'fedxab[dev]'")
    pytest.importorskip("ipykernel", reason="pip install 'fedxab[dev]'")
    manager = jupyter_client.KernelManager(
        kernel_name="python3", connection_file=str(tmp_path / "kernel.json")
    )
    manager.start_kernel(env=dict(os.environ), cwd=str(tmp_path))
    client = manager.blocking_client()
    try:
        client.start_channels()
        client.wait_for_ready(timeout=60)
        printed = []

        def stdout(message: dict) -> None:
            if message["msg_type"] == "stream" and message["content"]["name"] == "stdout":
                printed.append(message["content"]["text"])

        cells = ["import sys, fedxab\nprint(sys.executable, fedxab.__file__)", LANDMINE]
        for cell in cells:
            reply = client.execute_interactive(cell, timeout=60, output_hook=stdout)
            assert reply["content"]["status"] == "ok", reply["content"]
    finally:
        client.stop_channels()
        manager.shutdown_kernel(now=True)
    where, answer = "".join(printed).splitlines()
    assert where.split() == [sys.executable, fedxab.__file__]  # the interpreter and tree under test
    assert answer.split() == ["19.93", "0"]


def test_a_frozen_program_computes_in_a_thread(monkeypatch):
    monkeypatch.setattr(sys, "frozen", True, raising=False)
    worker = accountants._Worker()
    events = (_event(0.35, 1.0, 61),)
    assert worker.run(accountants._pld_epsilon, (events, 1e-5), 60.0) == pytest.approx(
        19.93, abs=0.01
    )
    assert worker._process is None  # no process started
    assert worker.run(accountants._pld_epsilon, ((_event(0.3, 0.9, 700),), 1e-5), 1e-3) is None
    assert worker.failure.startswith("ran out of time")
