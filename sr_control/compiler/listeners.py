"""The Envoy Listener for one config listener: an HTTP connection manager with three filters.

    zstd request decompressor -> ext_proc (off unless the route enables it) -> router

and, on a listener with keys, the client's credentials dropped between ext_proc and the router.
With ``tracing`` in the config, the connection manager starts (or continues) a W3C trace per
request and sends its spans to the collector (``vsr/otlp``).

The routes come over RDS (``route/<listener>``) when served over xDS, or inline for the
static bootstrap.
"""

from __future__ import annotations

from typing import Any

from sr_control.compiler import names
from sr_control.compiler.credentials import client_credentials_stripped
from sr_control.compiler.limits import BUFFER_LIMIT, DEADLINE_MARGIN_MS, DEFAULT_DEADLINE_MS, duration
from sr_control.compiler.local_replies import local_reply_config
from sr_control.compiler.offer import ListenerOffer
from sr_control.compiler.templates import fill
from sr_control.config.model import Tracing


def listener(
    offer: ListenerOffer, *, tracing: Tracing | None = None, route_config: dict[str, Any] | None = None
) -> dict[str, Any]:
    listener_config = offer.listener
    rds = (
        None if route_config is not None else fill("listener/rds", route_config_name=names.route(listener_config.name))
    )
    return fill(
        "listener/listener",
        name=names.listener(listener_config.name),
        address=listener_config.address,
        port=listener_config.port,
        buffer_limit=BUFFER_LIMIT,
        stat_prefix=listener_config.name,
        access_log=fill("listener/access_log", listener=listener_config.name),
        outcomes_log=fill(
            "listener/outcomes_log", listener=listener_config.name, sidecar_cluster=names.SIDECAR_CLUSTER
        ),
        rds=rds,
        route_config=route_config,
        local_reply_config=local_reply_config(offer),
        tracing=_tracing(tracing),
        http_filters=[
            fill("listener/zstd_decompressor"),
            fill(
                "listener/ext_proc",
                sidecar_cluster=names.SIDECAR_CLUSTER,
                message_timeout=duration(_message_timeout_ms(offer)),
            ),
            *([client_credentials_stripped()] if listener_config.auth is not None else []),
            fill("listener/router"),
        ],
    )


def _tracing(tracing: Tracing | None) -> dict[str, Any] | None:
    if tracing is None:
        return None
    return fill(
        "listener/tracing",
        sample_rate=tracing.sample_rate,
        otlp_cluster=names.OTLP_CLUSTER,
        service_name=f"{tracing.service_name}-envoy",
    )


def _message_timeout_ms(offer: ListenerOffer) -> int:
    # The sidecar may spend the whole deadline in one message (calling the member itself, or
    # splitting a batch upstream), then answers 504 in the listener's form: a message may take
    # the longest deadline the listener allows, plus the margin for writing that answer.
    return (
        max((o.deadline_ms for o in offer.offers if o.api.versioned), default=DEFAULT_DEADLINE_MS) + DEADLINE_MARGIN_MS
    )
