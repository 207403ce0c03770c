"""Shared fixtures: the installed console scripts, run as a user runs them."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

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


def same_to(got: Any, expected: Any, tolerance: float) -> bool:
    """The same members in the same order, the same strings and integers, and every float within
    `tolerance`: an answer computed again (cold, then from a cached state; another batch) agrees
    to float rounding, not bit for bit."""
    if isinstance(expected, float) or isinstance(got, float):
        return isinstance(got, (int, float)) and abs(got - expected) <= tolerance
    if isinstance(expected, dict):
        return (
            isinstance(got, dict)
            and list(got) == list(expected)
            and all(same_to(got[k], expected[k], tolerance) for k in expected)
        )
    if isinstance(expected, list):
        return (
            isinstance(got, list)
            and len(got) == len(expected)
            and all(same_to(g, e, tolerance) for g, e in zip(got, expected))
        )
    return bool(got == expected)
