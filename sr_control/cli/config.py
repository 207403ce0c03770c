"""``vllm-sr config``: validate, migrate, explain and export the router config."""

from __future__ import annotations

import json
import sys
from enum import StrEnum
from pathlib import Path
from typing import Annotated

import typer

from sr_control.cli.compile import compile_command
from sr_control.cli.errors import EXIT_INVALID, EXIT_OK, EXIT_UNREADABLE, fail
from sr_control.config import load as loader
from sr_control.config.errors import ConfigError, ConfigUnreadable, Problem
from sr_control.config.explain import explain as explain_config
from sr_control.config.explain import explain_text
from sr_control.config.migrate import MigrationRefused, migrate_text, write_atomic
from sr_control.config.model import RouterConfig

app = typer.Typer(help="Check, migrate, plan, apply and roll back configs.", no_args_is_help=True)
app.command("compile")(compile_command)


class Format(StrEnum):
    text = "text"
    json = "json"


FormatOption = Annotated[Format, typer.Option("--format", "-f", help="text for people, json for programs.")]


@app.command()
def validate(
    files: Annotated[list[Path], typer.Argument(help="Config files to check.", show_default=False)],
    format: FormatOption = Format.text,
) -> None:
    """Check config files; report every problem as FILE:LINE:COL.

    Exit 0 when all are valid, 1 when any is invalid, 2 when any cannot be read.
    """
    code = EXIT_OK
    results = []
    for path in files:
        try:
            report = loader.validate_text(loader.read_text(path), str(path))
        except ConfigUnreadable as exc:
            code = max(code, EXIT_UNREADABLE)
            results.append(
                {
                    "path": str(path),
                    "valid": False,
                    "errors": [{"line": 0, "column": 0, "path": "", "message": f"cannot read: {exc.reason}"}],
                    "warnings": [],
                }
            )
            if format is Format.text:
                typer.echo(str(exc))
            continue
        if not report.valid:
            code = max(code, EXIT_INVALID)
        results.append(
            {
                "path": str(path),
                "valid": report.valid,
                "errors": [_json_problem(p) for p in report.errors],
                "warnings": [_json_problem(p) for p in report.problems if p.severity == "warning"],
            }
        )
        if format is Format.text:
            for problem in report.problems:
                typer.echo(str(problem))
            n = len(report.errors)
            typer.echo(f"{path}: valid" if report.valid else f"{path}: {n} error{'s' if n != 1 else ''}")
    if format is Format.json:
        typer.echo(json.dumps({"files": results}, indent=2))
    raise typer.Exit(code)


def _json_problem(problem: Problem) -> dict[str, object]:
    out = problem.as_json()
    out.pop("severity")
    return out


@app.command()
def migrate(
    file: Annotated[Path, typer.Argument(help="The config file to migrate.", show_default=False)],
    output: Annotated[Path | None, typer.Option("--output", "-o", help="Write the result here.")] = None,
    in_place: Annotated[bool, typer.Option("--in-place", "-i", help="Rewrite FILE itself (atomically).")] = False,
    check: Annotated[
        bool, typer.Option("--check", help="Only tell whether a migration is due: exit 1 if it is.")
    ] = False,
) -> None:
    """Migrate a config to the current format.

    Keeps comments, key order and quoting. Without -o or --in-place the result is printed. Running it
    twice changes nothing.
    """
    if output is not None and in_place:
        raise fail("error: give either --output or --in-place, not both", EXIT_UNREADABLE)
    text = loader.read_text(file)
    try:
        result = migrate_text(text, str(file))
    except MigrationRefused as exc:
        raise fail(str(exc.problem), EXIT_UNREADABLE) from None
    except ConfigError as exc:
        for problem in exc.problems:
            typer.echo(str(problem), err=True)
        raise fail(f"{file}: not migrated: fix the errors above first; nothing was written", EXIT_INVALID) from None
    if check:
        if result.due:
            typer.echo(f"{file}: migration due (format {result.from_version} -> {result.to_version})")
            raise typer.Exit(EXIT_INVALID)
        typer.echo(f"{file}: up to date (format {result.to_version})")
        raise typer.Exit(EXIT_OK)
    for note in result.notes:
        typer.echo(f"{file}: {note}", err=True)
    if in_place or output is not None:
        target = file if in_place else output
        assert target is not None
        if not (in_place and not result.due):
            write_atomic(target, result.text)
        state = f"migrated format {result.from_version} -> {result.to_version}" if result.due else "already current"
        typer.echo(
            f"{file}: {state}; wrote {target}" if not (in_place and not result.due) else f"{file}: {state}; unchanged",
            err=True,
        )
    else:
        sys.stdout.write(result.text)


@app.command()
def explain(
    file: Annotated[Path, typer.Argument(help="The config file to explain.", show_default=False)],
    format: FormatOption = Format.text,
) -> None:
    """Show what each listener serves.

    For each listener: its APIs, their paths, schema, models and settings.
    """
    explained = explain_config(loader.load(file))
    if format is Format.json:
        typer.echo(json.dumps(explained, indent=2))
    else:
        typer.echo(explain_text(explained), nl=False)


@app.command()
def schema(
    output: Annotated[
        Path | None, typer.Option("--output", "-o", help="Write the JSON Schema here instead of stdout.")
    ] = None,
) -> None:
    """Print the router config's JSON Schema.

    For editors and for Helm's values.schema.json.
    """
    text = json.dumps(RouterConfig.model_json_schema(by_alias=True), indent=2) + "\n"
    if output is None:
        sys.stdout.write(text)
    else:
        write_atomic(output, text)
