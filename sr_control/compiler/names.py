"""Envoy resource names, derived from config names so that the same config names the same things.

Names carry their kind (``listener/public``, ``deployment/gateway-d3``) so an Envoy stat or a
``/config_dump`` entry says what it is, and a deployment and a provider model of one name cannot
collide.
"""

from __future__ import annotations

SIDECAR_CLUSTER = "vsr/sidecar"
XDS_CLUSTER = "vsr/xds"
# The OTLP collector Envoy sends its spans to, when the config has ``tracing``.
OTLP_CLUSTER = "vsr/otlp"
# The header the sidecar sets to pick an upstream cluster; a client's copy is dropped on arrival.
CLUSTER_HEADER = "x-vsr-cluster"
# The request id the official SDK reads; the listener sets it to Envoy's x-request-id.
TYPESAFE_REQUEST_ID = "x-typesafe-request-id"


def listener(name: str) -> str:
    return f"listener/{name}"


def route(listener_name: str) -> str:
    return f"route/{listener_name}"


def sidecar(listener_name: str) -> str:
    return f"sidecar/{listener_name}"


def deployment_cluster(name: str) -> str:
    return f"deployment/{name}"


def provider_cluster(model: str) -> str:
    return f"provider/{model}"
