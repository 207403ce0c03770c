"""``vllm-sr config compile FILE -o DIR`` as a user runs it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from sr_control.cli import app, main
from tests.compiler.golden_cases import GOLDEN

runner = CliRunner()


def vllm_sr(args: list[str], capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> tuple[int, str]:
    """Run the real entry point (its error mapping included); returns (exit code, stdout + stderr)."""
    monkeypatch.setattr("sys.argv", ["vllm-sr", *args])
    with pytest.raises(SystemExit) as exit_:
        main()
    out = capsys.readouterr()
    return int(exit_.value.code or 0), out.out + out.err


FILES = ["bootstrap.yaml", "clusters.yaml", "envoy-static.yaml", "listeners.yaml", "routes.yaml", "sidecar.yaml"]


def test_compile_writes_every_file_and_says_so(tmp_path: Path) -> None:
    result = runner.invoke(app, ["config", "compile", str(GOLDEN / "seed_sketch.yaml"), "-o", str(tmp_path / "out")])
    assert result.exit_code == 0, result.output
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == FILES
    assert "2 listeners" in result.output and "wrote" in result.output


def test_listeners_file_is_what_xds_serves(tmp_path: Path) -> None:
    runner.invoke(app, ["config", "compile", str(GOLDEN / "seed_sketch.yaml"), "-o", str(tmp_path)])
    doc = yaml.safe_load((tmp_path / "listeners.yaml").read_text())
    assert doc["type_url"] == "type.googleapis.com/envoy.config.listener.v3.Listener"
    assert [r["name"] for r in doc["resources"]] == ["listener/internal", "listener/public"]


def test_settings_reach_the_bootstrap(tmp_path: Path) -> None:
    args = ["--xds", "xds.vsr.svc:18000", "--admin", "127.0.0.1:9911", "--node-id", "envoy-7", "--ads", "delta"]
    result = runner.invoke(app, ["config", "compile", str(GOLDEN / "aliases.yaml"), "-o", str(tmp_path), *args])
    assert result.exit_code == 0, result.output
    boot = yaml.safe_load((tmp_path / "bootstrap.yaml").read_text())
    assert boot["node"]["id"] == "envoy-7"
    assert boot["dynamic_resources"]["ads_config"]["api_type"] == "DELTA_GRPC"
    (xds,) = boot["static_resources"]["clusters"]
    assert xds["type"] == "STRICT_DNS"
    assert xds["load_assignment"]["endpoints"][0]["lb_endpoints"][0]["endpoint"]["address"]["socket_address"] == {
        "address": "xds.vsr.svc",
        "port_value": 18000,
    }
    assert boot["admin"]["address"]["socket_address"]["port_value"] == 9911


def test_json_output_gives_versions_per_type(tmp_path: Path) -> None:
    result = runner.invoke(
        app, ["config", "compile", str(GOLDEN / "aliases.yaml"), "-o", str(tmp_path), "--format", "json"]
    )
    out = json.loads(result.output)
    assert set(out["types"]) == {"clusters", "listeners", "routes", "sidecar"}
    assert out["types"]["listeners"]["count"] == 1
    assert len(out["version"]) == 16


@pytest.mark.envoy
def test_validate_asks_envoy(tmp_path: Path) -> None:
    result = runner.invoke(app, ["config", "compile", str(GOLDEN / "aliases.yaml"), "-o", str(tmp_path), "--validate"])
    assert result.exit_code == 0, result.output
    assert "envoy accepts envoy-static.yaml" in result.output


def test_an_invalid_config_exits_1_naming_file_line_and_field(tmp_path: Path, capsys, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    bad = tmp_path / "bad.yaml"
    bad.write_text("version: 2\nlisteners:\n  - name: public\n    port: 99999\n")
    code, output = vllm_sr(["config", "compile", str(bad), "-o", str(tmp_path / "out")], capsys, monkeypatch)
    assert code == 1
    assert f"{bad}:4:11: error: listeners[0].port" in output
    assert not (tmp_path / "out").exists()


def test_a_config_that_cannot_compile_exits_1(tmp_path: Path) -> None:
    bad = tmp_path / "mixed.yaml"
    bad.write_text(
        "version: 2\nproviders:\n  models:\n    - {name: m, endpoints: ['http://a:1/v1', 'https://b:1/v1']}\n"
    )
    result = runner.invoke(app, ["config", "compile", str(bad), "-o", str(tmp_path / "out")])
    assert result.exit_code == 1
    assert "providers.models[0].endpoints: endpoints mix http and https" in result.output


def test_a_missing_file_exits_2(tmp_path: Path, capsys, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    code, output = vllm_sr(["config", "compile", str(tmp_path / "nope.yaml"), "-o", str(tmp_path)], capsys, monkeypatch)
    assert code == 2
    assert "no such file" in output


def test_a_bad_address_exits_2(tmp_path: Path) -> None:
    result = runner.invoke(
        app, ["config", "compile", str(GOLDEN / "aliases.yaml"), "-o", str(tmp_path), "--sidecar", "nowhere"]
    )
    assert result.exit_code == 2
    assert "HOST:PORT" in result.output
