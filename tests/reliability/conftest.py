"""Real parts for the reliability scenarios: a tiny checkpoint and two ``vllm-srun serve``
processes on it, started together (each takes seconds to load):

    member  the pool member behind every Envoy stack here (default flags)
    tuned   the runtime the runtime scenarios hit directly: a queue of 2 (``--max-queue``), small
            rounds (``--max-batch-tokens 1024``) and no state reuse, so a burst of two dozen
            requests overflows it

The stacks in front of ``member`` (control plane, sidecar, Envoy) are started by each test, since
each scenario needs its control plane its own way: a process to kill, or in this process to
inject a fault into.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from sr_runtime.presets import create
from tests.extproc.harness import Runtime
from tests.reliability.runtime_scenarios import TUNED_FLAGS, Tuned, wait_ready


@pytest.fixture(scope="session")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return create(tmp_path_factory.mktemp("ckpt") / "tiny", "llama-prefix-bidir", seed=0)


@pytest.fixture(scope="session")
def runtimes(tiny: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Runtime]]:
    logs = tmp_path_factory.mktemp("runtimes")
    started: dict[str, Runtime] = {
        "member": Runtime(tiny, logs / "member.log"),
        "tuned": Tuned(tiny, logs / "tuned.log", *TUNED_FLAGS),
    }
    try:
        for runtime in started.values():
            runtime.start()
        started["member"].wait()
        wait_ready(started["tuned"])  # type: ignore[arg-type]
        yield started
    finally:
        for runtime in started.values():
            runtime.stop()


@pytest.fixture(scope="session")
def member(runtimes: dict[str, Runtime]) -> Runtime:
    return runtimes["member"]


@pytest.fixture(scope="session")
def tuned(runtimes: dict[str, Runtime]) -> Tuned:
    return runtimes["tuned"]  # type: ignore[return-value]
