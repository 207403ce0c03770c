"""Servers for the tests: the app in process (Starlette's TestClient runs its lifespan, so the
model loads as it does in production), and `vllm-srun serve` as a process on 127.0.0.1."""

from __future__ import annotations

import json
import os
import queue
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest
from starlette.testclient import TestClient

from sr_runtime.engine import Engine
from sr_runtime.presets import create
from sr_runtime.server import ServerSettings, create_app
from sr_runtime.server.runtime import Loader, Runtime
from sr_runtime.types import DecisionEngine, DecisionRequest, ModelCard, Result

VLLM_SRUN = str(Path(sys.executable).with_name("vllm-srun"))
SEED_002_STATE = "Our export button fails with a 500 since this morning. Open a ticket."
NOUL = {"type": "noul", "instructions": "Does the user report a problem that blocks their work?"}
CHOICE = {
    "type": "choice",
    "instructions": "Which team should handle this request?",
    "criteria": {"billing": "Payments, invoices and refunds", "engineering": "Outages, errors and bugs", "other": None},
}
SCORE = {"type": "score", "instructions": "How angry is the customer?", "criteria": ["calm", "annoyed", "furious"]}
SCHEMAS = ["vllm-sr/5.0", "vllm-sr/4.0"]


def body(questions: dict[str, Any] | None = None, state: Any = SEED_002_STATE, **members: Any) -> dict[str, Any]:
    return {"state": state, "questions": questions or {"urgent": NOUL}, **members}


@pytest.fixture(scope="session")
def checkpoint(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny random prefix_bidir checkpoint as its preset creates it (validated at 16,384 tokens:
    a 255-option choice is 8,149 tokens in its tokenizer, and the standard requires 255 options)."""
    return create(tmp_path_factory.mktemp("ckpt") / "tiny-prefix-bidir", "llama-prefix-bidir", seed=0)


@pytest.fixture(scope="session")
def short_checkpoint(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The same weights, declaring validated_length 2,048, so a long state crosses it cheaply."""
    folder = create(tmp_path_factory.mktemp("ckpt") / "tiny-prefix-bidir-2k", "llama-prefix-bidir", seed=0)
    config = json.loads((folder / "decision_config.json").read_text())
    config["validated_length"] = 2_048
    (folder / "decision_config.json").write_text(json.dumps(config, indent=2))
    return folder


def engine_loader(engine: DecisionEngine) -> Loader:
    return lambda: (engine, "2026-01-01")


@contextmanager
def serving(settings: ServerSettings, load: Loader | None = None, wait: bool = True) -> Iterator[TestClient]:
    """The app with its lifespan running; by default, once its model is ready."""
    with TestClient(create_app(settings, load)) as client:
        if wait:
            assert runtime(client).wait(120), "the model did not load"
        yield client


def runtime(client: TestClient) -> Runtime:
    return client.app_state["runtime"]  # type: ignore[no-any-return]


@pytest.fixture(scope="module", params=SCHEMAS)
def client(request: pytest.FixtureRequest, checkpoint: Path) -> Iterator[TestClient]:
    """A server per schema on the tiny checkpoint, shared by a module's tests."""
    with serving(ServerSettings(str(checkpoint), schema=request.param)) as c:
        yield c


class HeldEngine:
    """The real engine, held at the start of each engine call until the test releases it.

    A stand-in only for what cannot be made to happen on cue here: a model busy long enough for
    a deadline to pass or the queue to fill. Every answer is still the real engine's."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self.name = engine.name
        self.max_length = engine.max_length
        self.state_cache = engine.state_cache
        self.entered = threading.Event()
        self.release = threading.Event()
        self.calls: list[int] = []  # requests per engine call
        self.rounds: list[list[DecisionRequest]] = []  # the requests of each engine call

    def card(self) -> ModelCard:
        return self.engine.card()

    def answer_batch(self, requests: list[DecisionRequest]) -> list[Result]:
        self.entered.set()
        assert self.release.wait(60), "the test never released the engine"
        self.calls.append(len(requests))
        self.rounds.append(list(requests))
        return self.engine.answer_batch(requests)


def wait_until(condition: Any, what: str, limit: float = 30) -> None:
    """Poll until ``condition()`` holds (a wait for an event, never a timing assertion)."""
    end = time.monotonic() + limit
    while not condition():
        assert time.monotonic() < end, f"gave up waiting for {what}"
        time.sleep(0.01)


# ---------------------------------------------------------------------------- a real process


@dataclass
class ServeProcess:
    proc: subprocess.Popen[str]
    url: str = ""
    lines: list[str] = field(default_factory=list)


@contextmanager
def vllm_srun_serve(*args: str, env: dict[str, str] | None = None) -> Iterator[ServeProcess]:
    """`vllm-srun serve ARGS --port 0`, once its model is ready; stopped (SIGTERM) afterwards."""
    proc = subprocess.Popen(
        [VLLM_SRUN, "serve", *args, "--port", "0"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, **(env or {})},
    )
    served = ServeProcess(proc)
    lines: queue.Queue[str] = queue.Queue()
    threading.Thread(target=lambda: [lines.put(line) for line in proc.stderr or ()], daemon=True).start()
    try:
        end = time.monotonic() + 120
        while not served.url:
            assert proc.poll() is None, f"vllm-srun serve exited {proc.returncode}: {''.join(served.lines)}"
            try:
                line = lines.get(timeout=max(0.0, end - time.monotonic()))
            except queue.Empty:
                raise AssertionError(f"no start line: {''.join(served.lines)}") from None
            served.lines.append(line)
            if " url=" in line:
                served.url = line.split(" url=", 1)[1].split()[0]
        wait_until(lambda: httpx.get(served.url + "/health").status_code == 200, "the model to load", limit=120)
        yield served
    finally:
        proc.terminate()
        proc.wait(30)
