"""Message authentication for federations across organisations.

:mod:`fedxab.security.keys`: one secret key per client, shared with the server only, in key files
with owner-only permissions or an environment variable, wrapped in :class:`SecretKey` so that
they never appear in a repr, a log line or a traceback. :mod:`fedxab.security.signing`:
HMAC-SHA256 tags over encoded envelopes (the server's messages carry one tag per client), sessions
against replay, and :func:`open_signed`. :mod:`fedxab.security.agents`: whether a run signs and
which keys each party loads.
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
    Opened,
    SignatureError,
    SignedEnvelope,
    open_signed,
    seal,
    seal_for_every_client,
    tag,
)

__all__ = [
    "KEY_BYTES",
    "Opened",
    "SecretKey",
    "SignatureError",
    "SignedEnvelope",
    "generate_keys",
    "key_file_name",
    "load_key",
    "load_key_from_env",
    "open_signed",
    "seal",
    "seal_for_every_client",
    "tag",
]
