"""``vllm-sr request``: send one request through a listener and show the answers."""

from __future__ import annotations

import json
import sys
from enum import StrEnum
from pathlib import Path
from typing import Annotated, Any

import httpx
import typer

from sr_control.cli.errors import EXIT_INVALID, EXIT_OK, EXIT_UNREADABLE, fail
from sr_control.operate.live import XDS_STATUS, Unreachable, get_json
from sr_control.operate.request import render, send, summarize


class RequestFormat(StrEnum):
    text = "text"
    json = "json"  # the body as it came
    summary = "summary"  # what text shows, as JSON


def _plane(xds: str) -> dict[str, Any] | None:
    """The control plane's /status, to name the config version; None when it does not answer."""
    try:
        doc = get_json(xds, "/status", timeout=2.0)
    except Unreachable:
        return None
    return doc if isinstance(doc, dict) else None


def request(
    file: Annotated[str, typer.Argument(help="The request body (JSON); - reads standard input.", metavar="FILE|-")],
    listener: Annotated[
        str, typer.Option("--listener", "-l", metavar="URL", help="The listener, e.g. http://127.0.0.1:8801.")
    ],
    path: Annotated[
        str | None,
        typer.Option(
            help="The path to POST to. Default: /v1/systemone for a System One body, /v1/chat/completions otherwise.",
            show_default=False,
        ),
    ] = None,
    header: Annotated[
        list[str] | None,
        typer.Option("--header", "-H", metavar="NAME:VALUE", help="A header to send (repeat for several)."),
    ] = None,
    timeout: Annotated[float, typer.Option(help="Seconds to wait for the answer.", min=0.1)] = 60.0,
    xds: Annotated[
        str,
        typer.Option(
            "--xds",
            metavar="HOST:PORT",
            help="The control plane's status port, asked which config version the listener version is.",
        ),
    ] = XDS_STATUS,
    format: Annotated[
        RequestFormat,
        typer.Option(
            "--format", "-f", help="text for people; json: the body as it came; summary: text's facts as JSON."
        ),
    ] = RequestFormat.text,
) -> None:
    """Send a request through a listener and show the answers.

    Prints the answers, the member that answered (x-vsr-member), the request id (to find it in
    the logs) and two versions named apart: the listener version the answer carries
    (x-vsr-config-version: the version of that listener's part of the config) and the config
    version it belongs to, asked of the control plane (--xds). --format json prints the body
    as it came; --format summary prints what text shows, as JSON.

    Exit 0 on a 2xx answer, 1 on any other status, 2 when the file or the listener cannot be used.

    \b
    Example:
      vllm-sr request --listener http://127.0.0.1:8801 examples/requests/seed-002-curl.json
      echo '{"state": "hi", "questions": {"q": {"type": "noul", "instructions": "Greeting?"}}}' \\
        | vllm-sr request -l http://127.0.0.1:8801 -
    """
    try:
        body = sys.stdin.buffer.read() if file == "-" else Path(file).read_bytes()
    except OSError as exc:
        raise fail(f"error: cannot read {file}: {exc.strerror}", EXIT_UNREADABLE) from None
    try:
        json.loads(body)
    except ValueError as exc:
        raise fail(f"error: {file} is not JSON: {exc}", EXIT_UNREADABLE) from None
    headers = {}
    for h in header or []:
        name, sep, value = h.partition(":")
        if not sep:
            raise fail(f"error: --header {h!r}: give NAME:VALUE", EXIT_UNREADABLE)
        headers[name.strip()] = value.strip()
    try:
        reply = send(listener, body, path=path, headers=headers, timeout=timeout)
    except httpx.HTTPError as exc:
        raise fail(f"error: the listener does not answer: {listener}: {exc}", EXIT_UNREADABLE) from None
    if format is RequestFormat.json:
        typer.echo(reply.body.decode("utf-8", "replace").rstrip("\n"))
    else:
        summary = summarize(reply, _plane(xds) if "x-vsr-config-version" in reply.headers else None)
        typer.echo(json.dumps(summary, indent=2) if format is RequestFormat.summary else render(summary, xds))
    raise typer.Exit(EXIT_OK if 200 <= reply.status < 300 else EXIT_INVALID)
