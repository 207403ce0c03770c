"""One tiny checkpoint, one runtime and one stack in front of it for every operator-command test
(each takes seconds to start); a test that edits the config leaves it as it found it."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from sr_runtime.presets import create
from tests.extproc.harness import Runtime
from tests.operate.stack import Live, live_stack


@pytest.fixture(scope="session")
def member(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Runtime]:
    tiny = create(tmp_path_factory.mktemp("ckpt") / "tiny", "llama-prefix-bidir", seed=0)
    runtime = Runtime(tiny, tmp_path_factory.mktemp("runtime") / "member.log").start()
    try:
        yield runtime.wait()
    finally:
        runtime.stop()


@pytest.fixture(scope="session")
def live(member: Runtime, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Live]:
    with live_stack(tmp_path_factory.mktemp("stack"), member) as stack:
        yield stack
