"""``vllm-sr xds``: serve compiled configs to Envoy over gRPC ADS."""

from __future__ import annotations

import os
import signal
import threading
from pathlib import Path
from typing import Annotated

import typer

from sr_control.cli.compile import address
from sr_control.cli.errors import EXIT_UNREADABLE, fail
from sr_control.compiler import Address, Settings
from sr_control.pools import discovery_from
from sr_control.xds import ControlPlane
from sr_control.xds.server import MAX_STREAMS
from sr_control.xds.tls import ServerTls, TlsError, check_plaintext
from sr_control.xds.versions import KEEP
from sr_control.xds.watch import RECHECK_S

app = typer.Typer(help="Serve router configs to Envoy over xDS.", no_args_is_help=True)


@app.command()
def serve(
    config: Annotated[
        Path,
        typer.Option(
            "--config", "-c", help="The router config; edits are served as they are saved.", show_default=False
        ),
    ],
    host: Annotated[
        str,
        typer.Option(
            help=(
                "Address to listen on. Plaintext is served on loopback only: elsewhere give "
                "--tls-cert/--tls-key/--client-ca, or --insecure."
            )
        ),
    ] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="gRPC ADS port (state of the world and delta).")] = 18000,
    status_port: Annotated[
        int, typer.Option(help="HTTP port for /status, /metrics, /healthz (ready) and /livez (alive).")
    ] = 18001,
    sidecar: Annotated[
        Address,
        typer.Option(
            "--sidecar",
            parser=address,
            metavar="HOST:PORT",
            help="The ext_proc sidecar Envoy calls (HOST:PORT or unix:PATH).",
        ),
    ] = "127.0.0.1:18080",  # type: ignore[assignment]
    poll_interval: Annotated[
        float,
        typer.Option(
            help=(
                "Seconds between re-checks of the config file that no file-system event prompted "
                "(edits are seen through inotify at once; this covers file systems that report none)."
            ),
            min=0.005,
            max=600.0,
        ),
    ] = RECHECK_S,
    settle: Annotated[
        float,
        typer.Option(
            help=(
                "Seconds a config written in place must hold still before it is read; "
                "a file renamed over it is read at once."
            ),
            min=0.0,
            max=60.0,
        ),
    ] = 0.25,
    max_streams: Annotated[
        int,
        typer.Option(help="ADS streams open at once (each Envoy and each sidecar holds one); more are refused.", min=1),
    ] = MAX_STREAMS,
    kubeconfig: Annotated[
        Path | None,
        typer.Option(
            help=(
                "Discover Service-backed deployments' pods with this kubeconfig. "
                "Default: in a Kubernetes pod, its service account; elsewhere, no discovery."
            ),
            show_default=False,
        ),
    ] = None,
    namespace: Annotated[
        str | None,
        typer.Option(
            help=(
                "Namespace of Services named without one. "
                "Default: the pod's own namespace (or the kubeconfig context's)."
            ),
            show_default=False,
        ),
    ] = None,
    state_dir: Annotated[
        Path | None,
        typer.Option(
            help=(
                "Keep the versions served (source text and time) under DIR/versions, across restarts; "
                "`vllm-sr config versions` lists them. Default: kept in memory only."
            ),
            metavar="DIR",
            show_default=False,
        ),
    ] = None,
    keep: Annotated[int, typer.Option(help="How many served versions to keep.", min=1)] = KEEP,
    tls_cert: Annotated[
        Path | None,
        typer.Option(help="Serve ADS over mTLS: the control plane's certificate (PEM).", show_default=False),
    ] = None,
    tls_key: Annotated[Path | None, typer.Option(help="Its private key (PEM).", show_default=False)] = None,
    client_ca: Annotated[
        Path | None,
        typer.Option(
            help="The CA every node's certificate must chain to; a node without one is refused.", show_default=False
        ),
    ] = None,
    insecure: Annotated[
        bool,
        typer.Option(
            "--insecure",
            help=(
                "Serve plaintext ADS on a non-loopback --host: whoever reaches the port can read every "
                "listener, deployment and endpoint. Only where the network in front of it is trusted."
            ),
        ),
    ] = False,
) -> None:
    """Serve a config over xDS and push every valid edit.

    Watches the file (editors' rename-and-replace and Kubernetes ConfigMap symlink swaps
    included). An edit is loaded, validated and compiled, then pushed as one new version; an
    invalid edit is logged with file, line and field and the previous version keeps serving.
    Deployments given as a Kubernetes `service` get their pods from the Service's
    EndpointSlices, sent to Envoy as endpoints (EDS) as they come and go.

    Runs until SIGTERM or Ctrl-C.
    """
    given = {"--tls-cert": tls_cert, "--tls-key": tls_key, "--client-ca": client_ca}
    if any(given.values()) and not all(given.values()):
        missing = ", ".join(flag for flag, value in given.items() if value is None)
        raise fail(
            f"error: ADS over mTLS needs --tls-cert, --tls-key and --client-ca; missing {missing}", EXIT_UNREADABLE
        )
    tls = ServerTls(tls_cert, tls_key, client_ca) if tls_cert and tls_key and client_ca else None
    try:
        check_plaintext(host, tls, insecure)
    except TlsError as exc:
        raise fail(f"error: {exc}", EXIT_UNREADABLE) from None
    try:
        discovery = discovery_from(kubeconfig, namespace, in_cluster="KUBERNETES_SERVICE_HOST" in os.environ)
    except ValueError as exc:
        raise fail(f"error: {exc}", EXIT_UNREADABLE) from None
    plane = ControlPlane(
        config,
        Settings(sidecar=sidecar),
        host=host,
        port=port,
        status_port=status_port,
        poll_interval=poll_interval,
        settle=settle,
        max_streams=max_streams,
        discovery=discovery,
        state_dir=state_dir,
        keep=keep,
        tls=tls,
    )
    try:
        plane.start()
    except (OSError, TlsError) as exc:
        raise fail(f"error: {exc}", EXIT_UNREADABLE) from None
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    try:
        stop.wait()
    except KeyboardInterrupt:
        pass
    finally:
        plane.stop()
