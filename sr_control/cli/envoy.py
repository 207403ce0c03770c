"""``vllm-sr envoy``: stopping an Envoy pod without cutting a request (the chart's preStop hooks)."""

from __future__ import annotations

import time
from typing import Annotated

import typer

from sr_control import drain as draining

app = typer.Typer(help="Drain an Envoy before it stops (the chart's preStop hooks).", no_args_is_help=True)

Admin = Annotated[str, typer.Option(help="Envoy's admin: HOST:PORT or unix:PATH.", metavar="HOST:PORT")]


@app.command()
def drain(
    admin: Admin = "127.0.0.1:9901",
    announce_s: Annotated[
        float,
        typer.Option(
            help=(
                "Seconds of graceful drain (run Envoy with --drain-strategy immediate): connections are still "
                "accepted and each is closed after its current response; then the listeners are closed."
            ),
            min=0,
        ),
    ] = 5,
    timeout_s: Annotated[
        float, typer.Option(help="Then, the longest wait for the requests in flight to finish.", min=0)
    ] = 12,
) -> None:
    """Drain Envoy's listeners, then wait until no request is active (or the timeout passes).

    Exit 0 when every request finished, 1 when some were still active at the timeout, 2 when the
    admin did not answer (Envoy is not running). The chart's Envoy preStop:

        vllm-sr envoy drain --admin 127.0.0.1:9901 --announce-s 5 --timeout-s 12
    """
    if not draining.start_drain(admin):
        typer.echo(f"envoy drain: no Envoy admin answers at {admin}", err=True)
        raise typer.Exit(2)
    typer.echo(f"envoy drain: draining; the listeners close in {announce_s:g} s")
    # Envoy still accepts connections meanwhile: returning early would have the kubelet stop it
    # while other nodes' proxies may still send it new ones.
    time.sleep(announce_s)
    draining.close_listeners(admin)
    typer.echo("envoy drain: listeners closed; waiting for the requests in flight")
    left = draining.wait_idle(admin, timeout_s=timeout_s)
    if left:
        typer.echo(f"envoy drain: {left} request(s) still active after {timeout_s:g} s", err=True)
        raise typer.Exit(1)
    typer.echo("envoy drain: listeners closed, no request active")


@app.command()
def wait(
    admin: Admin = "127.0.0.1:9901",
    timeout_s: Annotated[float, typer.Option(help="The longest wait.", min=0)] = 30,
) -> None:
    """Wait until the Envoy beside this process has exited (its admin no longer answers).

    The sidecar's preStop: Envoy calls the sidecar for every request it still drains, so the
    sidecar stops after it. Exit 0 once Envoy is gone, 1 at the timeout:

        vllm-sr envoy wait --admin 127.0.0.1:9901 --timeout-s 19
    """
    if not draining.wait_gone(admin, timeout_s=timeout_s):
        typer.echo(f"envoy wait: Envoy at {admin} still answers after {timeout_s:g} s", err=True)
        raise typer.Exit(1)
