"""`vllm-srun serve --workers N`: N server processes on one port, each with its own model.

Python runs one thread of a process at a time, so in one server the event loop's work (HTTP,
codec, replies) and the engine thread's take turns: under load a round of the engine waits while
the loop writes the last round's replies. N processes answer concurrent clients side by side.
Each loads its own copy of the model and keeps its own state cache (N times the memory), and the
math threads are split between them. Measured on 2 cores with the tiny checkpoint: two servers
of 16 clients each answered 661-781 req/s where one server of 32 answered 376-513
(docs/runtime/server.md).

The supervisor binds the socket, starts the workers (each inherits the listening socket and
accepts from it), and announces the URL once every worker has loaded its model: until then
connections wait in the socket's backlog. Metrics are prometheus_client's multiprocess files,
so any worker's `GET /metrics` shows the sum of all of them. SIGTERM or SIGINT stops the
workers (each drains as one server does); a worker that dies stops the others, and the exit
code is 1.
"""

from __future__ import annotations

import multiprocessing
import os
import shutil
import signal
import socket
import tempfile
import threading
from queue import Empty
from typing import Any

from sr_base.log import configure, get_logger
from sr_runtime.errors import CheckpointError
from sr_runtime.server.process import server_config, url_of
from sr_runtime.server.settings import ServerSettings
from sr_runtime.server.threads import math_threads

log = get_logger("vllm-srun.server")
METRICS_DIR = "PROMETHEUS_MULTIPROC_DIR"
STOP_S = 15.0  # a worker's graceful stop (uvicorn's 5 s, the engine's round) before it is killed


def serve_workers(settings: ServerSettings, sock: socket.socket, name: str) -> int:
    """Run settings.workers processes on ``sock`` until SIGTERM/SIGINT; 0 after a stop, 1 when a
    worker died; CheckpointError when a model failed to load."""
    own_dir = METRICS_DIR not in os.environ
    if own_dir:  # set before the workers start: prometheus_client reads it when imported
        os.environ[METRICS_DIR] = tempfile.mkdtemp(prefix="vllm-srun-metrics-")
    context = multiprocessing.get_context("spawn")
    reports: Any = context.Queue()
    workers = [
        context.Process(target=_worker, args=(settings, sock, i, reports), name=f"vllm-srun-{i}")
        for i in range(settings.workers)
    ]
    stop = threading.Event()
    previous = {s: signal.signal(s, lambda *_: stop.set()) for s in (signal.SIGTERM, signal.SIGINT)}
    try:
        for worker in workers:
            worker.start()
        failure = _wait_loaded(workers, reports, stop)
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
        while not stop.wait(0.5):
            if not all(w.is_alive() for w in workers):
                log.error("a worker stopped; stopping the others", exit_codes=[w.exitcode for w in workers])
                return 1
        return 0
    finally:
        _stop(workers)
        for s, handler in previous.items():
            signal.signal(s, handler)
        if own_dir:
            shutil.rmtree(os.environ.pop(METRICS_DIR), ignore_errors=True)


def _wait_loaded(workers: list[Any], reports: Any, stop: threading.Event) -> str | None:
    """None once every worker has loaded its model; else why one could not."""
    loaded = 0
    while loaded < len(workers):
        if stop.is_set():
            return "stopped while the workers loaded the model"
        try:
            failure = reports.get(timeout=0.5)
        except Empty:
            dead = [w for w in workers if not w.is_alive()]
            if dead:
                return f"worker {dead[0].name} exited ({dead[0].exitcode}) while loading the model"
            continue
        if failure is not None:
            return str(failure)
        loaded += 1
    return None


def _stop(workers: list[Any]) -> None:
    from prometheus_client import multiprocess

    for worker in workers:
        if worker.is_alive():
            worker.terminate()  # SIGTERM: uvicorn drains
    for worker in workers:
        worker.join(STOP_S)
        if worker.is_alive():
            worker.kill()
            worker.join()
        if worker.pid is not None and METRICS_DIR in os.environ:
            multiprocess.mark_process_dead(worker.pid)


def _worker(settings: ServerSettings, sock: socket.socket, index: int, reports: Any) -> None:
    """One server process: load the model, say so, then serve until SIGTERM."""
    import uvicorn

    from sr_runtime.server.app import create_app, engine_loader
    from sr_runtime.server.runtime import load_failure

    configure()
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the supervisor decides when to stop
    threads = math_threads(settings)
    if threads is not None:  # before the load: a built-in's ONNX reader takes torch's count
        import torch

        torch.set_num_threads(threads.light)
    try:
        engine, released = engine_loader(settings)()
    except Exception as exc:  # noqa: BLE001 - reported to the supervisor, which exits 2
        reports.put(load_failure(settings.model, exc))
        return
    server = uvicorn.Server(server_config(create_app(settings, load=lambda: (engine, released))))
    reports.put(None)
    server.run(sockets=[sock])
