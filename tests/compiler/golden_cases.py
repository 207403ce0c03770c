"""The golden configs: each ``golden/<case>.yaml`` and its expected output in ``golden/<case>/``."""

from __future__ import annotations

from pathlib import Path

from sr_control.config.load import load
from sr_control.config.model import RouterConfig

GOLDEN = Path(__file__).parent / "golden"
CASES = sorted(p.stem for p in GOLDEN.glob("*.yaml"))


def golden_config(case: str) -> RouterConfig:
    return load(GOLDEN / f"{case}.yaml")
