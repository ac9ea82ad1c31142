"""The server's checkpoint: the reports it accepted in every closed phase, written after each phase.

A server state machine is deterministic: built from the same config and seed, and given the same
reports phase after phase, it makes the same decisions. So the checkpoint does not serialise the
state machine; it records, per closed phase, which reports were aggregated (the payload bytes
exactly as received) and the phase's communication counts. A restarted server rebuilds its state
by replaying them (:meth:`fedxab.run.session.ServerSession.restore`) and continues with the open
phase, so no phase is lost or repeated, even where a phase was closed on a quorum after a deadline.

The file is msgpack (no pickle), written atomically (temporary file, fsync, rename): a crash
mid-write leaves the previous checkpoint intact. It names its run; resuming another run's
checkpoint is refused. A signing run's checkpoint also keeps the server's session
(:mod:`fedxab.security.signing`), so a restarted server goes on in the same session.
"""

from __future__ import annotations

import os
from pathlib import Path

from fedxab.broker.codec import packb, unpackb
from fedxab.errors import FedxabError, ProtocolError
from fedxab.run.session import ClosedPhase

__all__ = ["CheckpointError", "ClosedPhase", "ServerCheckpoint"]

_SCHEMA = "fedxab.checkpoint/1"


class CheckpointError(FedxabError, RuntimeError):
    """A checkpoint file is unreadable, corrupted, or belongs to another run."""


class ServerCheckpoint:
    """The closed phases of one run, kept in memory and (with a path) on disk."""

    def __init__(self, path: str | Path | None, run_id: str) -> None:
        self.path = None if path is None else Path(path)
        self.run_id = run_id
        self.phases: list[ClosedPhase] = []
        self.session = ""
        """The server's session (signing runs; "" otherwise)."""

    def load(self) -> list[ClosedPhase]:
        """Read the closed phases from disk (none if there is no file yet)."""
        if self.path is None or not self.path.exists():
            return self.phases
        try:
            data = unpackb(self.path.read_bytes())
            if not isinstance(data, dict) or data.get("schema") != _SCHEMA:
                raise ProtocolError(f"not a {_SCHEMA} file")
            if data.get("run_id") != self.run_id:
                raise CheckpointError(
                    f"checkpoint {self.path} belongs to run {data.get('run_id')!r}, not "
                    f"{self.run_id!r}; remove it or point --checkpoint elsewhere"
                )
            session = data.get("session", "")
            if not isinstance(session, str):
                raise ProtocolError("session must be a string")
            self.session = session
            self.phases = [
                ClosedPhase(
                    phase=int(p["phase"]),
                    reports={int(m): bytes(v) for m, v in p["reports"]},
                    counts=dict(p["counts"]),
                )
                for p in data["phases"]
            ]
        except (ProtocolError, KeyError, TypeError, ValueError) as exc:
            raise CheckpointError(f"checkpoint {self.path} is corrupted: {exc}") from exc
        return self.phases

    def append(self, closed: ClosedPhase) -> None:
        """Record a closed phase, then write the whole checkpoint atomically."""
        self.phases.append(closed)
        if self.path is None:
            return
        body = packb(
            {
                "schema": _SCHEMA,
                "run_id": self.run_id,
                "session": self.session,
                "phases": [
                    {
                        "phase": p.phase,
                        "reports": [[m, p.reports[m]] for m in sorted(p.reports)],
                        "counts": p.counts,
                    }
                    for p in self.phases
                ],
            }
        )
        self.path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_name(self.path.name + ".tmp")
        with open(tmp, "wb") as fh:
            fh.write(body)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, self.path)
