"""API keys: `Authorization: Bearer <key>`, checked only when the server was given a key.

The official SDK sends the header on every request, so a server with auth off ignores it
(jevcompat `auth.ignored-when-off`). A missing key and a wrong key are both 401 with
`detail.error_type` `authentication_error`, as the live API answers a wrong key.

Two `Authorization` headers are refused (401), whichever holds the key: the sidecar refuses them
too, so one rule holds at every door (docs/extproc/auth.md). Taking the first, as a plain
mapping lookup would, lets a proxy that checks the last one be walked around.
"""

from __future__ import annotations

import hmac

from starlette.datastructures import Headers

from sr_runtime.server.errors import AuthenticationFailed

WRONG_KEY = "Cannot authenticate with the server. Please check your API key and try again."
TWO_KEYS = "two Authorization headers: send one, Authorization: Bearer <key>"


def check_key(expected: str | None, headers: Headers) -> None:
    if expected is None:
        return
    values = headers.getlist("authorization")
    if len(values) > 1:
        raise AuthenticationFailed(TWO_KEYS, reason="invalid_key")
    value = values[0] if values else ""
    scheme, _, key = value.strip().partition(" ")
    if not value or scheme.lower() != "bearer":
        raise AuthenticationFailed("missing API key: send the header Authorization: Bearer <key>", reason="missing_key")
    # Constant time, so the answer's timing does not tell how much of a guess was right.
    if not hmac.compare_digest(key.strip().encode(), expected.encode()):
        raise AuthenticationFailed(WRONG_KEY, reason="invalid_key")
