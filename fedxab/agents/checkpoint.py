"""The server's checkpoint: the reports it accepted in every closed phase, written after each phase.

A server state machine is deterministic: built from the same config and seed, and given the same
reports phase after phase, it makes the same decisions. So the checkpoint does not serialise the
state machine; it records, per closed phase, which reports were aggregated (the payload bytes
exactly as received) and the phase's communication counts. A restarted server rebuilds its state
by replaying them (:meth:`fedxab.run.session.ServerSession.restore`) and continues with the open
phase, so no phase is lost or repeated, even where a phase was closed on a quorum after a deadline.

The file is msgpack (no pickle), owner-only, written atomically (temporary file, fsync, rename:
:func:`~fedxab.private_files.write_atomically`): a crash mid-write leaves the previous checkpoint
intact. It carries the SHA-256 digest of its contents: a file changed on disk is refused with
:class:`CheckpointError`, never loaded. It names its run; resuming another run's checkpoint is
refused. It also keeps the execution's session (:mod:`fedxab.agents.lobby`), written as soon as
the server draws it (before any phase closes), so a restarted server goes on in the same session,
and client agents welcomed before the restart, or restarted after it, are in it.
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

from fedxab.broker.codec import packb, unpack_frame, unpackb
from fedxab.errors import FedxabError, ProtocolError
from fedxab.private_files import private_dir, write_atomically
from fedxab.run.membership import PhaseMembers
from fedxab.run.session import ClosedPhase

__all__ = ["CheckpointError", "ClosedPhase", "ServerCheckpoint"]

_SCHEMA = "fedxab.checkpoint/2"
"""Version 2 adds the SHA-256 digest of the contents: a corrupted file is refused, never loaded."""


def _closed_phase(data: Any) -> ClosedPhase:
    """One closed phase of a checkpoint's contents (ProtocolError if malformed)."""
    if not isinstance(data, dict):
        raise ProtocolError("a phase must be a map")
    phase, reports, counts = data["phase"], data["reports"], data["counts"]
    if type(phase) is not int or phase < 0 or not isinstance(counts, dict):
        raise ProtocolError(f"malformed phase {phase!r:.80}")
    pairs = [(m, v) for m, v in reports]
    if any(type(m) is not int or m < 0 or not isinstance(v, bytes) for m, v in pairs):
        raise ProtocolError(f"phase {phase}: reports must be [client id, bytes] pairs")
    members = data.get("members")  # elastic membership only (fedxab.run.membership)
    recorded = None if members is None else PhaseMembers.from_dict(members, f"phase {phase}")
    opened = data.get("opened")
    if opened is not None and not all(type(m) is int and m >= 0 for m in opened):
        raise ProtocolError(f"phase {phase}: 'opened' must list client ids")
    return ClosedPhase(
        phase=phase,
        reports=dict(pairs),
        counts=counts,
        members=recorded,
        opened=None if opened is None else tuple(opened),
    )


def _phase_data(p: ClosedPhase) -> dict[str, Any]:
    """One closed phase as the checkpoint keeps it."""
    data = {
        "phase": p.phase,
        "reports": [[m, p.reports[m]] for m in sorted(p.reports)],
        "counts": p.counts,
    }
    if p.members is not None:
        data["members"] = p.members.to_dict()
    if p.opened is not None:
        data["opened"] = list(p.opened)
    return data


class CheckpointError(FedxabError, RuntimeError):
    """A checkpoint file is unreadable, corrupted, or belongs to another run."""


class ServerCheckpoint:
    """The closed phases of one run, kept in memory and (with a path) on disk."""

    def __init__(self, path: str | Path | None, run_id: str) -> None:
        self.path = None if path is None else Path(path)
        self.run_id = run_id
        self.phases: list[ClosedPhase] = []
        self.session = ""
        """The execution's session ("" until the server draws it)."""

    def load(self) -> list[ClosedPhase]:
        """Read the closed phases from disk (none if there is no file yet). A file that is not
        a checkpoint, fails its digest or holds a malformed phase raises
        :class:`CheckpointError` naming the file; so does one of another run."""
        if self.path is None or not self.path.exists():
            return self.phases
        try:
            data = ServerCheckpoint._verified(self.path.read_bytes())
            if data.get("run_id") != self.run_id:
                raise CheckpointError(
                    f"checkpoint {self.path} belongs to run {data.get('run_id')!r:.80}, not "
                    f"{self.run_id!r}; remove it or point --checkpoint elsewhere"
                )
            session = data.get("session", "")
            if not isinstance(session, str):
                raise ProtocolError("session must be a string")
            phases = [_closed_phase(p) for p in data["phases"]]
        except CheckpointError:
            raise
        except Exception as exc:  # any defect of the file's contents: never a traceback
            raise CheckpointError(
                f"checkpoint {self.path} is corrupted ({type(exc).__name__}: {exc}); remove it "
                "to start the run over, or restore a copy"
            ) from exc
        self.session, self.phases = session, phases
        return self.phases

    @staticmethod
    def closed_phases_in(path: str | Path) -> int:
        """How many closed phases the checkpoint file at ``path`` holds (0 without a file),
        whatever its run: for watching a server's progress from outside."""
        path = Path(path)
        if not path.exists():
            return 0
        try:
            return len(ServerCheckpoint._verified(path.read_bytes())["phases"])
        except ProtocolError as exc:
            raise CheckpointError(f"checkpoint {path} is corrupted: {exc}") from exc

    @staticmethod
    def _verified(raw: bytes) -> dict:
        """The checkpoint's contents, once the file's SHA-256 digest of them holds."""
        outer = unpack_frame(raw, "checkpoint")
        if outer.get("schema") != _SCHEMA:
            raise ProtocolError(f"not a {_SCHEMA} file (schema {outer.get('schema')!r:.80})")
        body, digest = outer.get("body"), outer.get("sha256")
        if not isinstance(body, bytes) or hashlib.sha256(body).digest() != digest:
            raise ProtocolError("its SHA-256 digest does not match its contents")
        data = unpackb(body)
        if not isinstance(data, dict) or not isinstance(data.get("phases"), list):
            raise ProtocolError("the contents are not a map with a list of phases")
        return data

    def append(self, closed: ClosedPhase) -> None:
        """Record a closed phase, then write the whole checkpoint (:meth:`save`)."""
        self.phases.append(closed)
        self.save()

    def save(self) -> None:
        """Write the whole checkpoint (session and closed phases) atomically, if it has a
        path."""
        if self.path is None:
            return
        body = packb(
            {
                "run_id": self.run_id,
                "session": self.session,
                "phases": [_phase_data(p) for p in self.phases],
            }
        )
        digest = hashlib.sha256(body).digest()
        body = packb({"schema": _SCHEMA, "sha256": digest, "body": body})
        private_dir(self.path.parent)
        write_atomically(self.path, body)
