"""``vllm-srun``: the model runtime's command line."""

from __future__ import annotations

import typer

app = typer.Typer(
    name="vllm-srun",
    help="Serve and run decision models over the System One API.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)


@app.callback()
def root() -> None:
    """Serve and run decision models over the System One API."""


def main() -> None:
    app()
