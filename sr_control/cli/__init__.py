"""``vllm-sr``: the control plane's command line. Thin: parse flags, call the library, print."""

from __future__ import annotations

import os
from typing import Annotated

import typer

from sr_base import log
from sr_control import __version__
from sr_control.cli import config as config_cmd
from sr_control.cli import envoy as envoy_cmd
from sr_control.cli import extproc as extproc_cmd
from sr_control.cli import logs as logs_cmd
from sr_control.cli import plan as plan_cmd
from sr_control.cli import request as request_cmd
from sr_control.cli import route as route_cmd
from sr_control.cli import schemas as schemas_cmd
from sr_control.cli import serve as serve_cmd
from sr_control.cli import status as status_cmd
from sr_control.cli import systemone as systemone_cmd
from sr_control.cli import xds as xds_cmd
from sr_control.cli.errors import run

app = typer.Typer(
    name="vllm-sr",
    help="Control plane for System One decision-model APIs behind Envoy.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,
)
# The verbs on a live config sit with the other config verbs.
config_cmd.app.command("plan")(plan_cmd.plan)
config_cmd.app.command("apply")(plan_cmd.apply)
config_cmd.app.command("versions")(plan_cmd.versions)
config_cmd.app.command("rollback")(plan_cmd.rollback)
config_cmd.app.command("get")(plan_cmd.get_config)
app.add_typer(config_cmd.app, name="config")
app.add_typer(schemas_cmd.app, name="schemas")
app.add_typer(systemone_cmd.app, name="systemone")
app.add_typer(xds_cmd.app, name="xds")
app.add_typer(extproc_cmd.app, name="extproc")
app.add_typer(envoy_cmd.app, name="envoy")
app.command(name="serve")(serve_cmd.serve)
app.command(name="route")(route_cmd.route)
app.command(name="status")(status_cmd.status)
app.command(name="request")(request_cmd.request)
app.command(name="logs")(logs_cmd.logs)


def _version(value: bool) -> None:
    if value:
        typer.echo(f"vllm-sr {__version__}")
        raise typer.Exit()


@app.callback()
def root(
    log_level: Annotated[str, typer.Option(help="debug, info, warning or error.")] = "info",
    log_format: Annotated[log.LogFormat, typer.Option(help="Log lines on stderr as console text or JSON.")] = "console",
    version: Annotated[
        bool, typer.Option("--version", callback=_version, is_eager=True, help="Print the version and exit.")
    ] = False,
) -> None:
    """Control plane for System One decision-model APIs behind Envoy."""
    log.configure(log_level, log_format)
    # Worker processes (vllm-sr extproc serve --workers N) log as their parent does.
    os.environ["VSR_LOG_LEVEL"], os.environ["VSR_LOG_FORMAT"] = log_level, log_format


def main() -> None:
    run(app)
