"""`vllm-sr` as a user runs it: help, exit codes, JSON output, files written."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from tests.conftest import ROOT

CORPUS = ROOT / "tests" / "config" / "migrations"


def _commands(help_text: str) -> dict[str, str]:
    section = help_text.split("Commands:", 1)[1]
    return {
        row.split()[0]: row.split(None, 1)[1]
        for row in section.splitlines()
        if row.startswith("  ") and len(row.split()) > 1
    }


def test_help_lists_every_command_with_one_line_each(cli) -> None:  # type: ignore[no-untyped-def]
    top = cli("--help")
    assert top.returncode == 0
    commands = _commands(top.stdout)
    assert {"serve", "config", "schemas", "systemone", "xds"} <= set(commands)
    sub = _commands(cli("config", "--help").stdout)
    assert {"validate", "migrate", "explain", "schema", "compile"} <= set(sub)
    # One line each, whole: typer cuts a long first docstring line with "...".
    assert all(help and not help.endswith("...") for help in [*commands.values(), *sub.values()])


def test_validate_exit_codes(cli, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    good = ROOT / "examples" / "router.yaml"
    bad = tmp_path / "bad.yaml"
    bad.write_text("version: 2\nlisteners:\n  - {name: a, port: 0}\n")
    assert cli("config", "validate", str(good)).returncode == 0
    run = cli("config", "validate", str(good), str(bad))
    assert run.returncode == 1
    assert f"{bad}:3:21: error: listeners[0].port: must be greater than or equal to 1 (got 0)" in run.stdout
    missing = cli("config", "validate", str(bad), str(tmp_path / "nope.yaml"))
    assert missing.returncode == 2 and "cannot read: no such file" in missing.stdout
    assert "Traceback" not in run.stderr + missing.stderr


def test_validate_json_output(cli, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    bad = tmp_path / "bad.yaml"
    bad.write_text("version: 2\nlisteners:\n  - {name: a, port: 1, apis: {grpc: {}}}\n")
    run = cli("config", "validate", "--format", "json", str(ROOT / "examples" / "router.yaml"), str(bad))
    assert run.returncode == 1
    files = json.loads(run.stdout)["files"]
    assert files[0] == {"path": str(ROOT / "examples" / "router.yaml"), "valid": True, "errors": [], "warnings": []}
    assert files[1]["valid"] is False
    assert files[1]["errors"] == [
        {
            "line": 3,
            "column": 31,
            "path": "listeners[0].apis.grpc",
            "message": (
                "unknown API 'grpc' (supported: chat_completions, responses, messages, images, systemone, "
                "openai, anthropic)"
            ),
        }
    ]


def test_explain_json_and_errors_without_traceback(cli, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    run = cli("config", "explain", "--format", "json", str(ROOT / "examples" / "router.yaml"))
    assert run.returncode == 0
    assert [listener["name"] for listener in json.loads(run.stdout)["listeners"]] == ["public", "internal"]
    bad = tmp_path / "bad.yaml"
    bad.write_text("version: 2\nlisteners: 3\n")
    failed = cli("config", "explain", str(bad))
    assert failed.returncode == 1
    assert failed.stderr.strip() == f"{bad}:2:12: error: listeners: must be a list, not a int"
    assert cli("config", "explain", str(tmp_path / "none.yaml")).returncode == 2


def test_migrate_prints_writes_and_checks(cli, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    case = CORPUS / "04-systemone-deadline-mixed"
    legacy = tmp_path / "router.yaml"
    shutil.copy(case / "input.yaml", legacy)
    expected = (case / "expected.yaml").read_text()

    printed = cli("config", "migrate", str(legacy))
    assert printed.returncode == 0 and printed.stdout == expected
    assert legacy.read_text() == (case / "input.yaml").read_text()  # printing never touches the file

    check = cli("config", "migrate", "--check", str(legacy))
    assert check.returncode == 1 and "migration due (format 1 -> 2)" in check.stdout

    out = tmp_path / "new.yaml"
    assert cli("config", "migrate", str(legacy), "-o", str(out)).returncode == 0
    assert out.read_text() == expected

    legacy.chmod(0o640)
    assert cli("config", "migrate", "--in-place", str(legacy)).returncode == 0
    assert legacy.read_text() == expected and (legacy.stat().st_mode & 0o777) == 0o640
    again = cli("config", "migrate", "--check", str(legacy))
    assert again.returncode == 0 and "up to date (format 2)" in again.stdout


def test_migrate_refuses_without_writing(cli, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    newer = tmp_path / "newer.yaml"
    newer.write_text("version: 9\n")
    run = cli("config", "migrate", "--in-place", str(newer))
    assert run.returncode == 2 and "config format 9 is newer than this vllm-sr understands" in run.stderr
    broken = tmp_path / "broken.yaml"
    text = "listeners:\n  - {name: a, port: 1, models: [ghost]}\n"
    broken.write_text(text)
    run = cli("config", "migrate", "--in-place", str(broken))
    assert run.returncode == 1 and "unknown model 'ghost'" in run.stderr and "nothing was written" in run.stderr
    assert broken.read_text() == text and "Traceback" not in run.stderr
    both = cli("config", "migrate", "--in-place", "-o", str(tmp_path / "x.yaml"), str(broken))
    assert both.returncode == 2


def test_schema_exports_the_config_json_schema(cli, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    out = tmp_path / "schema.json"
    assert cli("config", "schema", "-o", str(out)).returncode == 0
    schema = json.loads(out.read_text())
    assert set(schema["properties"]) == {
        "version",
        "providers",
        "deployments",
        "pools",
        "listeners",
        "signals",
        "virtual_models",
        "judges",
        "tracing",
    }
    deployment = schema["$defs"]["Deployment"]["properties"]
    assert deployment["schema"]["default"] == "systemone/0.2" and deployment["max_concurrency"]["default"] == 8
