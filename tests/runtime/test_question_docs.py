"""Every page of docs/questions/ is real: its request, answered by `vllm-srun answer` on the
preset it names, gives the answer it shows (rounded as shown)."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from sr_runtime.cli import app
from tests.media.files import b64, image, video

PAGES = Path(__file__).parents[2] / "docs" / "questions"
TYPES = ["noul", "choice", "score", "set", "span", "box", "track"]
MEDIA = {"PNG_BASE64": lambda: b64(image(1)), "MP4_BASE64": lambda: b64(video(2))}


def rounded(value: Any) -> Any:
    if isinstance(value, float):
        return round(value, 3)
    if isinstance(value, dict):
        return {k: rounded(v) for k, v in value.items()}
    if isinstance(value, list):
        return [rounded(v) for v in value]
    return value


@pytest.mark.parametrize("kind", TYPES)
def test_the_page_answers_as_shown(kind: str, checkpoints: dict[str, Path], tmp_path: Path) -> None:
    page = (PAGES / f"{kind}.md").read_text()
    preset = re.search(r"--preset (\S+)", page).group(1)  # type: ignore[union-attr]
    request, shown = (json.loads(block) for block in re.findall(r"```json\n(.*?)```", page, flags=re.S))
    text = json.dumps(request, ensure_ascii=False)
    for marker, data in MEDIA.items():
        if marker in text:
            text = text.replace(marker, data())
    path = tmp_path / "request.json"
    path.write_text(text)
    result = CliRunner().invoke(app, ["answer", str(checkpoints[preset]), str(path)])
    assert result.exit_code == 0, result.output
    assert rounded(json.loads(result.output)) == shown


def test_the_index_links_a_page_per_type() -> None:
    index = (PAGES / "README.md").read_text()
    assert [t for t in TYPES if f"]({t}.md)" in index] == TYPES
