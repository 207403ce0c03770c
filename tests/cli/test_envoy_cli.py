"""`vllm-sr envoy drain | wait` where no Envoy answers: what a preStop hook reports when Envoy is
already gone (tests/deploy/test_envoy_drain_e2e.py runs both against a real Envoy)."""

from __future__ import annotations

from tests.e2e.envoy_proc import free_port


def test_drain_with_no_envoy_exits_2_naming_the_admin(cli) -> None:  # type: ignore[no-untyped-def]
    admin = f"127.0.0.1:{free_port()}"
    result = cli("envoy", "drain", "--admin", admin, "--announce-s", "0", "--timeout-s", "0")
    assert result.returncode == 2
    assert f"no Envoy admin answers at {admin}" in result.stderr


def test_wait_returns_at_once_when_envoy_is_gone(cli) -> None:  # type: ignore[no-untyped-def]
    result = cli("envoy", "wait", "--admin", f"127.0.0.1:{free_port()}", "--timeout-s", "30")
    assert result.returncode == 0, result.stderr


def test_help_shows_the_charts_hooks(cli) -> None:  # type: ignore[no-untyped-def]
    assert "vllm-sr envoy drain --admin 127.0.0.1:9901" in cli("envoy", "drain", "--help").stdout
    assert "vllm-sr envoy wait --admin 127.0.0.1:9901" in cli("envoy", "wait", "--help").stdout
