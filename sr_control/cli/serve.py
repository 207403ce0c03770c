"""``vllm-sr serve``: the whole local stack on its embedded default config, or a given one."""

from __future__ import annotations

import signal
from pathlib import Path
from typing import Annotated

import typer

from sr_control.cli.errors import EXIT_INVALID, fail
from sr_control.stack import Ports, Stack, StackError, StackOptions


def serve(
    config: Annotated[
        Path | None, typer.Option("--config", "-c", help="A router config to serve instead of the embedded default.")
    ] = None,
    model: Annotated[
        str, typer.Option(help="What the local runtime serves: a built-in name or a checkpoint folder.")
    ] = "default",
    device: Annotated[str, typer.Option(help="cpu or cuda, for the local runtime.")] = "cpu",
    state_dir: Annotated[Path, typer.Option(help="Where the served config, Envoy's bootstrap and the logs go.")] = Path(
        ".vllm-sr"
    ),
    port_offset: Annotated[
        int, typer.Option(help="Shift every default port by this much, to run stacks side by side.", min=0, max=50000)
    ] = 0,
    reset_config: Annotated[
        bool,
        typer.Option(
            "--reset-config",
            help="Write the embedded default over an edited STATE_DIR/config.yaml (it is kept otherwise).",
        ),
    ] = False,
    drain_s: Annotated[
        float,
        typer.Option(
            "--drain-s",
            help="On Ctrl-C, how long requests in flight may take to finish; everything exits within this plus 1.5 s.",
            min=0.0,
        ),
    ] = 10.0,
) -> None:
    """Run the local stack: runtime, control plane, sidecar and Envoy.

    The runtime serves MODEL on 127.0.0.1:8100; the control plane serves the config over xDS
    (edits to the served copy, STATE_DIR/config.yaml, go live and are kept across restarts);
    the sidecar reads, routes and answers each request Envoy's listener (127.0.0.1:8801)
    takes. Ctrl-C or SIGTERM drains and stops them all.
    """
    options = StackOptions(
        state_dir=state_dir,
        config=config,
        model=model,
        device=device,
        ports=Ports().shifted(port_offset),
        drain_timeout=drain_s,
        reset_config=reset_config,
    )
    stack = Stack(options)
    signal.signal(signal.SIGTERM, stack.request_stop)
    signal.signal(signal.SIGINT, stack.request_stop)
    try:
        stack.start()
        rows = stack.summary()
        width = max(len(name) for name, _ in rows)
        for name, where in rows:
            typer.echo(f"{name:<{width}}  {where}")
        typer.echo("Ctrl-C stops everything (requests in flight finish first).")
        code = stack.wait()
    except StackError as exc:
        stack.stop()
        raise fail(f"error: {exc}", EXIT_INVALID) from None
    stack.stop()
    raise typer.Exit(code)
