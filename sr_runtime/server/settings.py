"""What `vllm-srun serve` was asked to do: one frozen value, checked once at start."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from sr_base.tracing import TracingSettings
from sr_runtime.types import DTYPES, device_token_budget
from systemone import REGISTRY

SCHEMAS = ("vllm-sr/5.0", "vllm-sr/4.0", "systemone/0.2")
DEFAULT_STATE_CACHE_MB = 512
DEFAULT_MAX_QUEUE = 256


class SettingsError(ValueError):
    """A flag value the server cannot start with; the message is one line naming the flag."""


@dataclass(frozen=True)
class ServerSettings:
    model: str
    device: str = "cpu"
    host: str = "127.0.0.1"
    port: int = 8100
    schema: str = "vllm-sr/5.0"
    max_model_len: int | None = None
    api_key: str | None = field(default=None, repr=False)  # auth is on when set
    max_batch_tokens: int | None = None  # None: sized for the device (sr_runtime/types.py)
    state_cache_mb: int = DEFAULT_STATE_CACHE_MB
    max_queue: int = DEFAULT_MAX_QUEUE
    threads: int | None = None  # math threads on CPU; None: math_threads() decides
    workers: int = 1  # server processes on the port, each with its own model (workers.py)
    noul_model: Path | None = None  # `default`'s noul reader, an ONNX file or a Hugging Face folder
    dtype: str = "auto"  # what the weights run in: auto, bfloat16, float16, float32 (sr_runtime/kernels.py)
    tracing: TracingSettings | None = None  # a span per request to an OTLP collector; None: off

    def __post_init__(self) -> None:
        if self.schema not in SCHEMAS:
            raise SettingsError(f"--systemone-schema {self.schema!r} is not served (supported: {', '.join(SCHEMAS)})")
        REGISTRY.listener(self.schema)
        for flag, value, least in (
            ("--port", self.port, 0),
            ("--max-batch-tokens", self.batch_tokens, 1),
            ("--state-cache-mb", self.state_cache_mb, 0),
            ("--max-queue", self.max_queue, 1),
            ("--threads", 1 if self.threads is None else self.threads, 1),
            ("--workers", self.workers, 1),
        ):
            if value < least:
                raise SettingsError(f"{flag} must be at least {least}, not {value}")
        if self.dtype not in DTYPES:
            raise SettingsError(f"--dtype must be one of {', '.join(DTYPES)}, not {self.dtype!r}")
        if self.port > 65535:
            raise SettingsError(f"--port must be at most 65535, not {self.port}")

    @property
    def batch_tokens(self) -> int:
        """The token budget of one engine pass: --max-batch-tokens, else the device's."""
        return device_token_budget(self.device) if self.max_batch_tokens is None else self.max_batch_tokens
