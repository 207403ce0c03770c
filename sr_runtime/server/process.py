"""Running the app as a process: checks that need no weights, the socket, uvicorn, the exit code.

Everything that can be refused without loading the model is refused before the socket opens,
each as one line (an unknown model, a device torch cannot use, a missing API key variable, a
port in use); then the model loads in the background while the server already answers.

`--workers N` runs N such servers under this process (``sr_base/workers.py``, the supervisor the
sidecar's workers run under too), each with its own model. Python runs one thread of a process
at a time, so in one server the event loop's work (HTTP, codec, replies) and the engine thread's
take turns: under load a round of the engine waits while the loop writes the last round's
replies. N processes answer concurrent clients side by side (docs/runtime/server.md). This
process binds the socket, each worker inherits it and accepts from it, and the URL is
announced once every worker has loaded its model: until then connections wait in the socket's
backlog.
"""

from __future__ import annotations

import os
import socket
from typing import Any

import uvicorn

from sr_base.log import get_logger
from sr_base.workers import Report, Workers
from sr_runtime.errors import CheckpointError
from sr_runtime.loader import check_device, check_model
from sr_runtime.server.app import create_app, engine_loader
from sr_runtime.server.runtime import load_failure
from sr_runtime.server.settings import ServerSettings
from sr_runtime.server.threads import math_threads

log = get_logger("vllm-srun.server")
STOP_S = 15.0  # a worker's graceful stop (uvicorn's 5 s, the engine's round) before it is killed


def api_key(env_var: str | None) -> str | None:
    """The key in ``env_var`` (auth on), or None (auth off); CheckpointError when it is unset."""
    if env_var is None:
        return None
    key = os.environ.get(env_var, "")
    if not key.strip():
        raise CheckpointError(f"--api-key-env {env_var}: the variable is not set or empty")
    return key.strip()


def bind(host: str, port: int) -> socket.socket:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    # proto IPPROTO_TCP, not 0: asyncio turns Nagle off only on sockets that say they are TCP, and
    # with Nagle on, every keep-alive response waits ~40 ms for the client's delayed ACK.
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError as exc:
        sock.close()
        raise CheckpointError(f"cannot listen on {host}:{port}: {exc.strerror}") from None
    sock.listen(2048)
    return sock


def server_config(app: Any) -> uvicorn.Config:
    # uvloop and httptools: the event loop and HTTP parser in C (measured in docs/runtime/server.md).
    return uvicorn.Config(
        app,
        loop="uvloop",
        http="httptools",
        log_level="warning",
        access_log=False,
        lifespan="on",
        timeout_graceful_shutdown=5,
    )


def url_of(sock: socket.socket) -> str:
    host, port = sock.getsockname()[:2]
    return f"http://[{host}]:{port}" if ":" in host else f"http://{host}:{port}"


def serve(settings: ServerSettings) -> int:
    """Serve until interrupted; 0 after a clean stop, 2 when the model failed to load."""
    name = check_model(settings.model, settings.max_model_len)
    check_device(settings.device)
    threads = math_threads(settings)
    sock = bind(settings.host, settings.port)
    if settings.workers > 1:
        return _serve_workers(settings, sock, name)
    if threads is not None:
        import torch

        torch.set_num_threads(threads.light)  # the scheduler sets each round's (threads.py)
    failed: list[str] = []

    def stop(message: str) -> None:
        failed.append(message)
        server.should_exit = True

    server = uvicorn.Server(server_config(create_app(settings, on_failure=stop)))
    log.info(
        "serving",
        model=name,
        schema=settings.schema,
        url=url_of(sock),
        auth=settings.api_key is not None,
        threads=None if threads is None else f"{threads.light}-{threads.heavy}",
    )
    server.run(sockets=[sock])
    if failed:
        raise CheckpointError(failed[0])
    return 0


def _serve_workers(settings: ServerSettings, sock: socket.socket, name: str) -> int:
    """settings.workers processes on ``sock`` until SIGTERM/SIGINT; 0 after a stop, 1 when a
    worker died; CheckpointError when a model failed to load."""
    with Workers(settings.workers, _worker, settings, sock, name="vllm-srun", stop_s=STOP_S) as workers:
        failure = _wait_loaded(workers)
        if failure is not None:
            raise CheckpointError(failure)
        threads = math_threads(settings)
        log.info(
            "serving",
            model=name,
            schema=settings.schema,
            url=url_of(sock),
            auth=settings.api_key is not None,
            workers=settings.workers,
            threads=None if threads is None else threads.light,
        )
        codes = workers.watch(every_s=0.5)
        if codes is not None:
            log.error("a worker stopped; stopping the others", exit_codes=codes)
            return 1
        return 0


def _wait_loaded(workers: Workers) -> str | None:
    """None once every worker has loaded its model; else why one could not."""
    while not workers.stopping.wait(0.1):
        exited = workers.exited()  # before the reports: a worker reports, then exits
        reports = workers.reports()
        failure = next((r["failure"] for r in reports if r is not None and "failure" in r), None)
        if failure is not None:
            return str(failure)
        if all(r is not None for r in reports):
            return None
        if exited:
            return f"worker {exited[0].name} exited ({exited[0].exitcode}) while loading the model"
    return "stopped while the workers loaded the model"


def _worker(index: int, report: Report, settings: ServerSettings, sock: socket.socket) -> None:
    """One server process: load the model, say so, then serve until SIGTERM."""
    threads = math_threads(settings)
    if threads is not None:  # before the load: a built-in's ONNX reader takes torch's count
        import torch

        torch.set_num_threads(threads.light)
    try:
        engine, released = engine_loader(settings)()
    except Exception as exc:  # noqa: BLE001 - reported to the supervisor, which exits 2
        report({"failure": load_failure(settings.model, exc)})
        return
    server = uvicorn.Server(server_config(create_app(settings, load=lambda: (engine, released))))
    report({"loaded": True})
    server.run(sockets=[sock])
