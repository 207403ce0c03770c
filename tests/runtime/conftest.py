"""Tiny random checkpoints (one per preset), written once per session by our own code."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from sr_runtime.engine import Engine
from sr_runtime.presets import PRESETS, create

SEED_002_STATE = "Our export button fails with a 500 since this morning. Open a ticket."


@pytest.fixture(scope="session")
def checkpoints(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("checkpoints")
    return {name: create(root / name, name, seed=0) for name in PRESETS}


@pytest.fixture(scope="session")
def engines(checkpoints: dict[str, Path]) -> dict[str, Engine]:
    """One engine per preset, shared (what ran before changes an answer only in float rounding: a
    state computed cold, or read back from the cache)."""
    return {name: Engine.load(path) for name, path in checkpoints.items()}


@pytest.fixture(scope="session")
def references(checkpoints: dict[str, Path]) -> dict[str, Engine]:
    return {name: Engine.load(path, reference=True) for name, path in checkpoints.items()}


@pytest.fixture
def fresh_engine(checkpoints: dict[str, Path]) -> Callable[..., Engine]:
    """An engine of its own, for tests that watch the state cache or change options."""

    def make(preset: str, **options: object) -> Engine:
        return Engine.load(checkpoints[preset], **options)  # type: ignore[arg-type]

    return make
