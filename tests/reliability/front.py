"""The front door in front of one runtime: ``vllm-sr xds serve``, ``vllm-sr extproc serve`` and
Envoy, all real processes, on a config of one listener whose System One API has the given
``max_deadline_ms``. Used by the deadline tests and bench/reliability.py.

    with front(directory, runtime.url, forwarding="auto", max_deadline_ms=3000) as port:
        post(port, ASK)
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from tests.e2e.envoy_proc import free_port, wait_for
from tests.extproc.harness import SidecarProc, envoy_for
from tests.reliability.parts import ASK, NOUL, STATE, PlaneProc, post


def front_config(runtime: str, port: int, max_deadline_ms: int, max_concurrency: int = 8) -> str:
    return f"""version: 2
deployments:
  local:
    provider: systemone
    endpoint: "{runtime}/v1/systemone"
    model: default
    schema: vllm-sr/5.0
    max_concurrency: {max_concurrency}
pools:
  vllm-sr/auto: {{members: [local]}}
listeners:
  - name: public
    address: 127.0.0.1
    port: {port}
    apis:
      systemone: {{models: [vllm-sr/auto, default], max_deadline_ms: {max_deadline_ms}}}
"""


def batch(states: int, repeat: int = 1, **options: Any) -> dict[str, Any]:
    """A /v1/systemone/batch of ``states`` one-question requests, each state the seed's example
    ``repeat`` times and numbered (`default` reads one in 0.07-0.2 s on two cores, so 200 take far
    longer than a deadline of seconds)."""
    doc: dict[str, Any] = {
        "requests": {
            f"r{i}": {"state": f"{' '.join([STATE] * repeat)} ({i})", "questions": {"urgent": NOUL}}
            for i in range(states)
        }
    }
    if options:
        doc["options"] = options
    return doc


@contextmanager
def front(
    directory: Path, runtime: str, *, forwarding: str = "auto", max_deadline_ms: int = 3000, max_concurrency: int = 8
) -> Iterator[int]:
    """The listener's port, once it answers ASK; every part stopped afterwards."""
    directory.mkdir(parents=True, exist_ok=True)
    port, sidecar_port = free_port(), free_port()
    config = directory / "config.yaml"
    config.write_text(front_config(runtime, port, max_deadline_ms, max_concurrency))
    plane = PlaneProc(directory, config, sidecar_port).start().wait()
    parts: list[Any] = [plane]
    try:
        parts.append(SidecarProc(directory, plane.port, port=sidecar_port, args=("--forwarding", forwarding)).wait())
        parts.append(envoy_for(directory, plane, sidecar_port))  # type: ignore[arg-type]
        wait_for(lambda: post(port, ASK).status == 200, timeout=60, what="the listener to answer")
        yield port
    finally:
        for part in reversed(parts):
            part.stop()
