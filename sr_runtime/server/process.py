"""Running the app as a process: checks that need no weights, the socket, uvicorn, the exit code.

Everything that can be refused without loading the model is refused before the socket opens,
each as one line (an unknown model, a device torch cannot use, a missing API key variable, a
port in use); then the model loads in the background while the server already answers.
"""

from __future__ import annotations

import os
import socket
from typing import Any

import uvicorn

from sr_base.log import get_logger
from sr_runtime.errors import CheckpointError
from sr_runtime.loader import check_device, check_model
from sr_runtime.server.app import create_app
from sr_runtime.server.settings import ServerSettings
from sr_runtime.server.threads import math_threads

log = get_logger("vllm-srun.server")


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
        from sr_runtime.server.workers import serve_workers

        return serve_workers(settings, sock, name)
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
