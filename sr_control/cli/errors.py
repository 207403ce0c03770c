"""The one place where library errors become messages and exit codes.

Exit codes: 0 success; 1 the input is invalid (or, for checks, something is due); 2 the input
could not be read or used at all. A user error never prints a traceback.
"""

from __future__ import annotations

import sys

import typer

from sr_control.config.errors import ConfigError, ConfigUnreadable

EXIT_OK, EXIT_INVALID, EXIT_UNREADABLE = 0, 1, 2


def fail(message: str, code: int = EXIT_INVALID) -> typer.Exit:
    typer.echo(message, err=True)
    return typer.Exit(code)


def run(app: typer.Typer) -> None:
    try:
        app(standalone_mode=True)
    except ConfigUnreadable as exc:
        typer.echo(str(exc), err=True)
        sys.exit(EXIT_UNREADABLE)
    except ConfigError as exc:
        for problem in exc.problems:
            typer.echo(str(problem), err=True)
        sys.exit(EXIT_INVALID)
    except KeyboardInterrupt:
        sys.exit(130)
