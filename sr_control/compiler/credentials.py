"""Credentials at the edges: a client's stop at the front door, an upstream's key is added last.

    client_credentials_stripped()   a listener with keys: after the sidecar checked the key, the
                                    request goes on without any credential the client sent
    upstream_key_filters()          an upstream with ``api_key_env``: Envoy removes the client's
                                    credentials and adds the upstream's key from its own
                                    environment as the request leaves for that cluster

Envoy, not the sidecar, adds an upstream's key: no ext_proc answer ever carries one, and the
ADS stream and ``/config_dump`` hold only the variable's name (``%ENVIRONMENT(VAR)%``, read by
Envoy per request). A listener without keys to an upstream without one lets the client's own
credentials through (an LLM client that brings its provider key keeps working).
"""

from __future__ import annotations

from typing import Any

from sr_control.compiler.templates import fill

# Headers a client may carry a key in: the listener's own (Authorization) and the API key headers
# of the LLM APIs (OpenAI-compatible gateways take api-key, Anthropic x-api-key).
CLIENT_KEY_HEADERS = ("authorization", "proxy-authorization", "x-api-key", "api-key")
# Query parameters clients put keys in (Google-style ?key=, ?api_key=, OAuth's access_token, ...).
CLIENT_KEY_PARAMS = ("key", "api_key", "api-key", "apikey", "access_token", "token", "auth_token", "client_secret")
ANTHROPIC_API = "messages"


def _removals() -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    return [{"remove": h} for h in CLIENT_KEY_HEADERS], [{"remove": q} for q in CLIENT_KEY_PARAMS]


def client_credentials_stripped() -> dict[str, Any]:
    """The listener filter after ext_proc that drops every client credential (keyed listeners)."""
    headers, params = _removals()
    return fill("listener/strip_credentials", request_mutations=headers, query_mutations=params)


def upstream_key_filters(api_key_env: str, api: str = "") -> list[dict[str, Any]]:
    """A cluster's upstream HTTP filters: the client's credentials out, the upstream's key in.

    ``api`` is the LLM API the upstream speaks; Anthropic's takes ``x-api-key``, every other
    (and a decision runtime) ``Authorization: Bearer``."""
    headers, params = _removals()
    value = f"%ENVIRONMENT({api_key_env})%"
    key = ("x-api-key", value) if api == ANTHROPIC_API else ("authorization", f"Bearer {value}")
    headers.append(
        {"append": {"header": {"key": key[0], "value": key[1]}, "append_action": "OVERWRITE_IF_EXISTS_OR_ADD"}}
    )
    return [
        fill("cluster/upstream_key", request_mutations=headers, query_mutations=params),
        fill("cluster/upstream_codec"),
    ]


__all__ = ["CLIENT_KEY_HEADERS", "CLIENT_KEY_PARAMS", "client_credentials_stripped", "upstream_key_filters"]
