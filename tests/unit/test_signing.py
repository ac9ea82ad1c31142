"""Message authentication: keys, key files, HMAC tags, per-client broadcast tags, the CLI."""

from __future__ import annotations

import hashlib
import hmac
import logging
import os
import stat

import pytest
from typer.testing import CliRunner

from fedxab.broker.codec import Envelope, packb, unpackb
from fedxab.cli import app
from fedxab.errors import FedxabError, ProtocolError
from fedxab.security import (
    KEY_BYTES,
    SecretKey,
    SignatureError,
    generate_keys,
    load_key,
    load_key_from_env,
    open_signed,
    seal,
    seal_for_every_client,
    tag,
)

posix_only = pytest.mark.skipif(os.name != "posix", reason="POSIX file permissions")

N = 3  # clients of the signing tests


def _envelope(sender: str = "client-1", payload: bytes | None = None, phase: int = 3) -> Envelope:
    return Envelope(
        run_id="run-1",
        kind="report" if sender != "server" else "broadcast",
        phase=phase,
        sender=sender,
        msg_id="m-1",
        payload=packb({"reward": 0.5}) if payload is None else payload,
        sent_at=12.5,
    )


@pytest.fixture
def keys() -> dict[int, SecretKey]:
    """The server's keyring: every client's key."""
    return {m: SecretKey.generate(f"client-{m}") for m in range(N)}


def _reason(data: bytes, keyring, n: int = N) -> str:
    with pytest.raises(SignatureError) as info:
        open_signed(data, keyring, n)
    assert isinstance(info.value, ProtocolError)
    return info.value.reason


# ---------------------------------------------------------------------------------- signing
def test_a_clients_message_round_trips_with_its_session(keys):
    env = _envelope("client-1")
    opened = open_signed(seal(env.encode(), keys[1], session="s1"), keys, N)
    assert (opened.envelope, opened.session, opened.for_client) == (env, "s1", None)


def test_the_tag_is_hmac_sha256_over_the_header_and_the_envelope(keys):
    raw = _envelope().encode()
    header = packb([1, "s1", None])
    expected = hmac.new(keys[1].reveal(), header + raw, hashlib.sha256).digest()
    assert tag(keys[1], raw, "s1") == expected
    assert tag(keys[1], raw, "s2") != expected  # the session is authenticated
    assert tag(keys[1], raw, "s1", 1) != expected  # so is the addressee


def test_a_broadcast_carries_one_tag_per_client_and_each_client_checks_its_own(keys):
    env = _envelope("server")
    data = seal_for_every_client(env.encode(), [keys[m] for m in range(N)], session="s1")
    assert len(unpackb(data)["sig"]) == 32 * N
    for m in range(N):  # a client agent holds its own key only
        assert open_signed(data, {m: keys[m]}, N).envelope == env
    assert open_signed(data, keys, N).session == "s1"


def test_a_client_cannot_forge_a_broadcast_for_another_client(keys):
    """Client 0 holds key 0 only: a broadcast it makes has a right tag 0, wrong others."""
    raw = _envelope("server").encode()
    guessed = [keys[0], SecretKey.generate("client-1"), SecretKey.generate("client-2")]
    data = seal_for_every_client(raw, guessed, session="s1")
    assert open_signed(data, {0: keys[0]}, N).envelope.sender == "server"  # fools itself only
    assert _reason(data, {1: keys[1]}) == "bad_signature"
    assert _reason(data, {2: keys[2]}) == "bad_signature"
    one_tag = seal(raw, keys[0], session="s1")  # a single tag is not a broadcast's
    assert _reason(one_tag, {1: keys[1]}) == "malformed"


def test_a_servers_record_about_one_client_is_signed_with_that_clients_key(keys):
    env = Envelope("run-1", "ledger", 2, "server", "release:2:0:1", packb({"client": 1}))
    data = seal(env.encode(), keys[1], session="s1", for_client=1)
    opened = open_signed(data, {1: keys[1]}, N)
    assert (opened.envelope, opened.for_client) == (env, 1)
    assert _reason(data, {0: keys[0]}) == "unknown_sender"  # client 0 cannot check it
    assert _reason(seal(env.encode(), keys[0], session="s1", for_client=1), keys) == (
        "bad_signature"
    )


def _resigned(data: bytes, **changes) -> bytes:
    signed = unpackb(data)
    signed.update(changes)
    return packb(signed)


def test_tampered_payload_rejected(keys):
    data = seal(_envelope().encode(), keys[1], session="s1")
    env = Envelope.decode(unpackb(data)["envelope"])
    forged = Envelope(**{**env.__dict__, "payload": packb({"reward": 99.0})})
    assert _reason(_resigned(data, envelope=forged.encode()), keys) == "bad_signature"


def test_tampered_phase_or_session_rejected(keys):
    data = seal(_envelope(phase=3).encode(), keys[1], session="s1")
    assert _reason(_resigned(data, envelope=_envelope(phase=4).encode()), keys) == "bad_signature"
    assert _reason(_resigned(data, session="s2"), keys) == "bad_signature"


def test_wrong_key_rejected(keys):
    stranger = SecretKey.generate("client-1")  # right name, key the server never issued
    assert _reason(seal(_envelope("client-1").encode(), stranger), keys) == "bad_signature"


def test_another_clients_id_rejected(keys):
    # client-0 claims to be client-1 and signs with its own (valid) key
    data = seal(_envelope("client-1").encode(), keys[0])
    with pytest.raises(SignatureError, match="bad signature of 'client-1'") as info:
        open_signed(data, keys, N)
    assert info.value.reason == "bad_signature"


@pytest.mark.parametrize(
    "mutate",
    [
        lambda s: {"envelope": s["envelope"], "session": ""},
        lambda s: {**s, "sig": b""},
        lambda s: {**s, "sig": None},
    ],
    ids=["no-sig", "empty-sig", "null-sig"],
)
def test_stripped_signature_rejected(keys, mutate):
    signed = unpackb(seal(_envelope().encode(), keys[1]))
    with pytest.raises(SignatureError, match="missing signature") as info:
        open_signed(packb(mutate(signed)), keys, N)
    assert info.value.reason == "missing_signature"


def test_bare_envelope_rejected(keys):
    assert _reason(_envelope().encode(), keys) == "malformed"


def test_unknown_sender_rejected(keys):
    data = seal(_envelope("client-7").encode(), SecretKey.generate("client-7"))
    with pytest.raises(SignatureError, match="no key for client 7") as info:
        open_signed(data, keys, N)
    assert info.value.reason == "unknown_sender"


@pytest.mark.parametrize(
    "data",
    [
        b"",
        b"\xc1garbage",
        packb([1, 2]),
        packb({"envelope": b"not an envelope", "sig": b"x" * 32, "session": ""}),
        packb({"envelope": "text", "sig": b"x" * 32, "session": ""}),
        packb({"envelope": b"", "sig": b"x" * 32, "session": "", "extra": 1}),
        packb({"envelope": b"", "sig": b"x" * 31, "session": ""}),
        packb({"envelope": b"", "sig": b"x" * 32, "session": 5}),
        packb({"envelope": b"", "sig": b"x" * 32, "session": "", "for": -1}),
    ],
)
def test_malformed_rejected(keys, data):
    assert _reason(data, keys) == "malformed"


# ------------------------------------------------------------------------------------- keys
def _mode(path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


@posix_only
def test_generate_keys_writes_owner_only_files(tmp_path):
    out = tmp_path / "keys"
    paths = generate_keys(3, out)
    assert [p.name for p in paths] == ["client-0.key", "client-1.key", "client-2.key"]
    for path in paths:
        assert _mode(path) == 0o600
    assert _mode(out) == 0o700
    keys = [load_key(p) for p in paths]
    assert [k.party for k in keys] == ["client-0", "client-1", "client-2"]
    assert len({k.reveal() for k in keys}) == 3
    assert all(len(k.reveal()) == KEY_BYTES for k in keys)
    assert load_key(paths[1], "client-1") == keys[1]


def test_generate_keys_refuses_to_overwrite(tmp_path):
    paths = generate_keys(2, tmp_path)
    before = {p: p.read_bytes() for p in paths}
    with pytest.raises(FedxabError, match=r"client-0.key: already exists \(and 1 more\)"):
        generate_keys(3, tmp_path)  # nothing written: client-2.key does not appear
    assert not (tmp_path / "client-2.key").exists()
    (tmp_path / "client-0.key").unlink()
    with pytest.raises(FedxabError, match=r"client-1.key: already exists; "):
        generate_keys(2, tmp_path)
    assert not (tmp_path / "client-0.key").exists()  # all or nothing
    assert paths[1].read_bytes() == before[paths[1]]


def test_generate_keys_needs_a_client(tmp_path):
    with pytest.raises(FedxabError, match="clients"):
        generate_keys(0, tmp_path)


@posix_only
def test_load_key_refuses_readable_file(tmp_path):
    path = generate_keys(1, tmp_path)[0]
    path.chmod(0o644)
    with pytest.raises(FedxabError, match=f"chmod 600 {path}"):
        load_key(path)
    path.chmod(0o600)
    assert load_key(path).party == "client-0"


def test_load_key_refuses_another_party_and_garbage(tmp_path):
    path = generate_keys(1, tmp_path)[0]
    with pytest.raises(FedxabError, match="key of 'client-0', expected 'client-1'"):
        load_key(path, "client-1")
    bad = tmp_path / "bad.key"
    fd = os.open(bad, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    os.write(fd, b"fedxab-key v1 party=client-0\nnothex\n")
    os.close(fd)
    with pytest.raises(FedxabError, match="hex digits"):
        load_key(bad)
    with pytest.raises(FedxabError, match="no such key file"):
        load_key(tmp_path / "missing.key")


def test_load_key_from_env(tmp_path, monkeypatch):
    path = generate_keys(2, tmp_path)[0]
    key = load_key(path)
    hex_key = path.read_text().splitlines()[1]
    monkeypatch.setenv("FEDXAB_KEY", hex_key)
    assert load_key_from_env("FEDXAB_KEY", "client-0") == key
    monkeypatch.setenv("FEDXAB_KEY", path.read_text())
    assert load_key_from_env("FEDXAB_KEY", "client-0") == key
    with pytest.raises(FedxabError, match="expected 'client-1'"):
        load_key_from_env("FEDXAB_KEY", "client-1")
    monkeypatch.setenv("FEDXAB_KEY", "abc")
    with pytest.raises(FedxabError, match="hex digits") as info:
        load_key_from_env("FEDXAB_KEY", "client-0")
    assert "abc" not in str(info.value)
    monkeypatch.delenv("FEDXAB_KEY")
    with pytest.raises(FedxabError, match="FEDXAB_KEY is not set"):
        load_key_from_env("FEDXAB_KEY", "client-0")


def _leaks(text: str, key: SecretKey) -> bool:
    raw = key.reveal()
    return raw.hex() in text.lower() or repr(raw) in text or str(list(raw)) in text


def test_key_bytes_never_in_repr_str_or_logs(tmp_path, caplog):
    key = SecretKey.generate("client-3")
    texts = [repr(key), str(key), f"{key}", f"{key!r}", repr({"k": key}), repr([key])]
    with caplog.at_level(logging.DEBUG, logger="fedxab"):
        logging.getLogger("fedxab.test").warning("key is %s / %r", key, key)
    texts.append(caplog.text)
    for text in texts:
        assert "client-3" in text
        assert not _leaks(text, key), text
    with pytest.raises(TypeError):
        import pickle

        pickle.dumps(key)


def test_cli_keys_generate(tmp_path):
    out = tmp_path / "keys"
    runner = CliRunner()
    hmac = ["--scheme", "hmac"]
    result = runner.invoke(app, ["keys", "generate", "--clients", "2", "--out", str(out), *hmac])
    assert result.exit_code == 0, result.output
    for name in ("client-0.key", "client-1.key"):
        assert str(out / name) in result.output
    for name in ("client-0.key", "client-1.key"):
        key = load_key(out / name)
        assert not _leaks(result.output, key)
    if os.name == "posix":
        assert _mode(out / "client-1.key") == 0o600

    again = runner.invoke(app, ["keys", "generate", "--clients", "2", "--out", str(out), *hmac])
    assert again.exit_code == 2
    assert "already exists" in again.output
    assert "Traceback" not in again.output
    for name in ("client-0.key", "client-1.key"):
        assert not _leaks(again.output, load_key(out / name))

    bad = runner.invoke(app, ["keys", "generate", "--clients", "0", "--out", str(out)])
    assert bad.exit_code != 0


def test_cli_keys_generate_if_missing_writes_once(tmp_path):
    out = tmp_path / "keys"
    runner = CliRunner()
    args = ["keys", "generate", "--clients", "2", "--out", str(out), "--if-missing"]
    args += ["--scheme", "hmac"]
    first = runner.invoke(app, args)
    assert first.exit_code == 0 and "2 key file(s) written" in first.output
    before = {p.name: p.read_bytes() for p in out.iterdir()}
    again = runner.invoke(app, args)
    assert again.exit_code == 0 and "nothing written" in again.output
    assert {p.name: p.read_bytes() for p in out.iterdir()} == before
    (out / "client-1.key").unlink()  # a partial directory is an error, not a silent top-up
    partial = runner.invoke(app, args)
    assert partial.exit_code == 2 and "already exists" in partial.output


def test_cli_keys_dir_overrides_the_config(tmp_path):
    from fedxab.cli import _load

    config = tmp_path / "run.toml"
    config.write_text(
        '[algorithm]\nname = "fedpne"\n[federation]\nclients = 2\n[security]\nsign = true\n'
    )
    cfg = _load(config, None, None, None, None, "kafka://127.0.0.1:1", tmp_path / "k")
    assert cfg.security.keys_dir == str(tmp_path / "k") and cfg.security.sign
    single = tmp_path / "hct.toml"
    single.write_text('[algorithm]\nname = "hct"\n')
    with pytest.raises(FedxabError, match="--keys-dir: .hct. runs a single agent"):
        _load(single, None, None, None, None, None, tmp_path / "k")
