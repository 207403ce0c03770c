"""Tracing off costs nothing: the servers never load OpenTelemetry until a config or a flag names
a collector; and a collector address the runtime cannot use is refused at start."""

from __future__ import annotations

import subprocess
import sys

import pytest
from typer.testing import CliRunner

from sr_runtime.cli import app


def test_the_servers_do_not_load_opentelemetry_when_tracing_is_off() -> None:
    probe = (
        "import sys; import sr_control.extproc.server, sr_control.xds.serve, sr_runtime.server.app; "
        "print(sorted(m for m in sys.modules if m.startswith('opentelemetry')))"
    )
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120, check=True)
    assert done.stdout.strip() == "[]"


@pytest.mark.parametrize(
    "args,env,message",
    [
        (["--otlp-endpoint", "collector"], {}, "--otlp-endpoint 'collector' is not HOST:PORT"),
        ([], {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector"}, "OTEL_EXPORTER_OTLP_ENDPOINT 'http://collector'"),
    ],
)
def test_the_runtime_refuses_a_collector_address_it_cannot_use(
    args: list[str], env: dict[str, str], message: str
) -> None:
    done = CliRunner().invoke(app, ["serve", "/no/such/checkpoint", *args], env=env)
    assert done.exit_code == 2
    assert message in done.output
