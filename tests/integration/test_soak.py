"""Soak test (issue 8, item 4): signed DP-Fed-PNE on Kafka, M = 50 clients in one server process
and five client processes of ten clients each, two runs (seeds) in turn, under faults drawn from
a fixed seed (:data:`FAULT_SEED`):

- ten SIGKILLs, each followed by a restart: client processes at different phases of both runs
  (one alone, two at once, one a second time, one in or just after the last phase), and the
  server three times: in the middle of each run (the second time together with a client process;
  the restarted server first resumes the finished first run from its checkpoint), and once the
  second run's last phase has closed (it then resumes both runs at their end);
- transport faults inside every process (``FEDXAB_FAULTS``, :mod:`fedxab.broker.factory`): the
  clients' reports duplicated, dropped and reordered, their control messages (telemetry,
  heartbeats) duplicated and reordered, their ledger records duplicated; the server's broadcasts
  duplicated and dropped (a stalled phase and the final answer are broadcast again);
- this test as a hostile peer, in each run: garbage, truncated, forged (a wrong key, another
  client's id, a tampered payload, a stripped or no signature, an unknown sender, another run,
  another session, a future phase, the wrong kind, a record key that is not the sender) and
  replayed (valid, from an earlier phase) records on the report, control and ledger topics, and
  forged final answers (unsigned, wrongly signed, signed by a client) on the broadcast topic.

What the design promises (DESIGN.md, Determinism; README, Distributed runs), asserted:

- both runs complete, and the results file equals the fault-free in-process runs' (wall time
  aside): a duplicated, reordered, or lost and resent message, a restarted process or a refused
  message changes nothing;
- no ledger event is lost and none is forged: the ledger rebuilt from each run's ledger topic (by
  this test, and by ``fedxab audit --rebuild-from --keys-dir``) holds exactly the releases of the
  fault-free run, per client and phase, and every client's end marker;
- every injected message that must be refused is refused and counted: by the server in
  ``fedxab_reports_total``, ``fedxab_control_messages_total``,
  ``fedxab_ledger_records_invalid_total`` and ``fedxab_messages_rejected_total{topic,reason}``
  (exactly per topic; per reason within what each forgery may be refused for), and by every
  client process in ``fedxab_broadcasts_invalid_total`` and
  ``fedxab_messages_rejected_total{topic="broadcast"}`` (exactly).

Left out, because the design does not promise that the results survive them (each makes the run
differ from the fault-free one, or hangs it): dropped control messages (lost regret telemetry is
not sent again), dropped or reordered ledger records
(a lost release is a lost ledger event; an end marker read before a release ends a reader early).
Apache Kafka, which acknowledges what it stores and keeps a partition's order, does neither.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import re
import signal
import subprocess
import time
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
from cli_procs import (
    FEDXAB,
    get,
    log_line,
    scrape,
    served_under_local_dp,
    start_cli,
    until,
    wait_ok,
    without_time,
)

from fedxab.agents.checkpoint import ServerCheckpoint
from fedxab.agents.federation import Federation
from fedxab.agents.ledger_mirror import read_to_end, rebuild_ledger
from fedxab.algorithms.protocol import Finished
from fedxab.broker.base import Record, run_topics
from fedxab.broker.codec import SERVER, Envelope, client_sender, packb, unpackb
from fedxab.broker.kafka import KafkaBroker
from fedxab.config import load_config
from fedxab.privacy.accountants import make_accountant
from fedxab.privacy.ledger import PrivacyLedger
from fedxab.privacy.mechanisms import GaussianMechanism
from fedxab.run.identity import run_id_for
from fedxab.security.agents import signer_for
from fedxab.security.keys import SecretKey, load_key
from fedxab.security.signing import SIG_BYTES, SignedEnvelope, seal

pytestmark = pytest.mark.slow

CLIENTS, HOSTS = 50, 5
PER_HOST = CLIENTS // HOSTS
FAULT_SEED = 2024  # every fault of the soak derives from it
NAMESPACE = "soak"
TIMEOUT = 240.0  # seconds the run may take, faults and restarts included, before the test fails

# DP-Fed-PNE, sequential composition and a budget of 5 releases: 6 phases, in the last of which
# every client refuses its 6th release and withdraws (the budget path runs under the faults too).
# T is small enough that a client's regret telemetry message stays far below Kafka's default
# limit of 1 MB per record (the client agent sends all the telemetry since its last flush as one
# message, and a restarted one that of every replayed broadcast: past that limit the broker
# refuses it and the client process stops).
EPSILON, PRIVACY_DELTA, RELEASES = 0.5, 1e-3, 5
CONFIG = """
[run]
seed = 5
repeats = 2
budget = 50000
output = "{output}"

[objective]
name = "garland"

[algorithm]
name = "dpfedpne"
epsilon = {epsilon}
privacy_delta = {privacy_delta}
composition = "sequential"

[federation]
clients = {clients}
heterogeneity = "offset"

[privacy]
budget_epsilon = {budget_epsilon}

[agents]
rebroadcast_s = 1.0

[security]
sign = true
keys_dir = "{keys}"

[broker]
url = "{url}"
namespace = "{namespace}"
"""

# transport faults, per process (see fedxab.broker.factory); {seed} differs per process start
CLIENT_FAULTS = (
    "kinds=report,duplicate=0.1,drop=0.05,reorder_window=3,seed={seed};"
    "kinds=control,duplicate=0.1,reorder_window=3,seed={seed};"
    "kinds=ledger,duplicate=0.2,seed={seed}"
)
SERVER_FAULTS = "kinds=broadcast,duplicate=0.3,drop=0.1,seed={seed}"


def _epsilon_after(k: int) -> float:
    """The epsilon of k sequential releases of the run's mechanism (rdp, the default
    accountant): a budget that allows exactly k."""
    event = GaussianMechanism.calibrated(EPSILON, PRIVACY_DELTA).event("run")
    return make_accountant("rdp").epsilon([dataclasses.replace(event, count=k)], PRIVACY_DELTA)


@dataclasses.dataclass(frozen=True)
class Hostile:
    """One record this test publishes as a hostile peer, and how the server must classify it:
    ``outcome`` (``invalid`` or ``late``) for one of ``reasons``."""

    kind: str
    key: str | None
    value: bytes
    reasons: frozenset[str]
    outcome: str = "invalid"


class Soak:
    """The processes of the soak run: start, kill, restart, and the end of each."""

    def __init__(self, tmp: Path, url: str, rng: np.random.Generator) -> None:
        self.tmp = tmp
        self.rng = rng
        self.keys = tmp / "keys"
        self.checkpoints = tmp / "checkpoints"
        self.config_path = tmp / "soak.toml"
        self.config_path.write_text(
            CONFIG.format(
                output=(tmp / "results").as_posix(),
                clients=CLIENTS,
                keys=self.keys.as_posix(),
                url=url,
                namespace=NAMESPACE,
                epsilon=EPSILON,
                privacy_delta=PRIVACY_DELTA,
                budget_epsilon=repr(_epsilon_after(RELEASES)),
            )
        )
        self.procs: dict[str, subprocess.Popen] = {}  # the running incarnation of each
        self.logs: dict[str, Path] = {}
        self.every: list[subprocess.Popen] = []  # every process started, for the cleanup
        self.starts: Counter[str] = Counter()
        self.kills: list[str] = []
        self.hosts = {
            f"client-{h}": f"{h * PER_HOST}-{(h + 1) * PER_HOST - 1}" for h in range(HOSTS)
        }

    def start(self, name: str) -> None:
        self.starts[name] += 1
        seed = int(self.rng.integers(2**31))
        common = ["--metrics-port", "0", "--serve-after", "600"]
        if name == "server":
            args = ["server", str(self.config_path), "--checkpoint", str(self.checkpoints), "-q"]
            faults = SERVER_FAULTS.format(seed=seed)
        else:
            args = ["client", str(self.config_path), "--client-id", self.hosts[name]]
            faults = CLIENT_FAULTS.format(seed=seed)
        log = self.logs[name] = self.tmp / f"{name}.{self.starts[name]}.log"
        env = {"FEDXAB_FAULTS": faults, "COLUMNS": "300"}
        proc = self.procs[name] = start_cli(*args, *common, log=log, env=env)
        self.every.append(proc)

    def kill(self, name: str) -> None:
        proc = self.procs[name]
        assert proc.poll() is None, f"{name} ended before its kill:\n{self.logs[name].read_text()}"
        proc.send_signal(signal.SIGKILL)
        proc.wait(10)

    def restart(self, *names: str, pause: float = 0.0) -> None:
        """SIGKILL every process of ``names`` at once; ``pause`` seconds later, start them again."""
        for name in names:
            self.kill(name)
        self.kills.extend(names)
        time.sleep(pause)
        for name in names:
            self.start(name)

    def closed_phases(self, run_id: str) -> int:
        """Phases of run ``run_id`` the server has checkpointed so far."""
        path = self.checkpoints / f"{run_id}.ckpt"
        return ServerCheckpoint.closed_phases_in(path)

    def when_closed(self, run_id: str, phases: int) -> None:
        until(
            lambda: self.closed_phases(run_id) >= phases,
            f"{phases} closed phase(s) of run {run_id}",
            TIMEOUT,
        )

    def metrics_url(self, name: str) -> str:
        """Where ``name``'s running incarnation serves its metrics."""
        return log_line(self.logs[name], "metrics: ", TIMEOUT).split()[1]

    def served(self, name: str) -> str:
        """The metrics URL of ``name``'s running incarnation, once its run is over."""
        url = self.metrics_url(name)
        log_line(self.logs[name], "serving metrics on ", TIMEOUT)
        return url

    def stop(self) -> None:
        """SIGINT ends the serving of every process: each must exit with status 0."""
        for proc in self.procs.values():
            proc.send_signal(signal.SIGINT)
        for name, proc in self.procs.items():
            wait_ok(proc, self.logs[name], 30)

    def cleanup(self) -> None:
        for proc in self.every:
            if proc.poll() is None:
                proc.kill()
                proc.wait()


# ----------------------------------------------------------------------------- hostile records
def _opened(record: Record) -> tuple[SignedEnvelope, Envelope]:
    signed = SignedEnvelope.decode(record.value, max_tags=CLIENTS)
    return signed, Envelope.decode(signed.envelope)


def _resign(env: Envelope, key: SecretKey, session: str, **changes) -> bytes:
    """``env`` with ``changes``, signed with ``key`` (whoever's it is) in ``session``."""
    return seal(dataclasses.replace(env, **changes).encode(), key, session=session)


def _tampered(signed: SignedEnvelope, env: Envelope) -> bytes:
    """The record with its envelope changed (another message id) under the original signature:
    always a decodable envelope whose signature fails. (Flipping a byte of the encoded envelope,
    as before, turned a trailing msgpack nil into the never-used byte 0xc1 on some records: a
    malformed record, not a bad signature.)"""
    body = dataclasses.replace(env, msg_id=f"{env.msg_id}-tampered").encode()
    return SignedEnvelope(body, signed.sig, signed.session).encode()


def _stripped(signed: SignedEnvelope) -> bytes:
    return SignedEnvelope(signed.envelope, b"", signed.session).encode()


def hostile_records(
    records: dict[str, list[Record]], keys: Path, rng: np.random.Generator
) -> list[Hostile]:
    """The records to inject, made from the valid ones the run's topics hold now."""
    R = frozenset
    unsigned = R({"malformed", "missing_signature"})
    reports = [(r, *_opened(r)) for r in records["report"]]
    reports = [(r, s, e) for r, s, e in reports if e.kind == "report"]
    top = max(e.phase for _, _, e in reports)
    latest = [(r, s, e) for r, s, e in reports if e.phase == top]  # the open or last phase's
    rec, signed, env = latest[int(rng.integers(len(latest)))]
    a = env.client_id
    b = (a + 1 + int(rng.integers(CLIENTS - 1))) % CLIENTS
    key_a = load_key(keys / f"client-{a}.key", client_sender(a))
    session = signed.session
    out = [Hostile("report", str(a), rng.bytes(n), R({"malformed"})) for n in (1, 37, 300)] + [
        Hostile("report", str(a), rec.value[: len(rec.value) // 2], R({"malformed"})),
        # a wrong key; client a impersonating client b; a tampered payload
        Hostile(
            "report",
            str(a),
            _resign(env, SecretKey.generate(client_sender(a)), session),
            R({"bad_signature"}),
        ),
        Hostile(
            "report",
            str(b),
            _resign(env, key_a, session, sender=client_sender(b)),
            R({"bad_signature"}),
        ),
        Hostile("report", str(a), _tampered(signed, env), R({"bad_signature"})),
        Hostile("report", str(a), _stripped(signed), R({"missing_signature"})),
        Hostile("report", str(a), signed.envelope, unsigned),  # no signature at all
        Hostile(
            "report",
            "999",
            _resign(env, SecretKey.generate("client-999"), session, sender="client-999"),
            R({"unknown_sender"}),
        ),
        # signed by a's own key, but for another run, session, phase, kind or record key
        Hostile(
            "report", str(a), _resign(env, key_a, session, run_id="soak-other"), R({"wrong_run"})
        ),
        Hostile("report", str(a), _resign(env, key_a, "0" * 32), R({"replay"})),
        Hostile(
            "report",
            str(a),
            _resign(env, key_a, session, phase=top + 100, msg_id=f"report:{top + 100}"),
            R({"future_phase"}),
        ),
        Hostile(
            "report", str(a), _resign(env, key_a, session, kind="heartbeat"), R({"wrong_kind"})
        ),
        Hostile("report", str(b), rec.value, R({"wrong_key"})),
    ]
    # valid reports of phases the server has closed, replayed verbatim
    old = [(r, e) for r, _, e in reports if e.phase < top]
    for i in rng.choice(len(old), size=3, replace=False):
        r, e = old[i]
        out.append(Hostile("report", str(e.client_id), r.value, R({"late"}), "late"))

    controls = [(r, *_opened(r)) for r in records["control"]]
    telemetry = [(r, s, e) for r, s, e in controls if e.kind == "telemetry"]
    _, t_signed, t_env = telemetry[int(rng.integers(len(telemetry)))]
    t = t_env.client_id
    key_t = load_key(keys / f"client-{t}.key", client_sender(t))
    beat = Envelope(
        run_id=env.run_id,
        kind="heartbeat",
        phase=0,
        sender=client_sender(b),
        msg_id="heartbeat:x",
        payload=packb(None),
    )
    leave = dataclasses.replace(beat, kind="leave", msg_id="leave")
    out += [
        Hostile("control", str(t), rng.bytes(64), R({"malformed"})),
        # forged regret
        Hostile("control", str(t), _tampered(t_signed, t_env), R({"bad_signature"})),
        Hostile(
            "control", str(b), seal(beat.encode(), key_a, session=session), R({"bad_signature"})
        ),
        Hostile("control", str(b), leave.encode(), unsigned),
        Hostile("control", str(t), _stripped(t_signed), R({"missing_signature"})),
        Hostile(
            "control",
            "999",
            _resign(beat, SecretKey.generate("client-999"), session, sender="client-999"),
            R({"unknown_sender"}),
        ),
        Hostile("control", str(t), _resign(t_env, key_t, "0" * 32), R({"replay"})),
    ]

    ledger = [(r, *_opened(r)) for r in records["ledger"]]
    releases = [(r, s, e) for r, s, e in ledger if unpackb(e.payload).get("entry") == "release"]
    _, l_signed, l_env = releases[int(rng.integers(len(releases)))]
    l_body = unpackb(l_env.payload)
    forged_release = dataclasses.replace(
        l_env, payload=packb({**l_body, "event": {**l_body["event"], "noise_multiplier": 1e-3}})
    )
    end = dataclasses.replace(
        l_env, msg_id="end", phase=0, payload=packb({"entry": "end", "releases": 0})
    )
    out += [
        Hostile("ledger", str(l_env.client_id), rng.bytes(50), R({"malformed"})),
        Hostile(
            "ledger",
            str(l_env.client_id),
            seal(
                forged_release.encode(), SecretKey.generate(l_env.sender), session=l_signed.session
            ),
            R({"bad_signature"}),
        ),
        Hostile("ledger", str(l_env.client_id), end.encode(), unsigned),  # an early end marker
        Hostile("ledger", str(l_env.client_id), _tampered(l_signed, l_env), R({"bad_signature"})),
        Hostile("ledger", str(l_env.client_id), _stripped(l_signed), R({"missing_signature"})),
    ]

    # forged final answers: a client agent that took one would stop answering
    finished = Envelope(
        run_id=env.run_id,
        kind="broadcast",
        phase=top,
        sender=SERVER,
        msg_id=f"broadcast:{top}",
        payload=packb(Finished(top, np.full(1, 0.5)).to_wire()),
    ).encode()
    out += [
        Hostile("broadcast", None, rng.bytes(80), R()),
        Hostile("broadcast", None, finished, R()),  # unsigned
        Hostile(
            "broadcast",
            None,
            SignedEnvelope(finished, rng.bytes(CLIENTS * SIG_BYTES), session).encode(),
            R(),
        ),
        Hostile("broadcast", None, seal(finished, key_a, session=session), R()),  # by a client
        Hostile("broadcast", None, SignedEnvelope(finished, b"", session).encode(), R()),
    ]
    return out


async def inject(address: str, run_id: str, keys: Path, rng: np.random.Generator) -> list[Hostile]:
    """Publish the hostile records on the run's topics; the list of what was published."""
    topics = run_topics(NAMESPACE, run_id)
    async with KafkaBroker(address) as broker, asyncio.timeout(60):
        while True:  # until the run has sent telemetry (at most once a second per client)
            records = {
                k: await read_to_end(broker, topics[k]) for k in ("report", "control", "ledger")
            }
            if any(_opened(r)[1].kind == "telemetry" for r in records["control"]):
                break
            await asyncio.sleep(0.5)
        plan = hostile_records(records, keys, rng)
        for h in plan:
            await broker.publish(topics[h.kind], h.key, h.value)
    return plan


async def rebuilt_ledger(address: str, config, run_id: str):
    """The ledger rebuilt from the run's ledger topic, every record verified with the keys."""
    ledger = PrivacyLedger(":memory:")
    signer = signer_for(config)
    async with KafkaBroker(address) as broker:
        rebuilt = await rebuild_ledger(
            broker,
            run_topics(NAMESPACE, run_id)["ledger"],
            run_id,
            ledger,
            expect=set(range(CLIENTS)),
            timeout_s=60,
            signer=signer,
        )
    return ledger, rebuilt


# --------------------------------------------------------------------------------- the checks
def rejected(samples, topic: str) -> Counter[str]:
    """``fedxab_messages_rejected_total`` of ``topic``, by reason."""
    out: Counter[str] = Counter()
    for (name, labels), value in samples.items():
        if name == "fedxab_messages_rejected_total" and dict(labels).get("topic") == topic:
            out[dict(labels)["reason"]] += int(value)
    return out


def injected_faults(logs: list[Path]) -> Counter[tuple[str, str]]:
    """What the processes' FaultyBrokers say they injected, by (topic kinds, fault)."""
    out: Counter[tuple[str, str]] = Counter()
    pattern = re.compile(
        r"faults injected on (\S+) topics: (\d+) duplicated, (\d+) dropped, (\d+) reordered"
    )
    for log in logs:
        for kinds, *counts in pattern.findall(log.read_text()):
            for what, count in zip(("duplicated", "dropped", "reordered"), counts, strict=True):
                out[kinds, what] += int(count)
    return out


def _outcomes(samples) -> Counter[str]:
    """``fedxab_reports_total`` by outcome."""
    out: Counter[str] = Counter()
    for (name, labels), value in samples.items():
        if name == "fedxab_reports_total":
            out[dict(labels)["outcome"]] += int(value)
    return out


def check_reasons(counted: Counter[str], plan: list[Hostile], kind: str) -> None:
    """Every refused record of ``kind`` counted under one of the reasons it may have."""
    invalid = [h for h in plan if h.kind == kind and h.outcome == "invalid"]
    must, may = Counter(), Counter()
    for h in invalid:
        if len(h.reasons) == 1:
            must.update(h.reasons)
        may.update(h.reasons)
    refused = {r: n for r, n in counted.items() if r != "late"}
    assert sum(refused.values()) == len(invalid), (kind, refused)
    for reason, n in must.items():
        assert refused.get(reason, 0) >= n, (kind, reason, refused)
    for reason, n in refused.items():
        assert n <= may[reason], (kind, reason, refused)


_INVALID = {
    "report": ("fedxab_reports_total", {"outcome": "invalid"}),
    "control": ("fedxab_control_messages_total", {"kind": "invalid"}),
    "ledger": ("fedxab_ledger_records_invalid_total", {}),
}


def check_refusals(samples, kind: str, plan: list[Hostile]) -> None:
    """A server's metrics ``samples`` count the records of ``kind`` in ``plan`` that it must
    refuse as invalid: exactly, in the topic's own counter and, by reason, in
    ``fedxab_messages_rejected_total``."""
    name, labels = _INVALID[kind]
    invalid = sum(h.kind == kind and h.outcome == "invalid" for h in plan)
    assert get(samples, name, **labels) == invalid, (kind, name)
    check_reasons(rejected(samples, kind), plan, kind)


def test_soak_50_clients_on_kafka_under_faults_gives_the_fault_free_runs(tmp_path, dev_broker):
    rng = np.random.default_rng(FAULT_SEED)
    soak = Soak(tmp_path, dev_broker.url, rng)
    generate = ["keys", "generate", "--clients", str(CLIENTS), "--out", str(soak.keys)]
    subprocess.run(
        [*FEDXAB, *generate, "--scheme", "hmac"],  # the injected forgeries are HMAC-signed
        check=True,
        capture_output=True,
        timeout=60,
    )
    config = load_config(soak.config_path)
    runs = [run_id_for(config, seed) for seed in config.run.seeds]
    expected, expected_ledgers = [], []
    for seed, run_id in zip(config.run.seeds, runs, strict=True):
        fault_free = Federation(config, seed)
        expected.append(without_time(fault_free.run().to_dict()))
        assert fault_free.run_ledger.run == run_id
        expected_ledgers.append(fault_free.run_ledger.ledger.history_all(run_id))
        assert sorted(expected_ledgers[-1]) == list(range(CLIENTS))
    rounds = [run["communication"]["rounds"] for run in expected]
    assert min(rounds) >= 6, "the fault plan needs runs of 6 phases or more"

    # the fault plan: which processes die, after which closed phase of which run
    v = [f"client-{h}" for h in rng.permutation(HOSTS)]
    first, second = runs
    plans: list[list[Hostile]] = []
    t0 = time.monotonic()
    try:
        soak.start("server")
        for name in soak.hosts:
            soak.start(name)
        soak.when_closed(first, 1)
        soak.restart(v[0], pause=float(rng.uniform(0, 1)))
        soak.when_closed(first, 2)
        time.sleep(float(rng.uniform(0, 0.5)))  # somewhere in the next phase
        soak.restart("server")
        plans.append(asyncio.run(inject(dev_broker.address, first, soak.keys, rng)))
        soak.when_closed(first, 3)
        soak.restart(v[1])
        soak.when_closed(second, 1)
        soak.restart(v[2], v[3], pause=float(rng.uniform(0, 1)))
        soak.when_closed(second, 2)
        time.sleep(float(rng.uniform(0, 0.5)))
        views = [scrape(soak.metrics_url("server"))]  # the server's second start, before death
        soak.restart("server", v[4])  # resumes the first run, finished, then the second
        plans.append(asyncio.run(inject(dev_broker.address, second, soak.keys, rng)))
        soak.when_closed(second, 3)
        soak.restart(v[0])  # its second death
        soak.when_closed(second, rounds[1] - 1)
        soak.restart(v[1])  # in the last phase, or (serving its metrics) just after the run
        soak.when_closed(second, rounds[1])
        views.append(scrape(soak.metrics_url("server")))  # its third start, before death
        soak.restart("server")  # the run's phases are over: it resumes each run at its end
        urls = {name: soak.served(name) for name in soak.procs}
        scraped = {name: scrape(url) for name, url in urls.items()}
        views.append(scraped["server"])  # its last start, at the end
        soak.stop()
    finally:
        soak.cleanup()
    wall = time.monotonic() - t0
    assert len(soak.kills) == 10
    # the transport faults were on in every process, and the clients' last starts injected some
    # of each kind (a killed process never logs its own)
    for log in tmp_path.glob("*.log"):
        assert "FEDXAB_FAULTS is set: injecting transport faults" in log.read_text(), log.name
    faults = injected_faults([soak.logs[name] for name in soak.hosts])
    for kinds, what in [("report", "duplicated"), ("report", "dropped"), ("report", "reordered"),
                        ("control", "duplicated"), ("control", "reordered"),
                        ("ledger", "duplicated")]:  # fmt: skip
        assert faults[kinds, what] > 0, (kinds, what, faults)
    # the server's broadcasts were dropped too (counted over every start: one per drop)
    drops = sum(
        len(re.findall(r"fault: dropped a record on \S+\.broadcast", log.read_text()))
        for log in tmp_path.glob("server.*.log")
    )
    assert drops > 0

    # the results: those of the fault-free runs
    results = json.loads((tmp_path / "results" / "results.json").read_text())
    # (DP-Fed-PNE releases under local DP: the server has no per-client outcome or regret)
    served = [without_time(run) for run in results["runs"]]
    assert len(served) == len(expected)
    for got, fault_free in zip(served, expected, strict=True):
        got, fault_free = served_under_local_dp(got, fault_free)
        assert got == fault_free, f"after {wall:.0f} s"

    # no ledger event lost, none forged: each run's ledger topic rebuilds its fault-free ledger
    for run_id, plan, expected_ledger, run in zip(
        runs, plans, expected_ledgers, expected, strict=True
    ):
        ledger, rebuilt = asyncio.run(rebuilt_ledger(dev_broker.address, config, run_id))
        assert rebuilt.ended == set(range(CLIENTS))  # every client's mirror is complete
        assert ledger.history_all(run_id) == expected_ledger
        assert rebuilt.skipped == sum(h.kind == "ledger" for h in plan)
        check_reasons(Counter(rebuilt.reasons), plan, "ledger")
        ledger.close()
        audited = tmp_path / f"audit-{run_id}.db"
        audit = subprocess.run(
            [*FEDXAB, "audit", str(audited), "--run", run_id, "--json", "--rebuild-from",
             dev_broker.url, "--namespace", NAMESPACE, "--keys-dir", str(soak.keys)],
            capture_output=True,
            text=True,
            timeout=60,
            check=True,
        )  # fmt: skip
        rows = json.loads(audit.stdout)
        privacy = run["privacy"]
        assert [row["client"] for row in rows] == list(range(CLIENTS))
        assert [row["releases"] for row in rows] == privacy["releases"]
        assert [row["epsilon"] for row in rows] == pytest.approx(privacy["epsilon"], rel=1e-12)
        with PrivacyLedger(audited) as book:
            assert book.history_all(run_id) == expected_ledger

    # every refused message counted by the server, in each of the three server starts that saw
    # hostile records (scraped just before their deaths, and at the end). A starting server reads
    # each run's control topic from its beginning, and at each run's end its ledger topic: the
    # second start counts the control and ledger records injected in the first run, the third
    # the control records of both (the ledger of the second run may not be read yet when it
    # dies), the last all control and ledger records. Report records are read from the last
    # committed offset: the second start counts those of the first run, the third those of the
    # second, the last none again (every one was committed).
    second_start, third_start, last_start = views
    first_run, both_runs = plans[0], plans[0] + plans[1]
    for kind in ("report", "control", "ledger"):
        check_refusals(second_start, kind, first_run)
    check_refusals(third_start, "report", plans[1])
    check_refusals(third_start, "control", both_runs)
    check_refusals(last_start, "report", [])
    check_refusals(last_start, "control", both_runs)
    check_refusals(last_start, "ledger", both_runs)
    for view, plan in ((second_start, plans[0]), (third_start, plans[1])):
        late = get(view, "fedxab_reports_total", outcome="late")
        assert late >= sum(h.outcome == "late" for h in plan)  # replays (and real late reports)
        assert rejected(view, "report")["late"] == late
    assert get(third_start, "fedxab_reports_total", outcome="duplicate") > 0  # resent reports
    assert get(third_start, "fedxab_broadcasts_repeated_total") > 0  # stalls were recovered
    # and each client process's: every forged broadcast of both runs refused (a restarted one
    # read them again from the topics' start)
    hostile = Counter((h.kind, h.outcome) for h in both_runs)
    for name in soak.hosts:
        got = get(scraped[name], "fedxab_broadcasts_invalid_total")
        assert got == hostile["broadcast", "invalid"], name
        assert sum(rejected(scraped[name], "broadcast").values()) == got, name
    print(
        f"soak: {wall:.0f} s, kills {soak.kills}; server's third start: "
        f"reports {dict(_outcomes(third_start))}, repeated broadcasts "
        f"{get(third_start, 'fedxab_broadcasts_repeated_total'):.0f}; transport faults "
        f"{dict(faults)}; hostile records {dict(hostile)}"
    )
