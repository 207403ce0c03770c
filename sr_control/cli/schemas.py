"""``vllm-sr schemas``: generate and check the files derived from the System One specs."""

from __future__ import annotations

import json
from enum import StrEnum
from pathlib import Path
from typing import Annotated

import httpx
import typer

from sr_control.cli.errors import EXIT_INVALID, EXIT_OK, EXIT_UNREADABLE, fail
from systemone import drift as drift_lib
from systemone.generator import outputs
from systemone.specs import SPEC_DIR, SPEC_FILES, STANDARD_FILE, SpecError, SpecSet, parse_specs

app = typer.Typer(help="Generate and check the files derived from the System One specs.", no_args_is_help=True)

_REPO = Path(__file__).resolve().parents[2]
RootOption = Annotated[
    Path,
    typer.Option(
        "--root",
        help="The folder holding systemone/ (a checkout, or site-packages), whose systemone/spec holds the specs.",
    ),
]


class Format(StrEnum):
    text = "text"
    json = "json"


def _specs(root: Path) -> SpecSet:
    texts = {}
    for file in SPEC_FILES.values():
        path = root / SPEC_DIR / file
        try:
            texts[file] = path.read_text(encoding="utf-8")
        except OSError as exc:
            raise fail(f"{path}: error: cannot read: {exc.strerror or exc}", EXIT_UNREADABLE) from None
    try:
        return parse_specs(texts)
    except SpecError as exc:
        raise fail(f"{root / SPEC_DIR}/{exc}", EXIT_UNREADABLE) from None


def _current(path: Path) -> str | None:
    try:
        return path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return None


@app.command()
def generate(root: RootOption = _REPO) -> None:
    """Write the field tables, strip list, runtime field table, round-trip corpus and reference page.

    Refuses (exit 1, nothing written) while two specs give one field two meanings.
    """
    specs = _specs(root)
    conflicts = specs.conflicts()
    if conflicts:
        for line in conflicts:
            typer.echo(f"{SPEC_DIR}: error: {line}", err=True)
        raise fail("nothing was written: fix the specs first")
    for rel, text in outputs(specs).items():
        path = root / rel
        if _current(path) == text:
            typer.echo(f"unchanged {rel}")
            continue
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
        typer.echo(f"wrote {rel}")


@app.command()
def check(root: RootOption = _REPO) -> None:
    """Fail when a generated file is stale or two specs give one field two meanings.

    Exit 0 when all is current, 1 otherwise (each problem on its own line).
    """
    specs = _specs(root)
    problems = [f"{SPEC_DIR}: error: {line}" for line in specs.conflicts()]
    generated = outputs(specs)
    for rel, text in generated.items():
        current = _current(root / rel)
        if current != text:
            state = "missing" if current is None else "stale"
            problems.append(f"{rel}: error: {state}; run `vllm-sr schemas generate`")
    for line in problems:
        typer.echo(line, err=True)
    if problems:
        raise typer.Exit(EXIT_INVALID)
    typer.echo(f"schemas: {len(SPEC_FILES)} specs agree; {len(generated)} generated files are current")


@app.command()
def drift(
    source: Annotated[
        str,
        typer.Argument(
            help=(
                "A published document: a file or an http(s) URL (OpenAPI JSON/YAML, or the SDK's generated models.py)."
            ),
            show_default=False,
        ),
    ],
    root: RootOption = _REPO,
    format: Annotated[Format, typer.Option("--format", "-f", help="text for people, json for programs.")] = Format.text,
) -> None:
    """Compare the systemone/0.2 description with a published document and print what differs.

    Exit 0 when nothing differs, 1 when something does, 2 when a document cannot be read.
    """
    ours = _specs(root).texts[STANDARD_FILE]
    text = _fetch(source)
    try:
        lines = drift_lib.drift(ours, text)
    except (drift_lib.DriftError, ValueError) as exc:
        raise fail(f"{source}: error: {exc}", EXIT_UNREADABLE) from None
    if format is Format.json:
        typer.echo(json.dumps({"source": source, "differences": lines}, indent=2))
    else:
        for line in lines:
            typer.echo(line)
        typer.echo(f"{source}: {len(lines)} difference{'s' if len(lines) != 1 else ''} from {SPEC_DIR}/{STANDARD_FILE}")
    raise typer.Exit(EXIT_INVALID if lines else EXIT_OK)


def _fetch(source: str) -> str:
    if source.startswith(("http://", "https://")):
        try:
            response = httpx.get(source, timeout=30.0, follow_redirects=True)
            response.raise_for_status()
        except httpx.HTTPError as exc:
            raise fail(f"{source}: error: cannot fetch: {exc}", EXIT_UNREADABLE) from None
        return response.text
    try:
        return Path(source).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise fail(f"{source}: error: cannot read: {getattr(exc, 'strerror', None) or exc}", EXIT_UNREADABLE) from None
