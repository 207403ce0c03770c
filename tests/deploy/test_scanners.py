"""The scanners an operator's CI would run before `helm install`: checkov over the chart's
manifests for every value set and over the Dockerfiles (once, for all of them), and hadolint
over the Dockerfiles. Both are pinned in deploy/tools-constraints.txt and installed into
.venv/tools by `make install`; the checks checkov skips are named, with their reasons, in
deploy/checkov.yaml alone."""

from __future__ import annotations

import json
import os
import re
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.deploy.chart import ROOT
from tests.deploy.value_sets import VALUE_SETS

TOOLS = ROOT / ".venv" / "tools" / "bin"
CHECKOV_CONFIG = ROOT / "deploy" / "checkov.yaml"
DOCKERFILES = sorted((ROOT / "deploy" / "docker").glob("*.Dockerfile"))


def tool(name: str) -> Path:
    path = TOOLS / name
    if not path.exists():
        if os.environ.get("CI"):
            raise AssertionError(f"{path} is missing: make install installs the scanners")
        pytest.skip(f"{path} is missing: run make install")
    return path


@pytest.fixture(scope="session")
def checkov(tmp_path_factory: pytest.TempPathFactory, rendered_text: dict[str, dict[str, str]]) -> list[dict[str, Any]]:
    """checkov's report (one per framework) over every value set's manifests and the Dockerfiles."""
    manifests = tmp_path_factory.mktemp("manifests")
    assert rendered_text.keys() == VALUE_SETS.keys()
    for name, rendered in rendered_text.items():
        texts = [text for path, text in sorted(rendered.items()) if not path.endswith("NOTES.txt")]
        (manifests / f"{name}.yaml").write_text("\n---\n".join(texts))
    for dockerfile in DOCKERFILES:  # one directory: checkov writes one JSON report per directory
        (manifests / dockerfile.name).write_text(dockerfile.read_text())
    result = subprocess.run(
        [
            str(tool("checkov")),
            "--config-file",
            str(CHECKOV_CONFIG),
            "--directory",
            str(manifests),
            "--output",
            "json",
            "--quiet",
            "--compact",
        ],
        capture_output=True,
        text=True,
        cwd=ROOT,
    )
    reports = json.loads(result.stdout)
    return reports if isinstance(reports, list) else [reports]


def test_checkov_fails_nothing_outside_the_named_skips(checkov: list[dict[str, Any]]) -> None:
    assert {r["check_type"] for r in checkov} == {"kubernetes", "dockerfile"}
    failed = [
        f"{f['check_id']} {f['check_name']}: {f['resource']} in {Path(f['file_path']).name}"
        for report in checkov
        for f in report["results"]["failed_checks"]
    ]
    assert failed == []
    for report in checkov:
        assert report["summary"]["parsing_errors"] == 0
        assert report["summary"]["passed"] > 0


def test_every_skipped_check_is_named_once_with_its_reason() -> None:
    config = yaml.safe_load(CHECKOV_CONFIG.read_text())
    skips = config["skip-check"]
    assert len(skips) == len(set(skips))
    lines = CHECKOV_CONFIG.read_text().splitlines()
    for check in skips:
        (at,) = [i for i, line in enumerate(lines) if line.strip() == f"- {check}"]
        assert lines[at - 1].lstrip().startswith("#"), f"{check} is skipped without a reason above it"
        assert re.match(r"^CKV2?_[A-Z0-9]+_\d+$", check)


@pytest.mark.parametrize("path", DOCKERFILES, ids=lambda p: p.name)
def test_hadolint_finds_nothing(path: Path) -> None:
    result = subprocess.run([str(tool("hadolint")), str(path)], capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr
