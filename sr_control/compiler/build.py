"""``compile(config, settings) -> Resources``: a router config as Envoy resources. Pure: no I/O.

Each config listener becomes a Listener (``listener/<name>``), a RouteConfiguration
(``route/<name>``) and the sidecar's data for it (``sidecar/<name>``); each deployment and
provider model a Cluster, plus the sidecar's cluster. Everything is parsed into the typed
xds-protos messages and checked for consistency before it is returned.
"""

from __future__ import annotations

from sr_control.compiler import names
from sr_control.compiler.clusters import clusters, xds_cluster
from sr_control.compiler.consistency import consistent
from sr_control.compiler.convert import parse
from sr_control.compiler.incremental import Recompiler
from sr_control.compiler.listeners import listener
from sr_control.compiler.offer import listener_offer
from sr_control.compiler.protos import Bootstrap, typed_struct
from sr_control.compiler.resources import Resource, Resources
from sr_control.compiler.routes import route_configuration
from sr_control.compiler.settings import XDS_BACKOFF, Settings
from sr_control.compiler.sidecar import SidecarData
from sr_control.compiler.templates import fill
from sr_control.config.model import RouterConfig


def compile(config: RouterConfig, settings: Settings = Settings()) -> Resources:  # noqa: A001 - the domain's word
    """The whole config, every unit built: the reference an incremental recompile equals."""
    return consistent(Recompiler(settings).compile(config))


def bootstrap(settings: Settings = Settings()) -> Bootstrap:
    """Envoy knowing only the control plane: every other resource arrives over ADS."""
    doc = fill(
        "bootstrap/ads",
        api_type="DELTA_GRPC" if settings.ads == "delta" else "GRPC",
        xds_cluster=names.XDS_CLUSTER,
        xds_retry=fill("bootstrap/xds_retry", base=_seconds(XDS_BACKOFF[0]), max=_seconds(XDS_BACKOFF[1])),
        xds_cluster_resource=xds_cluster(settings),
        **_common(settings),
    )
    return parse(doc, Bootstrap, "bootstrap")


def static_bootstrap(config: RouterConfig, settings: Settings = Settings()) -> Bootstrap:
    """Every resource inline: for ``envoy --mode validate`` and for running without a control plane."""
    listeners = []
    data = SidecarData(config)
    for listener_config in config.listeners:
        offer = listener_offer(config, listener_config)
        version = Resource.of(names.sidecar(listener_config.name), typed_struct(data.payload(offer))).version
        routes = route_configuration(config, offer, version)
        listeners.append(listener(offer, tracing=config.tracing, route_config=routes))
    # No control plane serves endpoints here: a Service-backed deployment resolves the Service's DNS name.
    doc = fill(
        "bootstrap/static", listeners=listeners, clusters=clusters(config, settings, eds=False), **_common(settings)
    )
    return parse(doc, Bootstrap, "envoy-static")


def _seconds(s: float) -> str:
    return f"{s:g}s"


def _common(settings: Settings) -> dict[str, object]:
    return {
        "node": fill("bootstrap/node", id=settings.node_id, cluster=settings.node_cluster),
        "admin": (
            fill("bootstrap/admin_socket", path=settings.admin.path)
            if settings.admin.path
            else fill("bootstrap/admin", address=settings.admin.host, port=settings.admin.port)
        ),
        "layered_runtime": fill("bootstrap/layered_runtime"),
        "overload_manager": fill("bootstrap/overload_manager", max_connections=settings.max_downstream_connections),
    }
