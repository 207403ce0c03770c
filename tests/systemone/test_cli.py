"""The operator commands: vllm-sr schemas ... and vllm-sr systemone ..."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner
from typesafe_sdk._schemas import models as sdk_models

from sr_control.cli import app
from systemone.generator import OUTPUTS
from systemone.specs import SPEC_DIR

ROOT = Path(__file__).resolve().parents[2]
runner = CliRunner()


def invoke(*args: str, input: str | None = None):  # type: ignore[no-untyped-def]
    return runner.invoke(app, list(args), input=input)


@pytest.fixture
def repo_copy(tmp_path: Path) -> Path:
    """The specs and generated files, copied, so a test can break them."""
    shutil.copytree(ROOT / SPEC_DIR, tmp_path / SPEC_DIR)
    for rel in OUTPUTS:
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(ROOT / rel, tmp_path / rel)
    return tmp_path


def test_schemas_check_passes_on_the_repository_as_ci_runs_it() -> None:
    vllm_sr = Path(sys.executable).parent / "vllm-sr"
    result = subprocess.run([str(vllm_sr), "schemas", "check"], capture_output=True, text=True, cwd=ROOT, check=False)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "schemas: 3 specs agree; 5 generated files are current"


def test_schemas_check_names_a_stale_file_and_generate_fixes_it(repo_copy: Path) -> None:
    spec = repo_copy / SPEC_DIR / "vllm-sr-5.0.extensions.yaml"
    spec.write_text(spec.read_text().replace("Adds meta to the response.", "Adds meta (timings) to the response."))
    result = invoke("schemas", "check", "--root", str(repo_copy))
    assert result.exit_code == 1
    assert "systemone/generated/fields.py: error: stale; run `vllm-sr schemas generate`" in result.output
    assert "docs/reference/systemone-extensions.md: error: stale" in result.output
    result = invoke("schemas", "generate", "--root", str(repo_copy))
    assert result.exit_code == 0 and "wrote docs/reference/systemone-extensions.md" in result.output
    assert invoke("schemas", "check", "--root", str(repo_copy)).exit_code == 0


def test_schemas_check_and_generate_refuse_specs_that_give_a_field_two_meanings(repo_copy: Path) -> None:
    legacy = repo_copy / SPEC_DIR / "vllm-sr-4.0.openapi.yaml"
    legacy.write_text(
        legacy.read_text().replace("overflow: {type: string, enum: [window, truncate]}", "overflow: {type: integer}")
    )
    result = invoke("schemas", "check", "--root", str(repo_copy))
    assert result.exit_code == 1 and "question.overflow: two meanings" in result.output
    result = invoke("schemas", "generate", "--root", str(repo_copy))
    assert result.exit_code == 1 and "nothing was written" in result.output


def test_schemas_drift_against_a_local_file(tmp_path: Path) -> None:
    result = invoke("schemas", "drift", sdk_models.__file__)
    assert result.exit_code == 0 and "0 differences" in result.output
    changed = tmp_path / "models.py"
    changed.write_text(
        Path(sdk_models.__file__)
        .read_text()
        .replace("    output_tokens: int = Field(", "    output_tokens: float = Field(")
    )
    result = invoke("schemas", "drift", str(changed), "--format", "json")
    assert result.exit_code == 1
    assert json.loads(result.output)["differences"] == ["Usage.output_tokens: type: ours integer, published number"]
    assert invoke("schemas", "drift", str(tmp_path / "missing.json")).exit_code == 2


def test_systemone_check_explains_an_accepted_request(tmp_path: Path) -> None:
    file = tmp_path / "r.json"
    file.write_text('{"state": {"request": "hi"}, "questions": {"t": {"type": "choice", "choices": ["a", "b"]}}}')
    result = invoke("systemone", "check", "--schema", "vllm-sr/4.0", str(file))
    assert result.exit_code == 0
    out = json.loads(result.output)
    assert list(out) == ["status", "plan", "legacy_forms", "ir", "internal", "error"]
    assert out["status"] == "accepted" and out["plan"]["kind"] == "passthrough"
    assert out["legacy_forms"] == ["choices", "implicit_roles"]
    assert out["ir"]["questions"]["t"] == {
        "type": "choice",
        "criteria": {"a": None, "b": None},
        "spelled_as": "choices",
    }


def test_systemone_check_says_why_a_request_is_refused() -> None:
    result = invoke(
        "systemone",
        "check",
        "--schema",
        "vllm-sr/5.0",
        "-",
        input='{"state": "x", "states": ["y"], "questions": {"q": {"type": "noul"}}}',
    )
    assert result.exit_code == 1
    out = json.loads(result.output)
    assert out["status"] == "refused" and out["error"]["status"] == 400
    assert out["error"]["body"]["detail"]["message"] == "vllm-sr/5.0 does not define this member: states"


def test_systemone_check_header_makes_a_convert_plan(tmp_path: Path) -> None:
    file = tmp_path / "r.json"
    file.write_text('{"state": "long", "questions": {"q": {"type": "noul"}}}')
    result = invoke(
        "systemone", "check", "--schema", "vllm-sr/4.0", "-H", "TypeSafe-Danger-Zone-Long-Context: true", str(file)
    )
    out = json.loads(result.output)
    assert (
        out["plan"]["kind"] == "convert"
        and out["internal"]
        == '{"state": "long", "questions": {"q": {"type": "noul"}}, "options": {"long_context": true}}'
    )


def test_systemone_check_refuses_unusable_input(tmp_path: Path) -> None:
    assert invoke("systemone", "check", "--schema", "vllm-sr/9.9", str(tmp_path)).exit_code == 2
    assert invoke("systemone", "check", "--schema", "vllm-sr/5.0", str(tmp_path / "none.json")).exit_code == 2


def test_systemone_plan_prints_the_split_calls(tmp_path: Path) -> None:
    file = tmp_path / "r.json"
    file.write_text('{"states": ["a", {"k": 1e3}], "questions": {"q": {"type": "noul", "preset": "toxicity"}}}')
    result = invoke(
        "systemone",
        "plan",
        "--listener",
        "vllm-sr/4.0",
        "--target",
        "systemone/0.2",
        "--deviation",
        "state_text",
        "--max-concurrency",
        "1",
        "--model",
        "d3",
        str(file),
    )
    assert result.exit_code == 0, result.output
    out = json.loads(result.output)
    assert out["max_concurrency"] == 1 and [c["answers"] for c in out["calls"]] == [["0"], ["1"]]
    assert out["calls"][1]["json"]["state"] == '{"k": 1000.0}'
    assert (
        out["calls"][0]["json"]["questions"]["q"]["instructions"] == "Is the message abusive, hateful or threatening?"
    )


def test_systemone_plan_refuses_what_the_target_cannot_carry(tmp_path: Path) -> None:
    file = tmp_path / "r.json"
    file.write_text('{"state": "x", "questions": {"q": {"type": "span", "criteria": {"email": null}}}}')
    result = invoke("systemone", "plan", "--target", "systemone/0.2", str(file))
    assert result.exit_code == 1 and json.loads(result.output)["error"]["body"]["code"] == "unsupported_capability"
    assert invoke("systemone", "plan", "--target", "vllm-sr/4.0", str(file)).exit_code == 2


def test_help_names_the_commands() -> None:
    result = invoke("systemone", "--help")
    assert result.exit_code == 0 and "check" in result.output and "plan" in result.output
    result = invoke("schemas", "--help")
    assert all(word in result.output for word in ("generate", "check", "drift"))


def test_the_troubleshooting_page_example_is_what_the_command_prints(tmp_path: Path) -> None:
    page = (ROOT / "docs/systemone/troubleshooting.md").read_text(encoding="utf-8")
    request = page.split("```json\n", 1)[1].split("```", 1)[0]
    file = tmp_path / "old-client.json"
    file.write_text(request)
    refused = json.loads(invoke("systemone", "check", "--schema", "vllm-sr/5.0", str(file)).output)
    message = refused["error"]["body"]["detail"]["message"]
    assert f'"message": "{message}"' in page
    accepted = json.loads(invoke("systemone", "check", "--schema", "vllm-sr/4.0", str(file)).output)
    assert f'"legacy_forms": {json.dumps(accepted["legacy_forms"])}' in page
    span = tmp_path / "span.json"
    span.write_text(
        '{"state": "Mail me at jane@example.com", "questions": {"pii": {"type": "span", "criteria": {"email": null}}}}'
    )
    planned = json.loads(invoke("systemone", "plan", "--target", "systemone/0.2", str(span)).output)
    assert f'"message": "{planned["error"]["body"]["detail"]["message"]}"' in page
