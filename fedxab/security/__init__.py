"""Message authentication for federations across organisations (issue 8).

:mod:`fedxab.security.keys`: one secret key per party (the server and each client), in key files
with owner-only permissions or an environment variable, wrapped in :class:`SecretKey` so that
they never appear in a repr, a log line or a traceback. :mod:`fedxab.security.signing`:
HMAC-SHA256 tags over encoded envelopes, a signed wrapper and :func:`open_signed`, which accepts
an envelope only if the claimed sender's key signed it.
"""

from fedxab.security.keys import (
    KEY_BYTES,
    SecretKey,
    generate_keys,
    key_file_name,
    load_key,
    load_key_from_env,
)
from fedxab.security.signing import (
    SignatureError,
    SignedEnvelope,
    open_signed,
    sign,
    sign_envelope,
    verify,
)

__all__ = [
    "KEY_BYTES",
    "SecretKey",
    "SignatureError",
    "SignedEnvelope",
    "generate_keys",
    "key_file_name",
    "load_key",
    "load_key_from_env",
    "open_signed",
    "sign",
    "sign_envelope",
    "verify",
]
