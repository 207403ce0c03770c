"""``vllm-sr extproc``: the ext_proc sidecar Envoy calls for System One and LLM routes."""

from __future__ import annotations

import re
from typing import Annotated

import typer

from sr_control.cli.compile import XdsCaOption, XdsKeyOption, addresses, xds_tls
from sr_control.cli.errors import EXIT_UNREADABLE, fail
from sr_control.extproc.server import serve as serve_sidecar
from sr_control.extproc.settings import SidecarSettings

app = typer.Typer(help="Run the ext_proc sidecar that routes requests for Envoy.", no_args_is_help=True)
_LISTENER = re.compile(r"^[a-z0-9]([a-z0-9_-]{0,61}[a-z0-9])?$")


def _listeners(text: str) -> tuple[str, ...]:
    if text.strip() == "all":
        return ()
    names = tuple(n.strip() for n in text.split(",") if n.strip())
    bad = [n for n in names if not _LISTENER.match(n)]
    if not names or bad:
        raise typer.BadParameter(
            f"give 'all' or listener names separated by commas (not {', '.join(bad) or repr(text)})"
        )
    return names


@app.command()
def serve(
    xds: Annotated[
        str,
        typer.Option(
            "--xds",
            metavar="HOST:PORT[,HOST:PORT]",
            help=(
                "The control plane's ADS port, where the sidecar subscribes to its data; several replicas "
                "separated by commas, tried in turn when one fails."
            ),
            show_default=False,
        ),
    ],
    xds_cert: Annotated[
        str,
        typer.Option(
            "--xds-cert",
            metavar="PATH",
            help="ADS over mTLS: the certificate the sidecar presents.",
            show_default=False,
        ),
    ] = "",
    xds_key: XdsKeyOption = "",
    xds_ca: XdsCaOption = "",
    host: Annotated[
        str, typer.Option(help="Address to listen on (the sidecar runs beside Envoy: loopback by default).")
    ] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="The ext_proc gRPC port Envoy calls.", min=1, max=65535)] = 18080,
    socket: Annotated[
        str,
        typer.Option(
            help=(
                "Serve ext_proc on this Unix socket (absolute path, created mode 0600) instead of --host/--port: "
                "only this user's processes, Envoy beside it, can connect."
            ),
            show_default=False,
        ),
    ] = "",
    status_port: Annotated[
        int, typer.Option(help="HTTP port for /status, /metrics and /healthz.", min=0, max=65535)
    ] = 18081,
    status_host: Annotated[
        str,
        typer.Option(
            help="Address of the status port (default: --host); e.g. 0.0.0.0 for a Prometheus outside the pod.",
            show_default=False,
        ),
    ] = "",
    workers: Annotated[
        int,
        typer.Option(
            help="Worker processes sharing the gRPC port; their metrics add up on one /metrics.", min=1, max=64
        ),
    ] = 1,
    listeners: Annotated[
        str, typer.Option(help="The listeners to serve: 'all', or names separated by commas.")
    ] = "all",
    node_id: Annotated[
        str, typer.Option(help="Node ID in the control plane's /status (default: vllm-sr-sidecar/HOST/PID).")
    ] = "",
    version_wait_ms: Annotated[
        int,
        typer.Option(
            help=(
                "How long a request waits for a config version the sidecar has not received; then 503 with Retry-After."
            ),
            min=0,
            max=60_000,
        ),
    ] = 1_000,
    card_refresh_s: Annotated[
        float, typer.Option(help="Seconds between refreshes of each member's model card.", min=0.1)
    ] = 30.0,
    forwarding: Annotated[
        str,
        typer.Option(
            help=(
                "Who calls a vllm-sr/5.0 member. auto: Envoy where its cluster balances several hosts "
                "(a Kubernetes Service's pods), else the sidecar; envoy: always Envoy; sidecar: always the sidecar."
            )
        ),
    ] = "auto",
    drain_s: Annotated[
        float, typer.Option(help="On SIGTERM, how long open requests may take to finish.", min=0.0)
    ] = 10.0,
) -> None:
    """Serve ext_proc for Envoy, with the data of the listeners it serves from the control plane.

    Each request is read in its listener's schema, routed to a pool member able to answer it,
    and answered in the client's schema. Runs until SIGTERM or Ctrl-C, then drains.
    """
    if forwarding not in ("auto", "envoy", "sidecar"):
        raise typer.BadParameter("auto, envoy or sidecar", param_hint="--forwarding")
    try:
        settings = SidecarSettings(
            xds=",".join(str(a) for a in addresses(xds)),
            xds_tls=xds_tls(xds_cert, xds_key, xds_ca),
            host=host,
            port=port,
            socket=socket,
            status_port=status_port,
            status_host=status_host,
            workers=workers,
            listeners=_listeners(listeners),
            node_id=node_id,
            version_wait_ms=version_wait_ms,
            card_refresh_s=card_refresh_s,
            forwarding=forwarding,  # type: ignore[arg-type]  # checked to be one of Forwarding's values above
            drain_s=drain_s,
        )
    except ValueError as exc:
        raise typer.BadParameter(str(exc)) from None
    try:
        code = serve_sidecar(settings)
    except OSError as exc:
        raise fail(f"error: {exc}", EXIT_UNREADABLE) from None
    raise typer.Exit(code or 0)
