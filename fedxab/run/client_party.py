"""The client party: the hosted clients' side of the wire, without I/O.

Like h11's ``Connection``, :class:`ClientParty` never touches a socket: the client agent
(:mod:`fedxab.agents.client`) hands it the bytes of each record it reads and publishes the
records it builds; the party decides which broadcasts its clients take, answers them and keeps
the bookkeeping. It owns the hosted clients' :class:`~fedxab.run.session.ClientSession`, their
signer (None: the run does not sign) and the telemetry not yet sent.

Which broadcasts it takes (:meth:`ClientParty.on_broadcast`): the server's broadcasts and aborts of
this run (:func:`~fedxab.run.envelope.admit`), and every record is bound to one execution of
the run. The party learns the execution's session from the server's welcome in the lobby
(:meth:`ClientParty.welcomed`), writes it into every record it builds, and takes only broadcasts
of that session, in phase order (a broadcast may repeat the phase last taken or open the next
one), and a final answer only for the phase it is in. The run id repeats in every execution of a
job (config and seed), so an earlier execution's broadcasts, abort or final answer, replayed on
this run's topic, are of another session: counted (``replay``) and dropped, never acted on.

Records that are not a valid broadcast of this run from the server are counted in
:attr:`ClientParty.counts` (``broadcast_invalid``) and skipped with a log line naming the reason;
they never stop the agent. In a signing run, records that fail this party's keys are counted
too; they name a key as wrong (a :class:`~fedxab.errors.FedxabError` that stops the agent) only
by the rule of :class:`~fedxab.security.agents.KeyWatch` (sustained failures, none verified),
never on a few forged records.

Locally private algorithms (``[privacy]``, DP-Fed-PNE; under central DP, DP-FTS-DE, the server
does all this): the party holds the configured ledger, each hosted client's budget and its gate
(:mod:`fedxab.privacy.gate`); a client that refuses a release withdraws and answers nothing
more. Under local DP (:func:`~fedxab.run.outcome.stays_local`) nothing derived from the clients'
rewards leaves the party but the releases its ledger charged: the telemetry carries the counts of
the pulls only, never their regret terms, and no outcome is sent (with ``[privacy]
release_best``, each client's best value as a DP release instead: :mod:`fedxab.privacy.best`).
Every release a client records is mirrored to the ledger topic (:mod:`fedxab.privacy.mirror`)
before the report that carries it; in a signing run the signed record is also kept in the
client's own ledger as the row's evidence.

With ``metrics`` (:class:`~fedxab.monitoring.metrics.FederationMetrics`, role ``client``) the
party's observer gets its own view, its hosted clients only (:attr:`ClientParty.watch`): the
phases it answered, the messages and bytes it sent and received, its clients' evaluations,
regret (averaged over its clients) and epsilon (local DP, from its ledger).
"""

from __future__ import annotations

import dataclasses
import logging
import time
from collections import Counter
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import numpy as np

from fedxab.algorithms.protocol import Finished, Withdrawal
from fedxab.algorithms.registry import decode_broadcast
from fedxab.broker.codec import SERVER, Envelope, client_sender, encode_envelope, packb
from fedxab.errors import EvaluationError, FedxabError, ProtocolError
from fedxab.privacy.best import BestRelease, release_best
from fedxab.regret import round_grid
from fedxab.results import RunRecord
from fedxab.run.accounting import phase_communication
from fedxab.run.envelope import Refusal, admit, check_phase
from fedxab.run.evaluation import (
    TELEMETRY_PULLS,
    Telemetry,
    regret_known,
    telemetry_batches,
    telemetry_to_wire,
)
from fedxab.run.failures import Aborted, failure_body, failure_text
from fedxab.run.membership import unwrap_broadcast
from fedxab.run.outcome import mean_best, stays_local
from fedxab.run.watch import RunWatch
from fedxab.security.agents import KeyWatch, signer_for
from fedxab.security.signing import Opened, SignatureError, open_record

if TYPE_CHECKING:
    from fedxab.config import Config
    from fedxab.privacy.mirror import Owner
    from fedxab.run.assembly import RunParts
    from fedxab.run.observe import RunObserver
    from fedxab.run.outcome import ClientOutcome

__all__ = ["ClientParty", "Records"]

log = logging.getLogger(__name__)

TAKEN = ("abort", "alive", "broadcast")
"""The kinds of the broadcast topic the clients take (from the server only); ``alive`` says
only that the server runs (:meth:`ClientParty.silence_text`)."""

Records = list[tuple[str, bytes]]
"""Records to publish on one topic: (key, value) pairs, the key a client's id."""


def _refusal(reason: str, text: str) -> ProtocolError:
    """A broadcast refused for ``reason`` (the label it is counted under)."""
    exc = ProtocolError(text)
    exc.reason = reason
    return exc


class ClientParty:
    """The clients ``parts.clients`` hosts in run ``run_id``: what they take, what they send."""

    def __init__(
        self,
        config: Config,
        seed: int,
        parts: RunParts,
        *,
        run_id: str,
        max_message_bytes: int,
        observer: RunObserver,
        namespace: str = "fedxab",
    ) -> None:
        assert parts.clients is not None and config.agents is not None
        self.config = config
        self.run_id = run_id
        self.namespace = namespace
        self.seed = seed
        self.algorithm = config.algorithm.name
        assert config.federation is not None
        self.n_clients = config.federation.clients
        self.elastic = config.federation.elastic
        """Elastic membership: each broadcast names the clients it asks
        (:mod:`fedxab.run.membership`)."""
        self.own_budget = config.agents.client_budget
        """Elastic membership: the hosted clients' own budget (``[agents] client_budget``); a
        client past it withdraws, and then leaves (:meth:`telemetry_records`)."""
        self._leaving: dict[int, int] = {}  # client -> the phase it withdrew at, to leave
        self._gone: set[int] = set()  # clients whose leave was built
        self.hosted = parts.clients
        """The hosted clients' session (:class:`~fedxab.run.session.ClientSession`)."""
        self.clients = self.hosted.clients
        self.family = parts.family
        self.run_ledger = parts.run_ledger  # local DP: each client releases
        self.gates = parts.gates
        self.local_only = stays_local(config)
        """Local DP: no outcome and no regret term leaves this party."""
        self.best_release = (
            BestRelease.of(config.privacy, self.run_ledger.delta)
            if self.local_only and self.run_ledger is not None
            else None
        )
        """Local DP with ``[privacy] release_best``: the release of each client's best value."""
        self.signer = signer_for(config, list(self.clients))  # None unless the run signs
        self.max_message_bytes = max_message_bytes
        self.observer = observer
        """Told of each broadcast refused (:meth:`_invalid`), and what :attr:`watch` tells."""
        self.watch = RunWatch(
            observer,
            config.run.budget,
            self.clients,
            lambda: [m for m in self.clients if self.hosted.withdrawn(m)],
            known=regret_known(self.family, config) if observer.wants_regret else (False, False),
            run_ledger=self.run_ledger,
        )
        """The observer's view of the hosted clients (:class:`~fedxab.run.watch.RunWatch`)."""
        self.hosted.watch_trials(observer)  # a site's own dashboard: each trial, live
        self.finished: Finished | None = None
        """The server's final answer, once it came (:meth:`finish`)."""
        self.privacy: dict[str, Any] | None = None
        """Local DP, once finished: the hosted clients' privacy block (:meth:`close_ledger`)."""
        self.rebroadcast_s = config.agents.rebroadcast_s
        self.server_silence_s = config.agents.server_silence
        """A client agent stops after this long without a record of the server
        (:meth:`silence_text`)."""
        self.telemetry_interval_s = config.agents.telemetry_interval_s
        self.session = ""
        """This execution's session, from the server's welcome: every record built carries
        it; only broadcasts of it are taken."""
        self._welcomed = False
        self.counts: Counter[str] = Counter()
        self.keys = KeyWatch()
        """Records of the server that failed a key (HMAC: a hosted client's; Ed25519: the
        server's), and whether that says the key is wrong."""
        self.phase = 0
        """The phase of the last broadcast taken (0 before the first)."""
        self.broadcast_bytes = 0
        """The payload bytes of the last broadcast taken."""
        self._sent = (0, 0.0)  # the last phase whose replies were sent live, and when
        self._unsent: dict[int, list[Telemetry]] = {}
        self._last_flush = time.monotonic()
        self._fresh: list[Telemetry] = []

    # ---------------------------------------------------------------------------- incoming
    def on_broadcast(self, value: bytes) -> Any | None:
        """The broadcast (or Finished, or Aborted) in the record ``value`` if the clients take
        it, else None (counted): not a valid broadcast of this run (in a signing run: also one
        without a right tag for each hosted client), of another session than
        :attr:`session`, or out of phase order (a broadcast more than one phase ahead of the
        last one taken, a final answer of another phase than it)."""
        try:
            return self._take(value)
        except ProtocolError as exc:
            self._invalid(exc.reason, str(exc))
            if isinstance(exc, SignatureError) and exc.reason == "bad_signature":
                self._key_failed(exc)
            return None

    def _take(self, value: bytes) -> Any:
        """:meth:`on_broadcast`'s checks; a refused record raises ProtocolError with its reason."""
        opened = open_record(value, self.signer, self.max_message_bytes)
        env = admit(opened, run_id=self.run_id, kinds=TAKEN, sender=SERVER, session=self.session)
        if not isinstance(env, Refusal) or env.reason == "replay":
            # the server's record of this run (``replay``: the last check, of another
            # session): the keys that checked it are right
            self._verified(opened)
        if isinstance(env, Refusal):
            raise _refusal(env.reason, env.text)
        if env.kind == "abort":
            return self._abort_of(env)
        if env.kind == "alive":
            return None  # (the wait for the server's next record starts again)
        msg, asked = self._broadcast_of(env)
        final = isinstance(msg, Finished)
        if (final and env.phase != self.phase) or env.phase > self.phase + 1:
            what = "final answer" if final else "broadcast"
            raise _refusal("out_of_order", f"a {what} of phase {env.phase} after {self.phase}")
        if asked is not None and not final:
            assert self.hosted.asked is not None
            self.hosted.asked[env.phase] = asked
        self.phase = max(self.phase, env.phase)
        self.broadcast_bytes = len(env.payload)
        return msg

    def silence_text(self, waited: float) -> str:
        """Why a client agent stops when the broadcast topic brought nothing for ``waited``
        seconds: the server publishes at least every ``rebroadcast_s`` while it runs
        (:func:`~fedxab.agents.waits.keep_alive`), so it has ended or lost the broker."""
        return (
            f"run {self.run_id}: no record from the server for {waited:.0f} s after phase "
            f"{self.phase} ([agents] server_silence_s): it has ended, or lost the broker, "
            "without this agent's clients receiving the final answer; restart them once a "
            "server runs the job again"
        )

    def no_welcome_text(self, waited: float, hello_s: float, lobby: str) -> str:
        """Why a client agent still waits after ``waited`` seconds of hellos (one every
        ``hello_s`` on the ``lobby`` topic) without the server's welcome."""
        return (
            f"run {self.run_id}: no welcome from the server after {waited:.0f} s (a hello every "
            f"{hello_s:.0f} s on {lobby}): is this run's server running? A client agent learns "
            "its execution's session from the server only, so a run whose server has ended "
            "cannot be joined"
        )

    def _broadcast_of(self, env: Envelope) -> tuple[Any, frozenset[int] | None]:
        """The algorithm's broadcast in ``env``, its phase the envelope's, and the clients it
        asks (elastic membership; else None)."""
        try:
            body, asked = env.body(), None
            if self.elastic:
                body, asked = unwrap_broadcast(body, self.n_clients)
            msg = decode_broadcast(self.algorithm, body)
            check_phase(msg, env.phase)
        except (ProtocolError, FedxabError) as exc:
            raise _refusal("bad_payload", str(exc)) from exc
        except Exception as exc:  # a payload no check foresaw: reject it, keep running
            raise _refusal("bad_payload", f"{type(exc).__name__}: {exc}") from exc
        return msg, asked

    def _abort_of(self, env: Envelope) -> Aborted:
        """The server's abort in ``env`` (of this session), unless of a phase before the last
        one this party's replies were sent for."""
        try:
            text = failure_text(env.body())
        except ProtocolError as exc:
            raise _refusal("bad_payload", str(exc)) from exc
        if env.phase < self._sent[0]:
            raise _refusal("replay", f"an abort of phase {env.phase}: {text}")
        return Aborted(env.phase, text)

    def _invalid(self, why: str, text: str) -> None:
        self.counts["broadcast_invalid"] += 1
        self.observer.on_broadcast_invalid()
        self.observer.on_rejected("broadcast", why)
        log.warning("run %s: invalid broadcast (%s): %s", self.run_id, why, text)

    def welcomed(self, opened: Opened) -> None:
        """The server's welcome (:mod:`fedxab.agents.lobby`): its session is this execution's
        (the first welcome's: the server gives every hello the same one)."""
        self._verified(opened)
        if not self._welcomed:
            self.session = opened.envelope.session
            self._welcomed = True

    def probe(self, value: bytes) -> None:
        """Check a record's signature only (a signing party waiting for its welcome: a hosted
        client whose key is not the server's learns it from the server's broadcasts)."""
        try:
            opened = open_record(value, self.signer, self.max_message_bytes)
        except SignatureError as exc:
            self.refused(exc)
            return
        except ProtocolError:
            return
        if opened.envelope.sender == SERVER:
            self._verified(opened)

    def refused(self, exc: SignatureError) -> None:
        """A record of the server failed a signature check (:meth:`_key_failed` if it failed a
        key)."""
        if exc.reason == "bad_signature":
            self._key_failed(exc)

    def _verified(self, opened: Opened) -> None:
        """A record of the server verified: the keys it was checked with are right."""
        if self.signer is not None:
            checked = self.signer.signers(None, opened.for_client)
            self.keys.verified(*[k for k in checked if k == SERVER or k in self.clients])

    def _key_failed(self, exc: SignatureError) -> None:
        """A record of the server failed ``exc.key`` (HMAC: a hosted client's; Ed25519: the
        server's public key): counted; a FedxabError naming the key and its fingerprint only
        once the failures say the key is wrong (:class:`~fedxab.security.agents.KeyWatch`)."""
        key = exc.key
        if key is None or self.signer is None or not (key == SERVER or key in self.clients):
            return
        if not self.keys.fail(key):
            return
        failed, fingerprint = self.keys.failed[key], self.signer.fingerprint(key)
        seen = (
            f"run {self.run_id}: {failed} records of the server failed verification over "
            f"{self.keys.after_s:.0f} s or more and none verified"
        )
        if key == SERVER:
            raise FedxabError(
                f"{seen} with the server's public key (fingerprint {fingerprint}): this agent's "
                "public/server.pub is not the server's key. Give it the public/server.pub "
                "written with the server's private key (`fedxab keys generate`)"
            )
        raise FedxabError(
            f"{seen} with client {key}'s key (fingerprint {fingerprint}): "
            f"this agent's key for client {key} is not the server's. Give it the key "
            f"file of client {key} that the server uses (`fedxab keys generate` writes "
            "one per client)"
        )

    # ---------------------------------------------------------------------------- answering
    def repeat_too_soon(self, phase: int) -> bool:
        """Whether a live broadcast of ``phase`` repeats one whose replies were sent less than
        ``rebroadcast_s`` ago (counted). The server repeats a phase after ``rebroadcast_s``
        without a new report: repeats published while the agent was still computing or sending
        its replies are stale and are skipped, so that the replies of thousands of hosted
        clients are sent again once per repeat the server really needed, not once per copy
        queued meanwhile (a client agent would otherwise resend faster than it can)."""
        last_phase, sent_at = self._sent
        if phase == last_phase and time.monotonic() - sent_at < self.rebroadcast_s:
            self.counts["broadcasts_repeat_skipped"] += 1
            return True
        return False

    def answer_all(self, broadcast: Any) -> list[tuple[int, Any]]:
        """Every hosted client's report for ``broadcast`` (the agent runs it in a thread or on
        its loop); the telemetry of the pulls waits for the next :meth:`telemetry_records`,
        the new telemetry also for :meth:`take_fresh`."""
        phase = int(broadcast.phase)
        out = []
        for m in self.clients:
            try:
                report, telemetry, fresh = self.hosted.answer(m, broadcast)
            except EvaluationError:
                raise  # the client's objective failed: the run stops (run.failures)
            except (ProtocolError, FedxabError) as exc:
                self.counts["broadcast_rejected"] += 1
                log.warning("run %s: client %d rejects phase %d: %s", self.run_id, m, phase, exc)
                continue
            if report is None or telemetry is None:  # it withdrew earlier (both None): no report
                continue
            if fresh:
                self._fresh.append(telemetry)
            unsent = self._unsent.setdefault(m, [])
            if not unsent or unsent[-1] is not telemetry:  # once per flush, however many copies
                unsent.append(telemetry)
            out.append((m, report))
            own = self.own_budget is not None and isinstance(report, Withdrawal)
            if own and m not in self._gone:  # past its own budget: it leaves after telemetry
                self._leaving[m] = report.phase
        return out

    def take_fresh(self) -> list[Telemetry]:
        """The new telemetry of the pulls since the last call (each pull once), counted for
        the observer (:meth:`RunWatch.pulled <fedxab.run.watch.RunWatch.pulled>`)."""
        fresh, self._fresh = self._fresh, []
        for telemetry in fresh:
            self.watch.pulled(telemetry)
        return fresh

    def phase_seen(self, msg: Any, sent: int, bytes_up: int, duration: float) -> None:
        """A live broadcast ``msg`` answered in ``duration`` seconds with ``sent`` reports of
        ``bytes_up`` payload bytes: the phase as this party saw it, its clients' regret and best
        observed values and, once stale, their epsilon, to the observer."""
        counts = phase_communication(msg, self.broadcast_bytes, sent, sent, bytes_up, sent, 0)
        evaluators = self.hosted.evaluators
        self.watch.phase_seen(
            counts,
            duration,
            [evaluators[m].used for m in self.clients],
            mean_best(evaluators[m].observed.best for m in self.clients),
        )
        self.watch.privacy_if_stale()

    def replayed(self) -> None:
        """A broadcast superseded before the agent started was answered, its replies not sent
        (a restarted agent rebuilds its clients); the clients' epsilon told once stale."""
        self.counts["broadcasts_replayed"] += 1
        self.watch.privacy_if_stale()

    # ----------------------------------------------------------------------------- outgoing
    def seal(self, envelope: bytes, m: int) -> bytes:
        """A record of client ``m`` as it goes on the wire: signed if the run signs."""
        if self.signer is None:
            return envelope
        return self.signer.seal(envelope, m, self.session)

    def envelope(self, kind: str, m: int, phase: int, msg_id: str, payload: bytes) -> bytes:
        """Client ``m``'s record of ``kind``, stamped now, of this execution's session."""
        envelope = encode_envelope(
            self.run_id,
            kind,
            phase,
            client_sender(m),
            msg_id,
            payload,
            time.time(),
            session=self.session,
        )
        return self.seal(envelope, m)

    def report_records(self, answers: list[tuple[int, Any]], phase: int) -> tuple[Records, int]:
        """The reports ``answers`` (report topic) and their payload bytes in all."""
        size, records = 0, []
        for m, report in answers:
            payload = packb(report.to_wire())
            size += len(payload)
            records.append((str(m), self.envelope("report", m, phase, f"report:{phase}", payload)))
        self.counts["reports_sent"] += len(answers)
        return records, size

    def sent(self, phase: int) -> None:
        """The replies to ``phase`` were just sent (live): see :meth:`repeat_too_soon`."""
        self._sent = (phase, time.monotonic())

    def telemetry_due(self) -> bool:
        """Whether ``telemetry_interval_s`` passed since the last :meth:`telemetry_records`."""
        return time.monotonic() - self._last_flush >= self.telemetry_interval_s

    def telemetry_records(self) -> Records:
        """Per client, the telemetry of the phases it answered since the last call (control
        topic), as messages (lists of entries) of at most :data:`TELEMETRY_PULLS` pulls each
        (512 KiB at worst: well under a broker's message size limit, however long a phase).
        The server drops entries it already has, so a resent entry changes nothing. A client
        that withdrew past its own budget (:attr:`own_budget`) then leaves (its ``leave``)."""
        records = []
        encoded: dict[tuple[int, ...], Any] = {}  # terms shared by clients, encoded once
        for m, entries in self._unsent.items():
            if self.local_only:  # the counts only: the regret terms stay here
                entries = [
                    dataclasses.replace(t, global_terms=None, local_terms=None) for t in entries
                ]
            for batch in telemetry_batches(entries, TELEMETRY_PULLS):
                a, b = batch[0], batch[-1]
                msg_id = f"telemetry:{a.phase}:{a.start}-{b.phase}:{b.start}"
                body = packb(telemetry_to_wire(batch, encoded))
                records.append((str(m), self.envelope("telemetry", m, b.phase, msg_id, body)))
        for m, phase in self._leaving.items():  # (after its telemetry, on the same key)
            records.append(
                (str(m), self.envelope("leave", m, phase, f"leave:{phase}", packb(None)))
            )
        self._gone.update(self._leaving)
        self._leaving = {}
        self._unsent = {}
        self._last_flush = time.monotonic()
        return records

    def every_client(
        self, kind: str, phase: int, msg_id: str, body: Callable[[int], Any] = lambda m: None
    ) -> Records:
        """One control record from each hosted client, ``body(m)`` its payload."""
        return [
            (str(m), self.envelope(kind, m, phase, msg_id, packb(body(m)))) for m in self.clients
        ]

    def leave_records(self) -> Records:
        """Elastic membership, the agent stopping before the final answer: each hosted
        client's ``leave`` (the server asks them no more, :mod:`fedxab.run.membership`); none
        under fixed membership or before the server's welcome (no session to send it in)."""
        if not self.elastic or not self.session:
            return []
        return self.every_client("leave", self.phase, f"leave:{self.phase}")

    def failure_records(self, exc: EvaluationError, phase: int) -> Records:
        """Client ``exc.client``'s objective failed: its ``failed`` record, and a ``stopped``
        record for each other hosted client, which stops with it (control topic)."""
        m = exc.client
        body = packb(failure_body(str(exc)))
        records = [(str(m), self.envelope("failed", m, phase, f"failed:{phase}", body))]
        records += [
            (str(k), self.envelope("stopped", k, phase, f"stopped:{phase}", packb(None)))
            for k in self.clients
            if k != m
        ]
        return records

    def outcome_records(self, finished: Finished) -> list[tuple[str, Records]]:
        """What goes to the server at the end, as (topic, records) to publish in order: each
        hosted client's outcome (what it observed of its own objective, and its own
        recommendation where it has one; never its trials); nothing under local DP, or with
        ``[privacy] release_best`` each client's best value as a DP release charged in its
        ledger, mirrored to the ledger topic before it is sent (a refused release sends the
        refusal, no value)."""
        phase = int(finished.phase)
        if not self.local_only:
            outcomes = {m: self.hosted.outcome(m).to_dict() for m in self.clients}
            return [("control", self.every_client("outcome", phase, "outcome", outcomes.get))]
        if self.best_release is None:
            return []
        releases = {m: self._release_best(m) for m in self.clients}
        ledger = self.ledger_records()
        best = self.every_client("best_dp", phase, "best_dp", releases.get)
        return [("ledger", ledger), ("control", best)]

    def _release_best(self, m: int) -> dict[str, Any]:
        """Client ``m``'s best value as a charged DP release (or its refusal)."""
        assert self.best_release is not None
        best = self.hosted.outcome(m).best_value
        release = release_best(self.best_release, best, self.gates[m], self.seed, m)
        return {"client": m, **release}

    # ------------------------------------------------------------------------------ the run
    def started(self, transport: str) -> None:
        """Tell the observer the run starts over ``transport`` for the hosted clients and, for a
        private run, their epsilon so far."""
        self.watch.start(
            self.config, self.run_id, transport, regret_known(self.family, self.config)
        )
        self.watch.privacy()

    def finish(self, finished: Finished) -> list[tuple[str, Records]]:
        """The server's final answer: kept, its recommendation and the clients' final epsilon
        told to the observer; what goes to the server then, as (topic, records) to publish in
        order: the last telemetry, the outcomes (:meth:`outcome_records`), each client's ledger
        end marker (after its last release) and each client's leave."""
        self.finished = finished
        self.observer.on_recommendation(finished.recommendation)
        self.watch.privacy()  # final: before the end markers
        phase = int(finished.phase)
        return [
            ("control", self.telemetry_records()),
            *self.outcome_records(finished),
            ("ledger", self.ledger_end_records()),
            ("control", self.every_client("leave", phase, "leave")),
        ]

    def close_ledger(self) -> None:
        """Local DP, when the agent stops: the hosted clients' privacy block (:attr:`privacy`;
        once the run finished), then the ledger closed."""
        if self.run_ledger is None:
            return
        if self.finished is not None:
            stopped = {
                m: int(self.clients[m].withdrawal.phase)
                for m in self.clients
                if self.hosted.withdrawn(m)
            }
            self.privacy = self.run_ledger.block(list(self.clients), stopped)
        self.run_ledger.close()

    def outcomes(self) -> dict[int, ClientOutcome]:
        """What each hosted client observed (with its trials, where its objective is a user's),
        by client id."""
        return {m: self.hosted.outcome(m) for m in self.clients}

    def own_record(self, wall_s: float) -> RunRecord:
        """The hosted clients' own results of the finished run: the server's final
        answer, their evaluations, what each observed (with its trials) and, under local DP,
        their privacy block. No regret (a view of some clients only)."""
        finished = self.finished
        if finished is None:
            raise FedxabError(f"run {self.run_id}: not finished, no results yet")
        outcomes = self.outcomes()
        return RunRecord(
            seed=self.seed,
            run_id=self.run_id,
            rounds=round_grid(self.config.run.budget),
            cumulative_regret=None,
            recommendation=np.asarray(finished.recommendation, dtype=np.float64).reshape(-1),
            simple_regret=None,
            evaluations=sum(o.evaluations for o in outcomes.values()),
            wall_time_s=wall_s,
            privacy=self.privacy,
            clients=tuple(outcomes[m] for m in sorted(outcomes)),
        )

    # -------------------------------------------------------------------------- ledger topic
    # (The record builders import privacy.mirror here: only a private run needs them, and they
    # load the SQLite ledger.)
    def _owner(self, m: int) -> Owner:
        from fedxab.privacy.mirror import Owner

        assert self.run_ledger is not None
        return Owner.of(self.run_ledger, m)

    def budget_records(self) -> Records:
        """Each client's budgets and data owner (ledger topic; none without a ledger)."""
        if self.run_ledger is None:
            return []
        from fedxab.privacy.mirror import budget_record

        budget = self.run_ledger.budget
        records = []
        for m in self.clients:
            owner = self._owner(m)
            record = budget_record(self.run_id, m, budget, namespace=self.namespace, owner=owner)
            records.append((str(m), self.seal(record, m)))
        return records

    def ledger_records(self) -> Records:
        """The releases the clients recorded since the last call (ledger topic), each naming
        its data owner; in a signing run the signed record is also kept in the client's own
        ledger as the row's evidence, so that ledger verifies with public keys alone."""
        if not self.gates:
            return []
        from fedxab.privacy.mirror import release_record

        records = []
        for m, gate in self.gates.items():
            for phase, event in gate.drain():
                record = release_record(
                    self.run_id, m, phase, event, namespace=self.namespace, owner=self._owner(m)
                )
                sealed = self.seal(record, m)
                if self.signer is not None:  # attached to the row, which has none yet
                    gate.ledger.record(self.run_id, m, phase, event, evidence=sealed)
                records.append((str(m), sealed))
        return records

    def ledger_end_records(self) -> Records:
        """Each client's end marker (ledger topic): its mirror is complete (the marker carries
        the number and digest of the client's releases)."""
        if not self.gates:
            return []
        from fedxab.privacy.mirror import end_record

        ends = []
        for m, gate in self.gates.items():
            rows = [(p, r, e) for p, r, _, e in gate.ledger.history(self.run_id, m)]
            sealed = self.seal(end_record(self.run_id, m, rows, namespace=self.namespace), m)
            if self.signer is not None:  # kept: the client's rows, as a whole, for an auditor
                gate.ledger.set_end(self.run_id, m, sealed)
            ends.append((str(m), sealed))
        return ends
