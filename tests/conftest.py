"""Shared fixtures: the installed console scripts, run as a user runs them."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

BIN = Path(sys.executable).parent
ROOT = Path(__file__).resolve().parents[1]


def run_cli(
    *args: str, script: str = "vllm-sr", cwd: Path | None = None, timeout: float = 60
) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(BIN / script), *args], capture_output=True, text=True, cwd=cwd, timeout=timeout)


@pytest.fixture
def cli():  # type: ignore[no-untyped-def]
    return run_cli
