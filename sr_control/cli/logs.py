"""``vllm-sr logs``: the logs of a ``vllm-sr serve`` stack, by part or by request id."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Annotated

import typer

from sr_control.cli.errors import EXIT_OK, EXIT_UNREADABLE, fail
from sr_control.operate.logs import last, parts, tail


def logs(
    part: Annotated[
        list[str] | None,
        typer.Argument(
            help="envoy, extproc or runtime (several allowed). Default: every part.", metavar="PART", show_default=False
        ),
    ] = None,
    state_dir: Annotated[
        Path, typer.Option(help="The stack's state directory (vllm-sr serve --state-dir).", metavar="DIR")
    ] = Path(".vllm-sr"),
    request_id: Annotated[
        str | None,
        typer.Option(
            "--request-id",
            metavar="ID",
            help="Only the lines that name this request id (vllm-sr request prints it).",
            show_default=False,
        ),
    ] = None,
    lines: Annotated[int, typer.Option("--lines", "-n", help="How many lines of each part.", min=0)] = 50,
    follow: Annotated[
        bool, typer.Option("--follow", "-f", help="Then print new lines as they come, until Ctrl-C.")
    ] = False,
) -> None:
    """Show the stack's logs, each line after its part's name.

    Every part of `vllm-sr serve` (Envoy with its access log, the ext_proc sidecar, the runtime)
    writes DIR/logs/PART.log; the control plane logs on the terminal `vllm-sr serve` runs in.
    With --request-id, the lines of every part that name the request (Envoy's access log line,
    and whatever the sidecar and the runtime logged of it): one request followed through.

    Exit 0; 2 when DIR holds no logs or a part is unknown.

    \b
    Example:
      vllm-sr logs envoy -n 20
      vllm-sr logs --request-id 1b58468a-ae84-4962-b8f4-987c85ecc7b0
      vllm-sr logs extproc --follow
    """
    folder = state_dir / "logs"
    found = parts(folder)
    if not found:
        raise fail(f"error: no logs under {folder} (is --state-dir the stack's?)", EXIT_UNREADABLE)
    unknown = sorted(set(part or ()) - found.keys())
    if unknown:
        raise fail(
            f"error: no log of {', '.join(unknown)} under {folder}; there are {', '.join(found)}", EXIT_UNREADABLE
        )
    chosen = {name: path for name, path in found.items() if not part or name in part}
    width = max(len(name) for name in chosen)
    for name, path in chosen.items():
        shown = last(path, request_id, lines) if request_id else tail(path, lines)
        for line in shown:
            typer.echo(f"{name:<{width}} | {line}")
    if follow:
        _follow(chosen, width, request_id)
    raise typer.Exit(EXIT_OK)


def _follow(chosen: dict[str, Path], width: int, request_id: str | None) -> None:
    """Print what each log gains, as ``tail -f`` does; a log started anew is read from its start."""
    offsets = {name: path.stat().st_size for name, path in chosen.items()}
    try:
        while True:
            for name, path in chosen.items():
                try:
                    size = path.stat().st_size
                except FileNotFoundError:
                    continue
                if size < offsets[name]:
                    offsets[name] = 0  # the stack started again and truncated it
                if size == offsets[name]:
                    continue
                with open(path, "rb") as f:
                    f.seek(offsets[name])
                    data = f.read(size - offsets[name])
                complete = data.rfind(b"\n") + 1  # a line still being written waits for its end
                offsets[name] += complete
                for raw in data[:complete].splitlines():
                    line = raw.decode("utf-8", "replace")
                    if request_id is None or request_id in line:
                        typer.echo(f"{name:<{width}} | {line}")
            time.sleep(0.25)
    except KeyboardInterrupt:
        pass
