"""API keys: `Authorization: Bearer <key>`, checked only when the server was given a key.

The official SDK sends the header on every request, so a server with auth off ignores it
(jevcompat `auth.ignored-when-off`). A missing key and a wrong key are both 401 with
`detail.error_type` `authentication_error`, as the live API answers a wrong key.
"""

from __future__ import annotations

import hmac
from collections.abc import Mapping

from sr_runtime.server.errors import AuthenticationFailed

WRONG_KEY = "Cannot authenticate with the server. Please check your API key and try again."


def check_key(expected: str | None, headers: Mapping[str, str]) -> None:
    if expected is None:
        return
    value = headers.get("authorization", "")
    scheme, _, key = value.strip().partition(" ")
    if not value or scheme.lower() != "bearer":
        raise AuthenticationFailed("missing API key: send the header Authorization: Bearer <key>", reason="missing_key")
    # Constant time, so the answer's timing does not tell how much of a guess was right.
    if not hmac.compare_digest(key.strip().encode(), expected.encode()):
        raise AuthenticationFailed(WRONG_KEY, reason="invalid_key")
