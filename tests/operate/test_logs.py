"""``vllm-sr logs`` over a state directory's logs: each part's tail, or one request's lines."""

from __future__ import annotations

from pathlib import Path

from typer.testing import CliRunner

from sr_control.cli import app
from sr_control.operate.logs import tail

REQUEST = "1b58468a-ae84-4962-b8f4-987c85ecc7b0"


def _state(tmp_path: Path) -> Path:
    logs = tmp_path / "state" / "logs"
    logs.mkdir(parents=True)
    (logs / "envoy.log").write_text(
        '{"request_id": "0000", "status": 200}\n'
        f'{{"request_id": "{REQUEST}", "path": "/v1/systemone", "status": 200, "member": "full"}}\n'
    )
    (logs / "extproc.log").write_text(f"[warning] failing over  member=backup request_id={REQUEST}\n[info] other\n")
    (logs / "runtime.log").write_text("".join(f"line {i}\n" for i in range(100)))
    return tmp_path / "state"


def _logs(*args: str) -> tuple[int, str]:
    done = CliRunner().invoke(app, ["logs", *args])
    return done.exit_code, done.output


def test_a_request_is_followed_through_every_part_by_its_id(tmp_path: Path) -> None:
    code, out = _logs("--state-dir", str(_state(tmp_path)), "--request-id", REQUEST)
    assert code == 0
    assert out.splitlines() == [
        f'envoy   | {{"request_id": "{REQUEST}", "path": "/v1/systemone", "status": 200, "member": "full"}}',
        f"extproc | [warning] failing over  member=backup request_id={REQUEST}",
    ]


def test_each_parts_last_lines_or_the_parts_asked(tmp_path: Path) -> None:
    state = str(_state(tmp_path))
    code, out = _logs("runtime", "--state-dir", state, "-n", "2")
    assert (code, out.splitlines()) == (0, ["runtime | line 98", "runtime | line 99"])
    code, out = _logs("--state-dir", state, "-n", "1")
    assert out.splitlines() == [
        "envoy   | " + (tmp_path / "state/logs/envoy.log").read_text().splitlines()[-1],
        "extproc | [info] other",
        "runtime | line 99",
    ]


def test_an_unknown_part_or_a_folder_without_logs_exits_2(tmp_path: Path) -> None:
    code, out = _logs("router", "--state-dir", str(_state(tmp_path)))
    assert code == 2 and "no log of router" in out and "there are envoy, extproc, runtime" in out
    code, out = _logs("--state-dir", str(tmp_path / "nowhere"))
    assert code == 2 and "no logs under" in out


def test_tail_reads_lines_across_blocks_from_the_end(tmp_path: Path) -> None:
    big = tmp_path / "big.log"
    big.write_text("".join(f"{i:06d} " + "x" * 200 + "\n" for i in range(2000)))  # ~400 KiB: several blocks
    shown = tail(big, 700)
    assert len(shown) == 700 and shown[0].startswith("001300 ") and shown[-1].startswith("001999 ")
