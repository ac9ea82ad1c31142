"""Ed25519 signatures beside HMAC: key pairs and their files, the scheme bound in the signed header,
a broadcast signed once whatever the number of clients, and forgeries made with every key the
server holds (its private key and every public key) rejected."""

from __future__ import annotations

import os
import stat

import pytest
from config_factory import sim_config

from fedxab.broker.codec import SERVER, Envelope, client_sender, packb, unpackb
from fedxab.errors import ConfigError, FedxabError
from fedxab.privacy.mechanisms import PrivacyEvent
from fedxab.privacy.mirror import release_record
from fedxab.security.agents import scheme_of, signer_for, verifier_in
from fedxab.security.keypairs import (
    PrivateKey,
    generate_keypairs,
    load_private_key,
    load_public_key,
)
from fedxab.security.keys import SecretKey, generate_keys, load_key
from fedxab.security.signing import (
    SIG_BYTES,
    Ed25519Signer,
    HmacSigner,
    SignatureError,
    SignedEnvelope,
)

posix_only = pytest.mark.skipif(os.name != "posix", reason="POSIX file permissions")

N = 4
EVENT = PrivacyEvent("gaussian", 1.5, 0.2, 1.0, 1)


def _config(keys_dir=None, clients: int = N, **security) -> object:
    if keys_dir is not None:
        security["keys_dir"] = str(keys_dir)
    return sim_config(clients=clients, security={"sign": True, **security})


@pytest.fixture(scope="module")
def keys(tmp_path_factory):
    out = tmp_path_factory.mktemp("ed25519") / "keys"
    generate_keypairs(N, out)
    return out


@pytest.fixture(scope="module")
def parties(keys):
    """The signer of each party, as the agents load them: the server's and each client's."""
    config = _config(keys)
    return {SERVER: signer_for(config), **{m: signer_for(config, [m]) for m in range(N)}}


def _broadcast(phase: int = 2) -> bytes:
    return Envelope("run-1", "broadcast", phase, SERVER, f"broadcast:{phase}", b"x").encode()


def _report(m: int) -> bytes:
    return Envelope("run-1", "report", 2, client_sender(m), "r", packb({"reward": 0.5})).encode()


def _reason(signer, data: bytes) -> str:
    with pytest.raises(SignatureError) as info:
        signer.open(data)
    return info.value.reason


def _server_key_material(keys) -> Ed25519Signer:
    """Everything the server holds: its private key and every public key (the clients' private
    keys are not among them)."""
    public = verifier_in(keys / "public").public
    return Ed25519Signer({SERVER: load_private_key(keys / "private/server.key")}, public, N)


# ----------------------------------------------------------------------------------- key files
@posix_only
def test_private_keys_are_owner_only_and_public_keys_world_readable(tmp_path):
    out = tmp_path / "keys"
    paths = generate_keypairs(3, out)
    assert len(paths) == 2 * 4  # the server and three clients, private and public
    assert stat.S_IMODE(out.stat().st_mode) == 0o700
    assert stat.S_IMODE((out / "private").stat().st_mode) == 0o700
    assert stat.S_IMODE((out / "public").stat().st_mode) == 0o755
    for party in ("server", "client-0", "client-1", "client-2"):
        private, public = out / "private" / f"{party}.key", out / "public" / f"{party}.pub"
        assert stat.S_IMODE(private.stat().st_mode) == 0o600
        assert stat.S_IMODE(public.stat().st_mode) == 0o644
        assert load_private_key(private, party).public == load_public_key(public, party)
    readable = out / "private" / "client-1.key"
    readable.chmod(0o644)
    with pytest.raises(FedxabError, match=f"chmod 600 {readable}"):
        load_private_key(readable)


def test_a_private_key_never_shows_its_bytes():
    key = PrivateKey.generate("client-0")
    for text in (repr(key), str(key)):
        assert key.reveal().hex() not in text and key.fingerprint in text
    with pytest.raises(TypeError):
        import pickle

        pickle.dumps(key)


def test_hmac_and_ed25519_key_files_are_told_apart(tmp_path):
    generate_keypairs(1, tmp_path / "pairs")
    generate_keys(1, tmp_path / "hmac")
    with pytest.raises(FedxabError, match="an Ed25519 key, not an HMAC key"):
        load_key(tmp_path / "pairs/private/client-0.key")
    with pytest.raises(FedxabError, match="an HMAC key, not an Ed25519 private key"):
        load_private_key(tmp_path / "hmac/client-0.key")
    with pytest.raises(FedxabError, match="a private key, expected a public key"):
        load_public_key(tmp_path / "pairs/private/client-0.key")


# -------------------------------------------------------------------------------- the scheme
def test_the_scheme_is_detected_from_the_keys_directory(tmp_path, keys):
    generate_keys(N, tmp_path / "hmac")
    assert scheme_of(_config(keys).security) == "ed25519"
    assert scheme_of(_config(tmp_path / "hmac").security) == "hmac"
    assert scheme_of(_config().security) == "hmac"  # environment variables: HMAC keys
    assert isinstance(signer_for(_config(keys)), Ed25519Signer)
    assert isinstance(signer_for(_config(tmp_path / "hmac")), HmacSigner)
    (tmp_path / "empty").mkdir()
    with pytest.raises(FedxabError, match="keys_dir: .*empty holds neither"):
        signer_for(_config(tmp_path / "empty"))
    with pytest.raises(ConfigError, match="security.scheme"):
        _config(keys, scheme="rsa")
    with pytest.raises(FedxabError, match="environment variables FEDXAB_KEY_CLIENT_<id> hold HMAC"):
        signer_for(_config(scheme="ed25519"))
    with pytest.raises(FedxabError, match=r"client-0's key.*client-0\.key: no such key file"):
        signer_for(_config(keys, scheme="hmac"), [0])


def test_each_party_holds_only_its_own_private_keys(parties):
    server, client = parties[SERVER], parties[2]
    assert set(server.private) == {SERVER}
    assert set(server.public) == {SERVER, *range(N)}
    assert set(client.private) == {2}
    assert set(client.public) == {SERVER, 2}


def test_the_signed_header_binds_the_scheme(keys, parties):
    """A signature covers ``[scheme, session, for]`` and the envelope: client 1's Ed25519
    signature over the HMAC scheme's header (1) is not one over Ed25519's (2); and a message of
    one scheme is refused by the other's verifier."""
    key, envelope = load_private_key(keys / "private/client-1.key"), _report(1)

    def signed_under(scheme_id: int) -> bytes:
        sig = key.sign(packb([scheme_id, "s", None]) + envelope)
        return SignedEnvelope(envelope, sig, "s").encode()

    assert parties[SERVER].open(signed_under(2)).envelope.sender == "client-1"
    assert _reason(parties[SERVER], signed_under(1)) == "bad_signature"
    hmac_signer = HmacSigner({m: SecretKey.generate(client_sender(m)) for m in range(N)}, N)
    assert _reason(parties[SERVER], hmac_signer.seal(envelope, 1, "s")) == "malformed"
    assert _reason(hmac_signer, parties[1].seal(envelope, 1, "s")) == "malformed"


def test_messages_round_trip_between_the_parties(parties):
    server = parties[SERVER]
    report = server.open(parties[3].seal(_report(3), 3, "s1"))
    assert (report.envelope.sender, report.session) == ("client-3", "s1")
    broadcast = server.seal_for_every_client(_broadcast(), "s1")
    for m in range(N):  # every client checks the one signature with the server's public key
        assert parties[m].open(broadcast).envelope.phase == 2
    record = release_record("run-1", 1, 2, EVENT, by_server=True)
    about = parties[1].open(server.seal_about(record, 1, "s1"))
    assert about.for_client == 1 and about.envelope.sender == SERVER


@pytest.mark.parametrize("clients", [10, 1000])
def test_a_broadcast_costs_one_signature_whatever_the_number_of_clients(tmp_path, clients):
    """Ed25519: 64 bytes at 10 and at 1,000 clients; HMAC: one 32-byte tag per client."""
    server = Ed25519Signer({SERVER: PrivateKey.generate(SERVER)}, {}, clients)
    hmac_server = HmacSigner(
        {m: SecretKey.generate(client_sender(m)) for m in range(clients)}, clients
    )
    assert len(unpackb(server.seal_for_every_client(_broadcast(), "s"))["sig"]) == 64
    hmac_tags = unpackb(hmac_server.seal_for_every_client(_broadcast(), "s"))["sig"]
    assert len(hmac_tags) == clients * SIG_BYTES


# ----------------------------------------------------------------------------------- forgery
def test_the_servers_key_material_cannot_sign_as_a_client(keys, parties):
    """A report or ledger record claiming client 1, signed with everything the server holds
    but client 1's private key, is refused by the server and by an auditor; a record the
    server signs about client 1 says it is the server's."""
    forger = _server_key_material(keys)
    server, auditor = parties[SERVER], verifier_in(keys / "public")
    as_client_1 = Ed25519Signer({1: forger.private[SERVER]}, {}, N)  # its key, client 1's name
    made_up = Ed25519Signer({1: PrivateKey.generate("client-1")}, {}, N)  # a fresh key
    for envelope in (_report(1), release_record("run-1", 1, 2, EVENT)):
        for signer in (as_client_1, made_up):
            forged = signer.seal(envelope, 1, "s")
            with pytest.raises(SignatureError) as info:
                server.open(forged)
            assert (info.value.reason, info.value.client) == ("bad_signature", 1)
            assert _reason(auditor, forged) == "bad_signature"
    record = release_record("run-1", 1, 2, EVENT, by_server=True)
    about = auditor.open(forger.seal_about(record, 1, "s"))
    assert (about.envelope.sender, about.for_client) == (SERVER, 1)  # it signs as itself only


def test_a_client_cannot_forge_the_servers_broadcast_or_records(keys, parties):
    """Client 0 holds its private key and every public key: its broadcast, and a central-DP
    record about client 1 it makes up, are refused by client 1."""
    public = verifier_in(keys / "public").public
    attacker = Ed25519Signer({SERVER: load_private_key(keys / "private/client-0.key")}, public, N)
    broadcast = attacker.seal_for_every_client(_broadcast(), "s")
    record = attacker.seal_about(release_record("run-1", 1, 2, EVENT, by_server=True), 1, "s")
    for data in (broadcast, record):
        with pytest.raises(SignatureError) as info:
            parties[1].open(data)
        assert (info.value.reason, info.value.key) == ("bad_signature", SERVER)
    genuine = parties[SERVER].seal_for_every_client(_broadcast(), "s")
    tampered = unpackb(genuine)
    tampered["envelope"] = _broadcast(phase=3)
    assert _reason(parties[1], packb(tampered)) == "bad_signature"


def test_cli_keys_generate_writes_key_pairs_and_says_who_gets_which(tmp_path):
    from typer.testing import CliRunner

    from fedxab.cli import app

    out = tmp_path / "keys"
    args = ["keys", "generate", "--clients", "2", "--out", str(out), "--if-missing"]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    private = [out / "private" / f"{p}.key" for p in ("server", "client-0", "client-1")]
    for path in private:
        assert path.is_file() and load_private_key(path).reveal().hex() not in result.output
    text = " ".join(result.output.split())
    assert f"server: {out / 'private' / 'server.key'} and {out / 'public'}" in text
    assert (
        f"client m: {out / 'private' / 'client-m.key'} and {out / 'public' / 'server.pub'}" in text
    )
    assert f"auditor: {out / 'public'}" in text
    before = {p: p.read_bytes() for p in private}
    again = CliRunner().invoke(app, args)  # all there: nothing written
    assert again.exit_code == 0 and "nothing written" in again.output
    assert {p: p.read_bytes() for p in private} == before
    assert scheme_of(_config(out).security) == "ed25519"
