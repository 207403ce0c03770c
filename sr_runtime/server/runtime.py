"""What the app's lifespan yields: the codec, and the model once a background thread loaded it.

While the model loads, `/health` says not ready and the System One endpoints answer 503
`unavailable` with Retry-After; a request that cannot be read still gets its 4xx first. A load
that fails is reported once through ``on_failure`` (the CLI then stops the server and exits 2).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from enum import StrEnum

from sr_base import tracing
from sr_base.log import get_logger
from sr_runtime.errors import CheckpointError
from sr_runtime.server.errors import Unavailable
from sr_runtime.server.metrics import Metrics
from sr_runtime.server.scheduler import Scheduler
from sr_runtime.server.served import ServedModel
from sr_runtime.server.settings import ServerSettings
from sr_runtime.server.threads import RoundThreads, math_threads
from sr_runtime.types import DecisionEngine
from systemone import REGISTRY, ListenerCodec

log = get_logger("vllm-srun.server")
Loader = Callable[[], tuple[DecisionEngine, str]]  # the engine, and its release date


def load_failure(model: str, exc: Exception) -> str:
    """The one line that says why ``model`` did not load."""
    why = str(exc) if isinstance(exc, CheckpointError) else f"cannot load {model}: {type(exc).__name__}: {exc}"
    return why.splitlines()[0]


class Status(StrEnum):
    LOADING = "loading"
    READY = "ready"
    FAILED = "failed"


class Runtime:
    def __init__(self, settings: ServerSettings, load: Loader, on_failure: Callable[[str], None] | None = None) -> None:
        self.settings = settings
        self.codec: ListenerCodec = REGISTRY.listener(settings.schema)
        self.metrics = Metrics()
        self.status = Status.LOADING
        self.failure: str | None = None
        self.model: ServedModel | None = None
        self.scheduler: Scheduler | None = None
        # Made here, in the server process (a worker's own, after the fork), never in the parent.
        self.tracing = tracing.tracer_for(settings.tracing, "runtime")
        self._load = load
        self._on_failure = on_failure
        self._loaded = threading.Event()
        self._thread = threading.Thread(target=self._load_model, name="vllm-srun-load", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def wait(self, timeout: float | None = None) -> bool:
        """Block until the load ended, well or not; False on timeout."""
        return self._loaded.wait(timeout)

    def ready(self) -> tuple[ServedModel, Scheduler]:
        if self.model is None or self.scheduler is None:
            if self.status is Status.FAILED:
                raise Unavailable(f"the model failed to load: {self.failure}", reason="model_failed")
            raise Unavailable("the model is loading; retry shortly")
        return self.model, self.scheduler

    def close(self) -> None:
        self._thread.join()
        if self.scheduler is not None:
            self.scheduler.close()
        if self.tracing is not None:
            tracing.shutdown()  # the spans still buffered go out before the process ends

    def _load_model(self) -> None:
        started = time.monotonic()
        try:
            engine, release_date = self._load()
            threads = math_threads(self.settings)
            scheduler = Scheduler(
                engine,
                self.settings.batch_tokens,
                self.settings.max_queue,
                self.metrics.engine_round,
                before_round=None if threads is None else RoundThreads(threads),
                on_dropped=self.metrics.dropped_requests,
            )
        except Exception as exc:  # noqa: BLE001 - a failed load is reported, never raised into a thread
            self.failure = load_failure(self.settings.model, exc)
            self.status = Status.FAILED
            log.error("model failed to load", model=self.settings.model, error=self.failure)
            self._loaded.set()
            if self._on_failure is not None:
                self._on_failure(self.failure)
            return
        self.metrics.watch(engine, lambda: scheduler.depth)
        self.model = ServedModel(engine.name, engine.card(), release_date)
        self.scheduler = scheduler
        self.status = Status.READY
        log.info(
            "model ready", model=engine.name, schema=self.settings.schema, load_s=round(time.monotonic() - started, 2)
        )
        self._loaded.set()
