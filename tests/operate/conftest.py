"""One tiny checkpoint and one runtime for every operator-command test (it takes seconds to load)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from sr_runtime.presets import create
from tests.extproc.harness import Runtime


@pytest.fixture(scope="session")
def member(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Runtime]:
    tiny = create(tmp_path_factory.mktemp("ckpt") / "tiny", "llama-prefix-bidir", seed=0)
    runtime = Runtime(tiny, tmp_path_factory.mktemp("runtime") / "member.log").start()
    try:
        yield runtime.wait()
    finally:
        runtime.stop()
