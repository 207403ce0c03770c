"""structlog set-up shared by every command and server: key=value lines or JSON on stderr."""

from __future__ import annotations

import logging
import sys
from typing import Literal

import structlog

LogFormat = Literal["console", "json"]


def configure(level: str = "info", fmt: LogFormat = "console") -> None:
    numeric = logging.getLevelName(level.upper())
    if not isinstance(numeric, int):
        raise ValueError(f"unknown log level {level!r} (debug, info, warning, error)")
    renderer: structlog.typing.Processor
    if fmt == "json":
        renderer = structlog.processors.JSONRenderer()
    else:
        # Plain tracebacks: the default draws them with rich, locals and all, which took minutes
        # for a deep one and held a server's event loop meanwhile (docs/reliability.md).
        renderer = structlog.dev.ConsoleRenderer(
            colors=sys.stderr.isatty(), exception_formatter=structlog.dev.plain_traceback
        )
    structlog.configure(
        processors=[
            structlog.contextvars.merge_contextvars,
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="iso", utc=True),
            renderer,
        ],
        wrapper_class=structlog.make_filtering_bound_logger(numeric),
        logger_factory=_stderr_logger,
        cache_logger_on_first_use=False,
    )


def _stderr_logger(*args: object) -> structlog.PrintLogger:
    # sys.stderr as it is when a line is logged, not when logging was configured: a test that
    # captures stderr and closes it must not break every later log line.
    return structlog.PrintLogger(file=sys.stderr)


def get_logger(name: str) -> structlog.typing.FilteringBoundLogger:
    return structlog.get_logger(name)
