"""Compile output for a set of configs, file by file, against checked-in golden files.

The cases cover every API, the openai/anthropic aliases, 4.0 and 5.0 listeners, pools, and
deployments with deviations. After an intended change, regenerate with
``VSR_UPDATE_GOLDEN=1 .venv/bin/python -m pytest tests/compiler/test_golden.py`` and review the
diff like code.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from sr_control.compiler import Settings, bootstrap, compile, static_bootstrap
from sr_control.compiler.envoy import validate
from sr_control.compiler.output import documents, write
from sr_control.config.load import load
from tests.compiler.golden_cases import CASES, GOLDEN

UPDATE = os.environ.get("VSR_UPDATE_GOLDEN") == "1"


def _files(case: str) -> dict[str, str]:
    config = load(GOLDEN / f"{case}.yaml")
    settings = Settings()
    return documents(compile(config, settings), bootstrap(settings), static_bootstrap(config, settings))


@pytest.mark.parametrize("case", CASES)
def test_compile_output_matches_golden_files(case: str) -> None:
    files = _files(case)
    expected_dir = GOLDEN / case
    if UPDATE:
        for stale in expected_dir.glob("*.yaml") if expected_dir.exists() else ():
            stale.unlink()
        write(expected_dir, files)
    expected = {p.name: p.read_text() for p in sorted(expected_dir.glob("*.yaml"))}
    assert sorted(expected) == sorted(files), "a compiled file appeared or vanished"
    for name, text in files.items():
        assert text == expected[name], f"{case}/{name} differs from its golden file (VSR_UPDATE_GOLDEN=1 to accept)"


@pytest.mark.parametrize("case", CASES)
def test_compiling_twice_gives_identical_files(case: str) -> None:
    assert _files(case) == _files(case)


@pytest.mark.envoy
@pytest.mark.parametrize("case", CASES)
def test_envoy_accepts_every_static_config(case: str, tmp_path: Path) -> None:
    write(tmp_path, _files(case))
    for name in ("envoy-static.yaml", "bootstrap.yaml"):
        result = validate(tmp_path / name)
        assert result.ok, f"{case}/{name}: envoy --mode validate said:\n{result.output}"
