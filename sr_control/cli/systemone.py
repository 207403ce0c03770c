"""``vllm-sr systemone``: why a listener refuses a request, and what a client codec would send."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Annotated, Any

import typer

from sr_control.cli.errors import EXIT_INVALID, EXIT_OK, EXIT_UNREADABLE, fail
from systemone import REGISTRY, Policy, ProtocolError, Target
from systemone.ir import describe
from systemone.jsontext import loads, plain
from systemone.listener import PATHS
from systemone.schemas import DEVIATIONS, UnknownSchemaError

app = typer.Typer(help="Check requests as a listener or client codec would.", no_args_is_help=True)

FileArg = Annotated[Path, typer.Argument(help="The request body (JSON); - reads standard input.", show_default=False)]


def _body(file: Path) -> bytes:
    if str(file) == "-":
        return sys.stdin.buffer.read()
    try:
        return file.read_bytes()
    except OSError as exc:
        raise fail(f"{file}: error: cannot read: {exc.strerror or exc}", EXIT_UNREADABLE) from None


def _headers(values: list[str]) -> list[tuple[str, str]]:
    out = []
    for value in values:
        name, sep, rest = value.partition(":")
        if not sep or not name.strip():
            raise fail(f"--header {value!r}: expected NAME: VALUE", EXIT_UNREADABLE)
        out.append((name.strip(), rest.strip()))
    return out


def _print(doc: dict[str, Any]) -> None:
    typer.echo(json.dumps(doc, indent=2, ensure_ascii=False))


@app.command()
def check(
    file: FileArg,
    schema: Annotated[
        str,
        typer.Option(
            "--schema", help="The listener's schema: vllm-sr/5.0, vllm-sr/4.0 or systemone/0.2.", show_default=False
        ),
    ],
    path: Annotated[str, typer.Option("--path", help=f"The request path: {', '.join(PATHS)}.")] = "/v1/systemone",
    header: Annotated[
        list[str] | None, typer.Option("--header", "-H", help="A request header, NAME: VALUE (repeatable).")
    ] = None,
) -> None:
    """Decide a request exactly as a listener with SCHEMA would, and print why.

    Prints JSON {"status", "plan", "legacy_forms", "ir", "internal", "error"}. Exit 0 when the
    listener accepts the request, 1 when it refuses it, 2 when FILE or SCHEMA is unusable.
    """
    try:
        codec = REGISTRY.listener(schema)
    except UnknownSchemaError as exc:
        raise fail(f"error: --schema: {exc}", EXIT_UNREADABLE) from None
    # Typer gives None, not [], when --header is absent.
    body, headers = _body(file), _headers(header or [])
    try:
        req = codec.read(path, body, headers)
    except ProtocolError as exc:
        answer = codec.answer_error(exc)
        error = {"status": answer.status, "headers": dict(answer.headers), "body": json.loads(answer.body)}
        _print({"status": "refused", "plan": None, "legacy_forms": [], "ir": None, "internal": None, "error": error})
        raise typer.Exit(EXIT_INVALID) from None
    plan = {
        "kind": req.plan.kind,
        "upstream_path": req.plan.path,
        "forwards": "the client's bytes" if req.plan.kind == "passthrough" else "the internal form",
    }
    internal = req.plan.body.decode("utf-8") if req.plan.kind == "convert" else None
    _print(
        {
            "status": "accepted",
            "plan": plan,
            "legacy_forms": list(req.legacy_forms),
            "ir": plain(describe(req.ir)),
            "internal": internal,
            "error": None,
        }
    )
    raise typer.Exit(EXIT_OK)


@app.command()
def plan(
    file: FileArg,
    target: Annotated[
        str, typer.Option("--target", help="The upstream's schema: systemone/0.2 or vllm-sr/5.0.", show_default=False)
    ],
    deviation: Annotated[
        list[str] | None,
        typer.Option("--deviation", help=f"A deviation to apply ({', '.join(DEVIATIONS)}); repeatable."),
    ] = None,
    max_concurrency: Annotated[
        int, typer.Option("--max-concurrency", min=1, max=1024, help="Split calls running at once.")
    ] = 8,
    deadline_ms: Annotated[int | None, typer.Option("--deadline-ms", min=1, help="The caller's deadline.")] = None,
    model: Annotated[str | None, typer.Option("--model", help="The deployment's model name.")] = None,
    listener: Annotated[str, typer.Option("--listener", help="The schema FILE is read in.")] = "vllm-sr/5.0",
    path: Annotated[str, typer.Option("--path", help="The path FILE was sent to.")] = "/v1/systemone",
) -> None:
    """Print the wire calls a client codec would make for a request.

    Exit 0 with the calls, 1 when the request is refused (read or planned), 2 on unusable input.
    """
    deviations = tuple(deviation or ())
    try:
        codec, client = REGISTRY.listener(listener), REGISTRY.client(target)
        for name in deviations:
            if not REGISTRY.deviation(name).applies(target):
                raise fail(f"error: --deviation {name} does not apply to {target}", EXIT_UNREADABLE)
    except UnknownSchemaError as exc:
        raise fail(f"error: {exc}", EXIT_UNREADABLE) from None
    try:
        req = codec.read(path, _body(file), ())
        call_plan = client.plan(
            req.ir, Target(target, model, deviations, max_concurrency, "/v1/systemone"), Policy(deadline_ms)
        )
    except ProtocolError as exc:
        answer = codec.answer_error(exc)
        _print({"target": target, "calls": [], "error": {"status": answer.status, "body": json.loads(answer.body)}})
        raise typer.Exit(EXIT_INVALID) from None
    calls = [
        {
            "method": c.method,
            "path": c.path,
            "headers": dict(c.headers),
            "answers": list(c.items),
            "body": c.body.decode("utf-8"),
            "json": plain(loads(c.body)),
        }
        for c in call_plan.calls
    ]
    _print(
        {
            "target": target,
            "max_concurrency": call_plan.max_concurrency,
            "deadline_ms": call_plan.deadline_ms,
            "diagnostics": list(call_plan.diagnostics),
            "calls": calls,
        }
    )
