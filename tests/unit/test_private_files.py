"""Files with secrets or private data are owner-only from the start, whatever the umask, and
ignored by git (issue 16)."""

from __future__ import annotations

import os
import stat
import subprocess
from pathlib import Path

import pytest

from fedxab.agents.checkpoint import ServerCheckpoint
from fedxab.agents.local import run_config
from fedxab.config import config_from_dict
from fedxab.privacy.ledger import PrivacyLedger
from fedxab.private_files import OWNER_ONLY, write_atomically
from fedxab.results import write_results
from fedxab.run.session import ClosedPhase
from fedxab.security.keypairs import generate_keypairs
from fedxab.security.keys import generate_keys

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def open_umask():
    """The loosest umask a user may have: every file would be world-readable."""
    old = os.umask(0)
    yield
    os.umask(old)


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_every_private_file_is_owner_only(tmp_path, open_umask):
    config = config_from_dict({"run": {"budget": 50}, "algorithm": {"name": "hct"}})
    results = write_results(run_config(config), tmp_path / "out")
    checkpoint = ServerCheckpoint(tmp_path / "ckpt" / "run.ckpt", "run")
    checkpoint.append(ClosedPhase(1, {0: b"r"}, {"messages_up": 1}))
    with PrivacyLedger(tmp_path / "ledger.db") as ledger:
        ledger.runs()
    keys = generate_keys(2, tmp_path / "keys")
    pairs = generate_keypairs(2, tmp_path / "pairs")
    private = [results, checkpoint.path, tmp_path / "ledger.db", *keys]
    private += [p for p in pairs if p.suffix == ".key"]
    assert {str(p): _mode(p) for p in private} == {str(p): OWNER_ONLY for p in private}
    public = [p for p in pairs if p.suffix == ".pub"]  # public keys: for whoever verifies
    assert len(public) == 3 and all(_mode(p) == 0o644 for p in public)
    assert _mode(tmp_path / "pairs" / "private") == 0o700
    journals = [p for p in tmp_path.iterdir() if p.name.startswith("ledger.db-")]
    assert all(_mode(p) == OWNER_ONLY for p in journals)


def test_an_existing_ledger_keeps_its_mode(tmp_path):
    path = tmp_path / "shared.db"
    with PrivacyLedger(path):
        pass
    path.chmod(0o640)  # the owner chose to let a group of auditors read it
    with PrivacyLedger(path) as ledger:
        ledger.runs()
    assert _mode(path) == 0o640


def test_an_atomic_write_that_fails_leaves_the_old_file(tmp_path, monkeypatch):
    path = tmp_path / "results.json"
    write_atomically(path, b"old")

    def broken_fsync(fd):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "fsync", broken_fsync)
    with pytest.raises(OSError, match="No space"):
        write_atomically(path, b"new")
    assert path.read_bytes() == b"old"
    assert [p.name for p in tmp_path.iterdir()] == ["results.json"]  # no temporary left


@pytest.mark.parametrize(
    "path",
    ["keys/client-0.key", "run.key", "checkpoints/a.ckpt", "out/a.ckpt", "ledger.db",
     "x/ledger.db-wal", "results/run/results.json", "elsewhere/results.json"],
)  # fmt: skip
def test_private_files_are_ignored_by_git(path):
    if not (ROOT / ".git").exists():
        pytest.skip("not a git checkout")
    ignored = subprocess.run(["git", "check-ignore", "-q", path], cwd=ROOT, check=False)
    assert ignored.returncode == 0, path
