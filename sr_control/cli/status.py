"""``vllm-sr status``: the live version, every node's ACK or NACK, listeners and pool members."""

from __future__ import annotations

import json
import time
from typing import Annotated

import typer

from sr_control.cli.config import Format, FormatOption
from sr_control.cli.errors import EXIT_INVALID, EXIT_OK, EXIT_UNREADABLE, fail
from sr_control.cli.plan import XdsOption
from sr_control.operate.live import SIDECAR_STATUS, XDS_STATUS, Unreachable
from sr_control.operate.status import gather, render


def status(
    xds: XdsOption = XDS_STATUS,
    sidecar: Annotated[
        list[str] | None,
        typer.Option(
            "--sidecar",
            metavar="HOST:PORT",
            help=(
                "Read this sidecar status port (repeat for several) instead of those the control plane's "
                f"nodes tell (e.g. a port-forwarded {SIDECAR_STATUS})."
            ),
            show_default=False,
        ),
    ] = None,
    watch: Annotated[bool, typer.Option("--watch", "-w", help="Show it again every --interval seconds.")] = False,
    interval: Annotated[float, typer.Option(help="Seconds between two looks with --watch.", min=0.2)] = 2.0,
    format: FormatOption = Format.text,
) -> None:
    """Show what is live and whether every node is in step.

    Every Envoy and sidecar connected to the control plane is listed with the version it ACKed
    (or NACKed, with Envoy's error), over which protocol and since when; each listener with its
    APIs, schema and models; each member with health, its card's question types and limits, and
    open calls; and the 4.0-only request forms each listener has seen. The sidecars' status
    ports are found from the control plane: each sidecar tells it where its port answers.

    Exit 0 when every node holds the live version, 1 when a node is behind or a NACK stands,
    2 when the control plane does not answer.

    \b
    Example:
      vllm-sr status
      vllm-sr status --xds 10.0.0.5:18001 --format json
    """
    sidecars = sidecar or None
    code = EXIT_OK
    try:
        while True:
            try:
                report = gather(xds, sidecars)
            except Unreachable as exc:
                raise fail(f"error: the control plane does not answer: {exc}", EXIT_UNREADABLE) from None
            if format is Format.json:
                typer.echo(json.dumps(report, indent=2))
            else:
                if watch:
                    typer.echo("\x1b[H\x1b[2J", nl=False)  # clear the terminal, as watch(1) does
                typer.echo(render(report))
            code = EXIT_OK if report["in_step"] else EXIT_INVALID
            if not watch:
                break
            time.sleep(interval)
    except KeyboardInterrupt:
        pass  # Ctrl-C ends --watch with the last look's exit code
    raise typer.Exit(code)
