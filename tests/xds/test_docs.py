"""docs/xds stays true: every option, file, metric and metadata key it names exists."""

from __future__ import annotations

import re
from pathlib import Path

from typer.testing import CliRunner

from sr_control.cli import app
from sr_control.compiler import bootstrap, compile, static_bootstrap
from sr_control.compiler.output import documents
from sr_control.config.load import load_text
from sr_control.xds.metrics import Metrics
from tests.xds.xds_support import config_text

DOCS = Path(__file__).resolve().parents[2] / "docs" / "xds"


def _options(command: list[str]) -> set[str]:
    return set(re.findall(r"--[a-z-]+", CliRunner().invoke(app, [*command, "--help"]).output))


def test_every_option_the_serve_page_names_exists() -> None:
    named = set(re.findall(r"`(--[a-z-]+)", (DOCS / "serve.md").read_text()))
    assert named and named <= _options(["xds", "serve"])


def test_every_option_the_compile_page_names_exists() -> None:
    named = set(re.findall(r"`(--[a-z-]+)", (DOCS / "compile.md").read_text()))
    assert named and named <= _options(["config", "compile"])


def test_every_file_the_compile_page_names_is_written() -> None:
    config = load_text(config_text({"public": 8801}))
    written = set(documents(compile(config), bootstrap(), static_bootstrap(config)))
    named = set(re.findall(r"`([a-z-]+\.yaml)`", (DOCS / "compile.md").read_text())) - {"router.yaml", "config.yaml"}
    assert named == written


def test_every_metric_the_serve_page_names_is_exported() -> None:
    named = set(re.findall(r"`(vsr_[a-z_]+)`", (DOCS / "serve.md").read_text()))
    metrics = Metrics()
    metrics.served("v", 1)
    metrics.reloads.labels(result="ok").inc()
    metrics.pushes.labels(type="listeners", result="ack").inc()
    metrics.streams.labels(protocol="sotw").inc()
    metrics.encoded.labels(type="listeners").inc(1)
    metrics.endpoints.labels(deployment="d").set(2)
    exported = set(re.findall(r"^(vsr_[a-z_]+)", metrics.text().decode(), re.M))
    assert named and named <= exported


def test_every_metadata_key_the_sidecar_page_names_is_sent() -> None:
    from sr_control.compiler.protos import ROUTE

    named = set(re.findall(r"`(x-vsr-[a-z-]+)`", (DOCS / "sidecar-versions.md").read_text()))
    config = load_text(config_text({"public": 8801}, apis="{systemone: {}}"))
    routes = compile(config).named(ROUTE)["route/public"].message.SerializeToString()
    assert named and all(key.encode() in routes for key in named)
