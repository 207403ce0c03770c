"""The route table of one listener: every path of every offered API, and Envoy's own answers.

In match order:

0. a request the sidecar already named a cluster for (``forward``), whatever its path now;
1. each path of each offered API: System One paths through the sidecar (POST; other methods
   405 with ``allow: POST``); an LLM API straight to its provider when one keyless model of
   that API serves it, else through the sidecar, which reads ``model`` from the body;
2. ``GET /v1/models`` through the sidecar (it lists only the offered APIs' models), and
   ``GET /v1/systemone/models`` where System One is offered (its models with what each
   answers); other methods 405;
3. each path of every API the listener does not offer: 404 naming the API and the listener;
4. everything else: 404 naming the listener.

Envoy answers the 405s, 3 and 4 itself, in the listener schema's error form: unknown paths and
wrong methods never reach Python.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from sr_control.apis import REGISTRY, Api
from sr_control.compiler import names
from sr_control.compiler.clusters import upstream
from sr_control.compiler.limits import BUFFER_LIMIT, DEADLINE_MARGIN_MS, LISTING_TIMEOUT_MS, LLM_TIMEOUT_MS, duration
from sr_control.compiler.local_replies import error_answer
from sr_control.compiler.offer import ListenerOffer, Offer
from sr_control.compiler.templates import fill
from sr_control.config.model import ProviderModel, RouterConfig
from sr_control.decide.rewrite import DECISION_HEADER, METADATA_NAMESPACE, MODEL_HEADER
from systemone.errors import ErrorInfo

MODELS_PATH = "/v1/models"
SYSTEMONE_MODELS_PATH = "/v1/systemone/models"


# LLM requests need the body read (to find ``model``) but not the answer: it streams back untouched.
_LLM_MODE = {
    "request_header_mode": "SEND",
    "request_body_mode": "BUFFERED",
    "response_header_mode": "SKIP",
    "response_body_mode": "NONE",
    "request_trailer_mode": "SKIP",
    "response_trailer_mode": "SKIP",
}
# An API that offers a virtual model with a judge (docs/decide/): the sidecar sees the answer's
# headers, and asks for the body of an answer its judge reads. Without a judge the answer's
# x-vsr-* headers come from the decision's dynamic metadata (forward_route): no message for them.
_JUDGE_MODE = _LLM_MODE | {"response_header_mode": "SEND"}


def route_configuration(config: RouterConfig, offer: ListenerOffer, sidecar_version: str) -> dict[str, Any]:
    return fill(
        "route/route_configuration",
        name=names.route(offer.name),
        internal_headers=[names.CLUSTER_HEADER],
        vhost=offer.name,
        buffer_limit=BUFFER_LIMIT,
        routes=route_table(config, offer, sidecar_version),
    )


def route_table(config: RouterConfig, offer: ListenerOffer, sidecar_version: str) -> list[dict[str, Any]]:
    providers = {m.name: (i, m) for i, m in enumerate(config.providers.models)}
    routes: list[dict[str, Any]] = [
        fill(
            "route/forward_route",
            cluster_header=names.CLUSTER_HEADER,
            timeout=duration(LLM_TIMEOUT_MS),
            retry_policy=fill("route/upstream_retry"),
            headers=[_REQUEST_ID, *_DECIDED],
        )
    ]
    for o in offer.offers:
        # A listener with keys checks every request in the sidecar, before any upstream sees it.
        direct = None if offer.listener.auth is not None else _direct_provider(o, providers)
        for path in o.api.paths:
            if o.api.kind == "decision":
                # The sidecar answers at the deadline; Envoy's timeout is the backstop after it.
                routes.append(
                    _sidecar(
                        offer,
                        o.api.name,
                        o.schema,
                        path,
                        o.deadline_ms + DEADLINE_MARGIN_MS,
                        sidecar_version,
                        None,
                        match=_post(path),
                    )
                )
                routes.append(
                    _local(
                        f"{o.api.name}:{path}:other-methods",
                        _match(path),
                        405,
                        offer,
                        f"{path} takes POST",
                        allow="POST",
                    )
                )
            elif not o.models:
                routes.append(
                    _local(
                        f"{o.api.name}:{path}",
                        _match(path),
                        404,
                        offer,
                        f"listener {offer.name!r} offers {o.api.name} but no model serves it",
                    )
                )
            elif direct is not None:
                routes.append(_provider(o.api.name, path, *direct))
            else:
                mode = _JUDGE_MODE if _judged(config, o.models) else _LLM_MODE
                routes.append(_sidecar(offer, o.api.name, None, path, LLM_TIMEOUT_MS, sidecar_version, mode))
    listings = [MODELS_PATH] + ([SYSTEMONE_MODELS_PATH] if offer.systemone_schema is not None else [])
    for path in listings:
        get = {"path": path, "headers": [{"name": ":method", "string_match": {"exact": "GET"}}]}
        routes.append(
            _sidecar(
                offer, "models", offer.systemone_schema, path, LISTING_TIMEOUT_MS, sidecar_version, None, match=get
            )
        )
        routes.append(
            _local(f"models:{path}:other-methods", _match(path), 405, offer, f"{path} takes GET", allow="GET")
        )
    for api in offer.not_offered():
        for path in api.paths:
            routes.append(_local(f"not-offered:{api.name}:{path}", _match(path), 404, offer, _not_offered(api, offer)))
    routes.append(
        _local(
            "not-found",
            {"prefix": "/"},
            404,
            offer,
            f"no API on listener {offer.name!r} serves this path; it offers {_offers(offer)}",
        )
    )
    return routes


def _judged(config: RouterConfig, models: Sequence[str]) -> bool:
    """Whether a virtual model among ``models`` has a route whose judge may escalate."""
    return any(
        route.judge is not None and len(route.models) > 1
        for m in models
        if m in config.virtual_models
        for route in config.virtual_models[m].routes
    )


def _direct_provider(
    o: Offer, providers: dict[str, tuple[int, ProviderModel]]
) -> tuple[str, int, ProviderModel] | None:
    """The one provider model an LLM API can go to without Python, if there is one.

    Two or more models need the body's ``model`` read; a model of another API format needs
    translating. A model with an API key goes through the sidecar too: Envoy's own path rewrite
    would send the client's path, query string and any key in it, upstream in
    ``x-envoy-original-path``; the sidecar names that header without the query.
    """
    if o.api.kind != "llm" or len(o.models) != 1 or o.models[0] not in providers:
        return None
    index, model = providers[o.models[0]]
    if model.api_key_env is not None or REGISTRY.canonical(model.api_format) != o.api.name:
        return None
    return names.provider_cluster(model.name), index, model


def _post(path: str) -> dict[str, Any]:
    return {**_match(path), "headers": [{"name": ":method", "string_match": {"exact": "POST"}}]}


def _match(path: str) -> dict[str, Any]:
    if path.endswith("/*"):
        return {"prefix": path[:-1]}
    return {"path": path}


def _sidecar(
    offer: ListenerOffer,
    api: str,
    schema: str | None,
    path: str,
    timeout_ms: int,
    version: str,
    mode: dict[str, str] | None,
    *,
    match: dict[str, Any] | None = None,
) -> dict[str, Any]:
    metadata = [("x-vsr-listener", offer.name), ("x-vsr-api", api)]
    if schema is not None:
        metadata.append(("x-vsr-schema", schema))
    metadata.append(("x-vsr-config-version", version))
    if mode is _JUDGE_MODE:
        # Where the sidecar sends a judge's escalation: through this listener again, so Envoy
        # adds the next provider's key as it adds the first's (docs/decide/failures.md).
        metadata.append(("x-vsr-listen", f"{offer.listener.address}:{offer.listener.port}"))
    return fill(
        "route/sidecar_route",
        name=f"{api}:{path}",
        match=match or _match(path),
        cluster_header=names.CLUSTER_HEADER,
        timeout=duration(timeout_ms),
        processing_mode=mode,
        metadata=[{"key": k, "value": v} for k, v in metadata],
        headers=[_REQUEST_ID],
    )


def _provider(api: str, path: str, cluster: str, index: int, model: ProviderModel) -> dict[str, Any]:
    # Registry paths start with /v1; the provider's endpoint URL says where its /v1 lives.
    base = upstream(model.endpoints, f"providers.models[{index}].endpoints").base_path
    tail = path[len("/v1") :]
    match = _match(path)
    rewritten = base + (tail[:-1] if "prefix" in match else tail)
    return fill(
        "route/provider_route",
        name=f"{api}:{path}",
        match=match,
        cluster=cluster,
        timeout=duration(LLM_TIMEOUT_MS),
        prefix_rewrite=None if rewritten == match.get("path", match.get("prefix")) else rewritten,
        headers=[_REQUEST_ID],
    )


def _local(
    name: str, match: dict[str, Any], status: int, offer: ListenerOffer, message: str, *, allow: str | None = None
) -> dict[str, Any]:
    headers = [_header("content-type", "application/json")]
    if allow:
        headers.append(_header("allow", allow))
    return fill(
        "route/local_reply",
        name=name,
        match=match,
        status=status,
        body=error_body(offer, status, message),
        headers=headers,
    )


def error_body(offer: ListenerOffer, status: int, message: str) -> str:
    """The listener schema's error body, as the sidecar writes it (``code`` and, on a 4.0
    listener, 4.0's ``error`` object included)."""
    code = {404: "not_found", 405: "method_not_allowed"}[status]
    return error_answer(offer, ErrorInfo(status, code, message, code))[2].decode()


def _not_offered(api: Api, offer: ListenerOffer) -> str:
    return f"the {api.name} API is not offered on listener {offer.name!r}; it offers {_offers(offer)}"


def _offers(offer: ListenerOffer) -> str:
    return ", ".join(offer.api_names) or "no APIs"


def _header(key: str, value: str) -> dict[str, Any]:
    return {"header": {"key": key, "value": value}, "append_action": "OVERWRITE_IF_EXISTS_OR_ADD"}


# One request id end to end: Envoy's x-request-id (generated at the listener, passed upstream,
# written in the access log) is also the x-typesafe-request-id the official SDK reads.
_REQUEST_ID = _header(names.TYPESAFE_REQUEST_ID, "%REQ(x-request-id)%")
# A decided LLM request's answer names its route, model and config version: Envoy adds them from
# the decision the sidecar left in the request's dynamic metadata (docs/decide/). Any other
# request has none there, and a header whose value comes out empty is not added.
_DECIDED = [
    _header(header, f"%DYNAMIC_METADATA({METADATA_NAMESPACE}:{key})%")
    for header, key in ((DECISION_HEADER, "decision"), (MODEL_HEADER, "model"), ("x-vsr-config-version", "version"))
]


__all__ = ["MODELS_PATH", "SYSTEMONE_MODELS_PATH", "error_body", "route_configuration", "route_table"]
