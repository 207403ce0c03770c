from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.e2e.upstreams import ExtProcServer, Upstream


@pytest.fixture(scope="session")
def llm() -> Iterator[Upstream]:
    server = Upstream("llm")
    yield server
    server.stop()


@pytest.fixture(scope="session")
def decisions() -> Iterator[Upstream]:
    server = Upstream("decisions")
    yield server
    server.stop()


@pytest.fixture(scope="session")
def sidecar() -> Iterator[ExtProcServer]:
    server = ExtProcServer()
    yield server
    server.stop()
