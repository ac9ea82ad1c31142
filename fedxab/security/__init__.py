"""Message authentication for federations across organisations.

:mod:`fedxab.security.keypairs`: one Ed25519 key pair per party (the server and each client),
private keys in owner-only files, public keys beside them for whoever verifies.
:mod:`fedxab.security.keys`: the HMAC scheme's keys, one secret key per client shared with the
server, in key files with owner-only permissions or an environment variable. Neither kind of key
ever appears in a repr, a log line or a traceback. :mod:`fedxab.security.signing`: signed
envelopes under either scheme (:class:`Signer`; Ed25519: a client signs as itself only and the
server signs a broadcast once; HMAC: the server's messages carry one tag per client), sessions
against replay, and the threat model of each. :mod:`fedxab.security.agents`: whether a run signs,
its scheme, and which keys each party loads. :mod:`fedxab.security.provision`: the key files of
either scheme, as ``fedxab keys generate`` writes them.
"""

from fedxab.security.keypairs import PrivateKey, PublicKey, generate_keypairs
from fedxab.security.keys import (
    KEY_BYTES,
    SecretKey,
    generate_keys,
    key_file_name,
    load_key,
    load_key_from_env,
)
from fedxab.security.signing import (
    Ed25519Signer,
    HmacSigner,
    Opened,
    SignatureError,
    SignedEnvelope,
    Signer,
    open_signed,
    seal,
    seal_for_every_client,
    tag,
)

__all__ = [
    "KEY_BYTES",
    "Ed25519Signer",
    "HmacSigner",
    "Opened",
    "PrivateKey",
    "PublicKey",
    "SecretKey",
    "SignatureError",
    "SignedEnvelope",
    "Signer",
    "generate_keypairs",
    "generate_keys",
    "key_file_name",
    "load_key",
    "load_key_from_env",
    "open_signed",
    "seal",
    "seal_for_every_client",
    "tag",
]
