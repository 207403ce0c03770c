"""``vllm-srun``: the model runtime's command line. Thin: parse flags, call the library, print.

Exit codes: 0 answered; 1 the request is invalid or a question could not be answered; 2 the
model or the request file cannot be used at all. A user error never prints a traceback.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Annotated, Optional

import typer

from sr_runtime.errors import CheckpointError, DecisionError

EXIT_OK, EXIT_INVALID, EXIT_UNUSABLE = 0, 1, 2

app = typer.Typer(
    name="vllm-srun",
    help="Serve and run decision models over the System One API.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,
)
checkpoint_app = typer.Typer(help="Create and check decision checkpoints.", no_args_is_help=True)
app.add_typer(checkpoint_app, name="checkpoint")


@app.callback()
def root() -> None:
    """Serve and run decision models over the System One API."""


def _fail(message: str, code: int) -> typer.Exit:
    typer.echo(message, err=True)
    return typer.Exit(code)


def _read_json(path: Path) -> object:
    try:
        text = sys.stdin.read() if str(path) == "-" else path.read_text(encoding="utf-8")
        return json.loads(text)
    except OSError as exc:
        raise _fail(f"{path}: cannot read: {exc.strerror}", EXIT_UNUSABLE) from None
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise _fail(f"{path}: not JSON: {exc}", EXIT_UNUSABLE) from None


@app.command()
def answer(
    model: Annotated[str, typer.Argument(help="A checkpoint folder, or a built-in: default, smollm2-135m.", show_default=False)],
    request: Annotated[Path, typer.Argument(help="A systemone/0.2 request as JSON ('-' reads stdin).", show_default=False)],
    device: Annotated[str, typer.Option(help="Where the model runs: cpu, cuda, cuda:1 ...")] = "cpu",
    reference: Annotated[bool, typer.Option("--reference", help="Run each question as one whole forward with a dense mask and no cache.")] = False,
    no_state_cache: Annotated[bool, typer.Option("--no-state-cache", help="Keep no states across requests (each request still computes its state once).")] = False,
    max_model_len: Annotated[Optional[int], typer.Option(help="Longest prompt in tokens (default: the checkpoint's validated_length, else max_length).")] = None,
) -> None:
    """Answer a System One request offline and print the standard response.

    Exit 0 with the response on stdout; 1 with the standard error body on stdout when the
    request is invalid or a question cannot be answered; 2 when MODEL or REQUEST is unusable.
    """
    from sr_runtime.loader import load_engine
    from sr_runtime.request import error_json, first_error, read_request, response_json

    body = _read_json(request)
    try:
        parsed = read_request(body)
    except DecisionError as exc:
        typer.echo(json.dumps(error_json(None, exc), ensure_ascii=False, indent=2))
        raise _fail(f"{request}: {exc}", EXIT_INVALID) from None
    engine = load_engine(
        model, device=device, max_model_len=max_model_len, reference=reference, state_cache=not no_state_cache
    )
    result = engine.answer_batch([parsed.request])[0]
    failed = first_error(parsed.ids, result)
    if failed is not None:
        qid, error = failed
        typer.echo(json.dumps(error_json(qid, error), ensure_ascii=False, indent=2))
        raise _fail(f"question {qid!r} cannot be answered: {error.message} ({error.code})", EXIT_INVALID)
    typer.echo(json.dumps(response_json(engine.name, parsed.ids, result), ensure_ascii=False, indent=2))


@checkpoint_app.command("create")
def checkpoint_create(
    folder: Annotated[Path, typer.Argument(help="Where to write the checkpoint (created if missing).", show_default=False)],
    preset: Annotated[str, typer.Option(help="hybrid-prefix-bidir, hybrid-causal, hybrid-noncausal, llama-causal or llama-prefix-bidir.", show_default=False)],
    seed: Annotated[int, typer.Option(help="Seed for the random weights; the same seed writes the same bytes.")] = 0,
) -> None:
    """Write a tiny random decision checkpoint (for tests and benchmarks)."""
    from sr_runtime.presets import PRESETS, create

    if preset not in PRESETS:
        raise _fail(f"unknown preset {preset!r} (presets: {', '.join(PRESETS)})", EXIT_INVALID)
    create(folder, preset, seed)
    typer.echo(f"{folder}: {preset} (seed {seed}): {PRESETS[preset].summary}")


@checkpoint_app.command("check")
def checkpoint_check(
    folder: Annotated[Path, typer.Argument(help="A checkpoint folder.", show_default=False)],
) -> None:
    """Check a folder's decision_config.json and tokenizer the way start-up does (weights not loaded)."""
    from sr_runtime.checkpoint import read_checkpoint

    checkpoint = read_checkpoint(folder)
    config = checkpoint.config
    reading = "zero-shot (no decision_config.json)" if checkpoint.zero_shot else f"{len(config.codes)} codes"
    typer.echo(
        f"{folder}: ok: {reading}, {config.attention_mode}, layout {config.prompt_layout}, "
        f"max_length {config.max_length}, validated_length {config.validated_length}"
    )


def main() -> None:
    try:
        app(standalone_mode=True)
    except CheckpointError as exc:
        typer.echo(str(exc), err=True)
        sys.exit(EXIT_UNUSABLE)
    except KeyboardInterrupt:
        sys.exit(130)
