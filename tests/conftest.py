"""Fixtures every test shares."""

from __future__ import annotations

import signal
from pathlib import Path

import pytest

from fedxab.privacy.run_ledger import LEDGER_HOME_VAR

if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
    # A shell starts a background job with SIGINT ignored, and its children inherit that: the
    # tests that stop `fedxab` processes with Ctrl-C (SIGINT) need it to reach them.
    signal.signal(signal.SIGINT, signal.default_int_handler)


@pytest.fixture(autouse=True)
def _private_ledger_home(tmp_path_factory, monkeypatch):
    """The default lifetime ledger of each test in a directory of its own (and the processes it
    starts, which inherit the environment): no test writes to the user's home."""
    monkeypatch.setenv(LEDGER_HOME_VAR, str(tmp_path_factory.mktemp("fedxab-home")))


LONGEST_FILES = (
    "reproduction/test_fts_orderings.py",
    "integration/test_soak.py",
    "reliability/test_fuzz_messages.py",
    "integration/test_faults.py",
    "reproduction/test_paper_orderings.py",
    "integration/test_user_objectives.py",
    "reliability/test_fuzz_fields.py",
    "integration/test_ledger_attacks.py",
    "integration/test_sklearn_example.py",
    "integration/test_resume.py",
    "docs/test_api_reference.py",
    "unit/test_ledger.py",
    "integration/test_private_run_ledgers.py",
    "integration/test_continue.py",
    "reliability/test_fuzz_live.py",
    "integration/test_examples.py",
    "integration/test_every_federated_algorithm.py",
    "integration/test_reproduce.py",
)
"""The test files that cost most, most first: CPU-seconds (user + system, the processes they
start included) of ``/usr/bin/time pytest FILE``, from 148 (the FTS orderings) down to 21.
``make test`` gives whole files to its 2 workers in collection order (``--dist loadfile
--no-loadscope-reorder``), so these start first and the many short files fill in beside them,
rather than one long file running alone at the end (xdist's default order, by number of tests,
put them last)."""


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The files of :data:`LONGEST_FILES` first, in that order; each file keeps its own order."""
    tests = Path(__file__).parent
    rank = {name: i for i, name in enumerate(LONGEST_FILES)}

    def file_rank(item: pytest.Item) -> int:
        try:
            name = item.path.relative_to(tests).as_posix()
        except ValueError:
            return len(rank)
        return rank.get(name, len(rank))

    items.sort(key=file_rank)  # stable
