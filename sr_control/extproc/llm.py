"""LLM API requests through the sidecar: the body's ``model`` picks the provider.

A listener's ``chat_completions``, ``responses``, ``messages`` or ``images`` route comes here
when Envoy cannot send it on by itself: several models serve the API, a model needs an API key,
or the listener checks keys. The sidecar reads ``model`` (only that member is decoded), names
the provider's cluster and rewrites the path onto the provider's base path; Envoy adds the
provider's key as the request leaves (the sidecar never holds it). The answer streams back from
the provider untouched.

Errors are the API's own shape, so an OpenAI or Anthropic client reads them as it reads its
provider's: an unknown model is 404 naming the model and the listener.
"""

from __future__ import annotations

import json
from typing import Any

import msgspec

from sr_control.extproc.data import Provider
from sr_control.extproc.envoy import Answer, Forward
from sr_control.extproc.incoming import Incoming

ANTHROPIC = "messages"
_JSON = (("content-type", "application/json"),)


class _Body(msgspec.Struct):
    """The one member the sidecar reads; every other member is skipped unparsed."""

    model: Any = None


_DECODER = msgspec.json.Decoder(_Body)

# OpenAI's and Anthropic's error types by status.
_OPENAI_TYPE = {
    400: "invalid_request_error",
    401: "invalid_request_error",
    404: "invalid_request_error",
    413: "invalid_request_error",
    500: "server_error",
    503: "server_error",
}
_ANTHROPIC_TYPE = {
    400: "invalid_request_error",
    401: "authentication_error",
    404: "not_found_error",
    413: "request_too_large",
    500: "api_error",
    503: "overloaded_error",
}


def llm_error(api: str, status: int, message: str, code: str, param: str | None = None) -> Answer:
    if api == ANTHROPIC:
        doc: dict[str, Any] = {
            "type": "error",
            "error": {"type": _ANTHROPIC_TYPE.get(status, "api_error"), "message": message},
        }
    else:
        doc = {
            "error": {
                "message": message,
                "type": _OPENAI_TYPE.get(status, "server_error"),
                "param": param,
                "code": code,
            }
        }
    return Answer(status, _JSON, json.dumps(doc).encode())


def model_of(body: bytes) -> Any:
    """The body's ``model`` (None when the body is not a JSON object or names none)."""
    try:
        return _DECODER.decode(body).model
    except msgspec.DecodeError:
        return None


def route(incoming: Incoming, body: bytes) -> Forward | Answer:
    api = incoming.api
    offer = incoming.data.offers.get(api)
    listener = incoming.listener
    try:
        model = _DECODER.decode(body).model
    except msgspec.DecodeError as exc:
        return llm_error(api, 400, f"the request body is not a JSON object: {exc}", "invalid_json")
    if not isinstance(model, str) or not model:
        return llm_error(
            api, 400, "the request body names no model (a string member `model`)", "missing_model", "model"
        )
    served = offer.models if offer is not None else ()
    provider = incoming.data.providers.get(model) if model in served else None
    if provider is None:
        names = ", ".join(m for m in served if m in incoming.data.providers) or "none"
        return llm_error(
            api,
            404,
            f"The model '{model}' does not exist on listener '{listener}' (its {api} models: {names})",
            "model_not_found",
            "model",
        )
    return to_provider(incoming, provider)


def to_provider(
    incoming: Incoming, provider: Provider, set_headers: tuple[tuple[str, str], ...] = (), body: bytes | None = None
) -> Forward:
    """Envoy sends the request to ``provider``'s cluster, its path onto the provider's base path."""
    sets: list[tuple[str, str]] = list(set_headers)
    path = provider.base_path + incoming.path[len("/v1") :] if incoming.path.startswith("/v1") else incoming.path
    if path != incoming.path:
        # What the access log shows; without the query, as the header goes upstream too.
        sets.append(("x-envoy-original-path", incoming.path.partition("?")[0]))
    # No key here: Envoy adds the provider's from its own environment as the request leaves, and
    # a listener with keys drops the client's (sr_control/compiler/credentials.py).
    return Forward(
        cluster=provider.cluster, path=path if path != incoming.path else None, body=body, set_headers=tuple(sets)
    )


__all__ = ["llm_error", "model_of", "route", "to_provider"]
