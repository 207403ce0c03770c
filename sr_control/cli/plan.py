"""``vllm-sr config plan | apply | versions | rollback``: edits to a live config, as one transaction each."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any

import typer

from sr_control.cli.config import Format, FormatOption
from sr_control.cli.errors import EXIT_INVALID, EXIT_OK, EXIT_UNREADABLE, fail
from sr_control.config import load as loader
from sr_control.config.errors import ConfigUnreadable
from sr_control.operate import plan as planning
from sr_control.operate.live import SIDECAR_STATUS, XDS_STATUS, Unreachable, get, get_json, get_text, legacy_forms

EXIT_RISKY = 3


def live_source(xds: str) -> tuple[str, str]:
    """(version, source text) of what the control plane serves now."""
    doc = get_json(xds, "/versions")
    version = doc.get("live")
    if not version:
        raise Unreachable(f"{xds}: the control plane serves no version yet")
    status, body = get(xds, f"/versions/{version}")
    if status != 200:
        raise Unreachable(f"{xds}: the source of the live version {version} is not kept (GET /versions/{version})")
    return str(version), body.decode("utf-8")


def live_legacy(sidecars: list[str]) -> dict[str, int] | None:
    """Listener -> 4.0-only requests the sidecars counted; None when one does not answer."""
    total: dict[str, int] = {}
    for address in sidecars:
        try:
            forms = legacy_forms(get_text(address, "/metrics"))
        except Unreachable:
            return None
        for listener, counts in forms.items():
            total[listener] = total.get(listener, 0) + sum(counts.values())
    return total


def _problems(exc: planning.Invalid) -> None:
    for p in exc.problems:
        field = f" {p['path']}:" if p.get("path") else ""
        typer.echo(f"{p['file']}:{p.get('line', 0)}:{p.get('column', 0)}:{field} {p['message']}", err=True)


def plan(
    file: Annotated[Path, typer.Argument(help="The edited config.", show_default=False)],
    against: Annotated[
        str,
        typer.Option(
            metavar="HOST:PORT|OLD_FILE",
            help="Compare with what a control plane serves (its status port) or with a config file.",
        ),
    ] = XDS_STATUS,
    sidecar: Annotated[
        list[str] | None,
        typer.Option(
            "--sidecar",
            metavar="HOST:PORT",
            help=f"Sidecar status ports whose 4.0-only form counters are read (default {SIDECAR_STATUS}).",
            show_default=False,
        ),
    ] = None,
    format: FormatOption = Format.text,
) -> None:
    """Validate FILE and show what would change if it went live.

    Lists the listeners, routes, clusters and sidecar data added, changed (with the fields that
    differ) and removed, the models and members gained or lost per listener, and warns of risky
    changes: a listener or an API removed, a schema switch from 4.0 to 5.0 while clients still
    send 4.0-only forms (read from the sidecars' counters; unknown against a file, so risky).

    Exit 0 when nothing is risky, 3 when something is, 1 when FILE is invalid, 2 when a file
    or the control plane cannot be read.

    \b
    Example:
      vllm-sr config plan router.yaml                       # against the live control plane
      vllm-sr config plan router.yaml --against old.yaml --format json
    """
    try:
        new_text = loader.read_text(file)
    except ConfigUnreadable as exc:
        raise fail(str(exc), EXIT_UNREADABLE) from None
    legacy: dict[str, int] | None = None
    if Path(against).is_file():
        old_text, old_name = loader.read_text(Path(against)), against
    else:
        try:
            version, old_text = live_source(against)
        except Unreachable as exc:
            raise fail(f"error: cannot read the live config: {exc}", EXIT_UNREADABLE) from None
        old_name = f"live {version} ({against})"
        legacy = live_legacy(sidecar or [SIDECAR_STATUS])
    try:
        result = planning.plan(new_text, str(file), old_text, old_name, legacy=legacy)
    except planning.Invalid as exc:
        _problems(exc)
        raise fail(f"{file}: invalid; nothing to plan", EXIT_INVALID) from None
    _print(result, planning.render, format)
    raise typer.Exit(EXIT_RISKY if result["risky"] else EXIT_OK)


def _print(result: dict[str, Any], render: Any, format: Format) -> None:
    typer.echo(json.dumps(result, indent=2) if format is Format.json else render(result))
