"""The examples in docs/runtime/answer-command.md are real: they run and give what the page shows."""

from __future__ import annotations

import json
import re
from pathlib import Path

from typer.testing import CliRunner

from sr_runtime.cli import app

PAGE = Path(__file__).parents[2] / "docs" / "runtime" / "answer-command.md"


def _json_blocks() -> list[dict]:
    return [json.loads(block) for block in re.findall(r"```json\n(.*?)```", PAGE.read_text(), flags=re.S)]


def test_the_request_example_answers_as_shown(checkpoints: dict[str, Path], tmp_path: Path) -> None:
    request, _ = _json_blocks()
    path = tmp_path / "request.json"
    path.write_text(json.dumps(request))
    result = CliRunner().invoke(app, ["answer", str(checkpoints["llama-causal"]), str(path)])
    assert result.exit_code == 0
    response = json.loads(result.output)
    assert list(response) == ["model", "answers", "usage"]
    assert list(response["answers"]) == ["urgent", "team", "anger"]
    assert response["answers"]["anger"]["legend"] == {"0": "calm", "1": "annoyed", "2": "furious"}
    assert response["usage"]["output_tokens"] == 0


def test_the_error_example_is_what_an_eleven_level_score_gets(checkpoints: dict[str, Path], tmp_path: Path) -> None:
    _, error = _json_blocks()
    path = tmp_path / "request.json"
    path.write_text(
        json.dumps({"state": "s", "questions": {"wide": {"type": "score", "criteria": [str(i) for i in range(11)]}}})
    )
    result = CliRunner().invoke(app, ["answer", str(checkpoints["llama-causal"]), str(path)])
    assert result.exit_code == 1
    assert json.loads(result.stdout) == error
