"""Message authentication (issue 8, first piece): keys, key files, HMAC signing, the CLI."""

from __future__ import annotations

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
    sign,
    sign_envelope,
    verify,
)

posix_only = pytest.mark.skipif(os.name != "posix", reason="POSIX file permissions")


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
def keyring() -> dict[str, SecretKey]:
    return {p: SecretKey.generate(p) for p in ("server", "client-0", "client-1")}


# ---------------------------------------------------------------------------------- signing
def test_round_trip(keyring):
    env = _envelope("client-1")
    data = sign_envelope(env, keyring["client-1"])
    assert open_signed(data, keyring) == env
    server = _envelope("server")
    assert open_signed(sign_envelope(server, keyring["server"]), keyring) == server


def test_sign_and_verify(keyring):
    raw = _envelope().encode()
    tag = sign(raw, keyring["client-1"])
    assert len(tag) == 32
    assert verify(raw, tag, keyring["client-1"])
    assert not verify(raw, tag, keyring["client-0"])
    assert not verify(raw + b"x", tag, keyring["client-1"])
    assert not verify(raw, tag[:-1], keyring["client-1"])


def _reason(data: bytes, keyring) -> str:
    with pytest.raises(SignatureError) as info:
        open_signed(data, keyring)
    assert isinstance(info.value, ProtocolError)
    return info.value.reason


def test_tampered_payload_rejected(keyring):
    signed = unpackb(sign_envelope(_envelope(), keyring["client-1"]))
    env = Envelope.decode(signed["envelope"])
    forged = Envelope(**{**env.__dict__, "payload": packb({"reward": 99.0})})
    signed["envelope"] = forged.encode()
    assert _reason(packb(signed), keyring) == "bad_signature"


def test_tampered_phase_rejected(keyring):
    signed = unpackb(sign_envelope(_envelope(phase=3), keyring["client-1"]))
    signed["envelope"] = _envelope(phase=4).encode()
    assert _reason(packb(signed), keyring) == "bad_signature"


def test_wrong_key_rejected(keyring):
    raw = _envelope("client-1").encode()
    stranger = SecretKey.generate("client-1")  # right name, key the server never issued
    data = packb({"envelope": raw, "sig": sign(raw, stranger)})
    assert _reason(data, keyring) == "bad_signature"


def test_another_clients_id_rejected(keyring):
    # client-0 claims to be client-1 and signs with its own (valid) key
    raw = _envelope("client-1").encode()
    data = packb({"envelope": raw, "sig": sign(raw, keyring["client-0"])})
    with pytest.raises(SignatureError, match="bad signature.*client-1") as info:
        open_signed(data, keyring)
    assert info.value.reason == "bad_signature"


def test_client_cannot_forge_a_broadcast(keyring):
    raw = _envelope("server").encode()
    data = packb({"envelope": raw, "sig": sign(raw, keyring["client-0"])})
    assert _reason(data, keyring) == "bad_signature"


def test_sign_envelope_refuses_another_senders_key(keyring):
    with pytest.raises(ProtocolError, match="client-1"):
        sign_envelope(_envelope("client-1"), keyring["client-0"])


@pytest.mark.parametrize(
    "mutate",
    [
        lambda s: {"envelope": s["envelope"]},
        lambda s: {"envelope": s["envelope"], "sig": b""},
        lambda s: {"envelope": s["envelope"], "sig": None},
    ],
    ids=["no-sig", "empty-sig", "null-sig"],
)
def test_stripped_signature_rejected(keyring, mutate):
    signed = unpackb(sign_envelope(_envelope(), keyring["client-1"]))
    with pytest.raises(SignatureError, match="missing signature") as info:
        open_signed(packb(mutate(signed)), keyring)
    assert info.value.reason == "missing_signature"


def test_bare_envelope_rejected(keyring):
    assert _reason(_envelope().encode(), keyring) == "malformed"


def test_unknown_sender_rejected(keyring):
    env = _envelope("client-7")
    key = SecretKey.generate("client-7")
    with pytest.raises(SignatureError, match="unknown sender 'client-7'") as info:
        open_signed(sign_envelope(env, key), keyring)
    assert info.value.reason == "unknown_sender"


@pytest.mark.parametrize(
    "data",
    [
        b"",
        b"\xc1garbage",
        packb([1, 2]),
        packb({"envelope": b"not an envelope", "sig": b"x" * 32}),
        packb({"envelope": "text", "sig": b"x" * 32}),
        packb({"envelope": b"", "sig": b"x" * 32, "extra": 1}),
    ],
)
def test_malformed_rejected(keyring, data):
    assert _reason(data, keyring) == "malformed"


# ------------------------------------------------------------------------------------- keys
def _mode(path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


@posix_only
def test_generate_keys_writes_owner_only_files(tmp_path):
    out = tmp_path / "keys"
    paths = generate_keys(3, out)
    assert [p.name for p in paths] == ["server.key", "client-0.key", "client-1.key", "client-2.key"]
    for path in paths:
        assert _mode(path) == 0o600
    assert _mode(out) == 0o700
    keys = [load_key(p) for p in paths]
    assert [k.party for k in keys] == ["server", "client-0", "client-1", "client-2"]
    assert len({k.reveal() for k in keys}) == 4
    assert all(len(k.reveal()) == KEY_BYTES for k in keys)
    assert load_key(paths[2], "client-1") == keys[2]


def test_generate_keys_refuses_to_overwrite(tmp_path):
    paths = generate_keys(2, tmp_path)
    before = {p: p.read_bytes() for p in paths}
    with pytest.raises(FedxabError, match="server.key: already exists"):
        generate_keys(2, tmp_path)
    (tmp_path / "server.key").unlink()
    with pytest.raises(FedxabError, match=r"client-0.key: already exists \(and 1 more\)"):
        generate_keys(3, tmp_path)  # nothing written: client-2.key does not appear
    assert not (tmp_path / "client-2.key").exists()
    assert not (tmp_path / "server.key").exists()
    assert all(p.read_bytes() == before[p] for p in paths[1:])


def test_generate_keys_needs_a_client(tmp_path):
    with pytest.raises(FedxabError, match="clients"):
        generate_keys(0, tmp_path)


@posix_only
def test_load_key_refuses_readable_file(tmp_path):
    path = generate_keys(1, tmp_path)[1]
    path.chmod(0o644)
    with pytest.raises(FedxabError, match=f"chmod 600 {path}"):
        load_key(path)
    path.chmod(0o600)
    assert load_key(path).party == "client-0"


def test_load_key_refuses_another_party_and_garbage(tmp_path):
    path = generate_keys(1, tmp_path)[1]
    with pytest.raises(FedxabError, match="key of 'client-0', expected 'client-1'"):
        load_key(path, "client-1")
    bad = tmp_path / "bad.key"
    fd = os.open(bad, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    os.write(fd, b"fedxab-key v1 party=server\nnothex\n")
    os.close(fd)
    with pytest.raises(FedxabError, match="hex digits"):
        load_key(bad)
    with pytest.raises(FedxabError, match="no such key file"):
        load_key(tmp_path / "missing.key")


def test_load_key_from_env(tmp_path, monkeypatch):
    path = generate_keys(1, tmp_path)[1]
    key = load_key(path)
    hex_key = path.read_text().splitlines()[1]
    monkeypatch.setenv("FEDXAB_KEY", hex_key)
    assert load_key_from_env("FEDXAB_KEY", "client-0") == key
    monkeypatch.setenv("FEDXAB_KEY", path.read_text())
    assert load_key_from_env("FEDXAB_KEY", "client-0") == key
    with pytest.raises(FedxabError, match="expected 'server'"):
        load_key_from_env("FEDXAB_KEY", "server")
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
    result = runner.invoke(app, ["keys", "generate", "--clients", "2", "--out", str(out)])
    assert result.exit_code == 0, result.output
    for name in ("server.key", "client-0.key", "client-1.key"):
        assert str(out / name) in result.output
    for name in ("server.key", "client-0.key", "client-1.key"):
        key = load_key(out / name)
        assert not _leaks(result.output, key)
    if os.name == "posix":
        assert _mode(out / "client-1.key") == 0o600

    again = runner.invoke(app, ["keys", "generate", "--clients", "2", "--out", str(out)])
    assert again.exit_code == 2
    assert "already exists" in again.output
    assert "Traceback" not in again.output
    for name in ("server.key", "client-0.key", "client-1.key"):
        assert not _leaks(again.output, load_key(out / name))

    bad = runner.invoke(app, ["keys", "generate", "--clients", "0", "--out", str(out)])
    assert bad.exit_code != 0
