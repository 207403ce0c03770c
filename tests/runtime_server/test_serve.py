"""`vllm-srun serve` as users run it: the process, the seed's curl example, jevcompat, the SDK."""

from __future__ import annotations

import json
import re
import shutil
import socket
import subprocess
from pathlib import Path
from typing import Any

import httpx
import pytest
from jevcompat import runner
from typer.testing import CliRunner
from typesafe_sdk import (
    Box,
    Choice,
    Image,
    Noul,
    RetryPolicy,
    Score,
    TypeSafeAuthenticationError,
    TypeSafeClient,
    TypeSafeUnprocessableEntityError,
)

from sr_runtime.cli import app
from tests.conftest import same_to

from .conftest import SEED_002_STATE, VLLM_SRUN, vllm_srun_serve

DOCS = Path(__file__).parents[2] / "docs" / "runtime"
# The one SHOULD a vllm-sr/5.0 server fails on purpose (docs/runtime/conformance.md).
EXPECTED_SHOULD_FAILURES = {"request.unknown-fields"}


def run(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([VLLM_SRUN, "serve", *args], capture_output=True, text=True, timeout=120, env=env)


def test_help_lists_every_flag_of_the_issue() -> None:
    result = CliRunner().invoke(app, ["serve", "--help"])
    assert result.exit_code == 0
    for flag in (
        "--device",
        "--host",
        "--port",
        "--systemone-schema",
        "--max-model-len",
        "--api-key-env",
        "--max-batch-tokens",
        "--state-cache-mb",
        "--max-queue",
        "--threads",
        "--workers",
    ):
        assert flag in result.output
    assert result.output.index("Serve MODEL over the System One API") < result.output.index("--device")


def test_the_seeds_model_name_fails_at_start_with_one_line() -> None:
    done = run("vllm-sr/vela3-fast", "--device", "cpu", "--port", "8100")
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == [
        "unknown model 'vllm-sr/vela3-fast': not a folder, and not a built-in (default, smollm2-135m); "
        "give a built-in name or the path of a checkpoint folder"
    ]


@pytest.mark.parametrize(
    ("args", "line"),
    [
        (
            ["--systemone-schema", "vllm-sr/6.0"],
            "--systemone-schema 'vllm-sr/6.0' is not served (supported: vllm-sr/5.0, vllm-sr/4.0, systemone/0.2)",
        ),
        (
            ["--api-key-env", "VLLM_SR_TEST_NO_SUCH_VAR"],
            "--api-key-env VLLM_SR_TEST_NO_SUCH_VAR: the variable is not set or empty",
        ),
        (["--device", "gpu0"], "unknown device 'gpu0' (cpu, cuda, cuda:N)"),
        (["--max-queue", "0"], "--max-queue must be at least 1, not 0"),
        (["--threads", "0"], "--threads must be at least 1, not 0"),
        pytest.param(
            ["--max-model-len", "99999999"],
            "--max-model-len 99999999 is above the checkpoint's max_length 32768",
            marks=pytest.mark.slow,
        ),
    ],
)
def test_unusable_flags_fail_at_start_with_one_line(checkpoint: Path, args: list[str], line: str) -> None:
    done = run(str(checkpoint), *args)
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == [line]


def test_a_port_in_use_fails_with_one_line(checkpoint: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        done = run(str(checkpoint), "--port", str(port))
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == [f"cannot listen on 127.0.0.1:{port}: Address already in use"]


@pytest.mark.slow
def test_a_model_that_fails_to_load_stops_the_server_with_exit_2(checkpoint: Path, tmp_path: Path) -> None:
    """The weights are read only after the server is up: their failure still ends it, in one line."""
    folder = Path(shutil.copytree(checkpoint, tmp_path / "torn"))
    (folder / "model.safetensors").write_bytes(b"not safetensors")
    done = run(str(folder), "--port", "0")
    assert done.returncode == 2
    assert done.stderr.strip().splitlines()[-1].startswith(f"cannot load {folder}: SafetensorError: ")
    assert "Traceback" not in done.stderr


# ---------------------------------------------------------------------------- docs examples


def curl_examples(page: str) -> list[tuple[str, dict[str, Any], dict[str, Any]]]:
    """Each `curl ... -d '{...}'` block of a page with the JSON answer block shown after it."""
    pattern = (
        r"```\ncurl -s localhost:8100(\S+) -H 'content-type: application/json' -d '(.*?)'\n```\n\n.*?```json\n(.*?)```"
    )
    return [
        (path, json.loads(request), json.loads(answer))
        for path, request, answer in re.findall(pattern, page, flags=re.S)
    ]


def same_answers(got: Any, shown: Any) -> bool:
    """`got` is what the docs show: the same members in the same order and the same strings and
    integers, each probability within 0.005 of the one shown (to 3 places there; float32 sums
    may differ in their last bits by CPU, so no test pins a figure only some CPUs produce)."""
    return same_to(got, shown, 0.005)


def sdk_answers(url: str, key: str) -> dict[str, Any]:
    with TypeSafeClient(api_key=key, base_url=url) as client:
        r = client.system_one(
            state=SEED_002_STATE,
            questions={
                "urgent": Noul(instructions="Does the user report a problem that blocks their work?"),
                "team": Choice(
                    instructions="Which team should handle this?",
                    criteria={"billing": "Payments", "engineering": "Outages and bugs"},
                ),
                "anger": Score(instructions="How angry is the customer?", criteria=["calm", "annoyed", "furious"]),
            },
        )
        assert [m.name for m in client.models.list().models] == [r.model]
    return {"urgent": r.nouls["urgent"].noul, "team": r.choices["team"].choice, "anger": r.scores["anger"].score}


def assert_box_is_the_documented_422(url: str, key: str) -> None:
    """The SDK sends an attached image as multipart; no model here answers box: 422."""
    with (
        TypeSafeClient(api_key=key, base_url=url, retry=RetryPolicy(max_retries=0)) as client,
        pytest.raises(TypeSafeUnprocessableEntityError) as caught,
    ):
        client.system_one(
            state=Image(b"\x89PNG\r\n\x1a\n" + b"\0" * 64), questions={"dog": Box(instructions="the dog")}
        )
    assert caught.value.status == 422
    assert caught.value.body["reason"] == "unsupported_question_type"


def assert_conformant(url: str, key: str | None = None) -> None:
    report = runner.run(url, key=key, timeout=60)
    summary = report.summary()
    failed = {r.id: [f.message for f in r.findings] for r in report.results if r.status == "fail"}
    assert report.verdict == "conformant", failed
    assert summary["MUST"]["passed"] == 32, summary
    assert set(failed) == EXPECTED_SHOULD_FAILURES, failed


@pytest.mark.slow
def test_default_serves_the_seeds_curl_example_and_is_conformant() -> None:
    """`vllm-srun serve default --device cpu`: the docs' curl examples, jevcompat, the SDK (auth off)."""
    with vllm_srun_serve("default", "--device", "cpu") as server:
        examples = curl_examples((DOCS / "server.md").read_text())
        assert len(examples) >= 2
        for path, request, shown in examples:
            response = httpx.post(server.url + path, json=request, timeout=60)
            assert response.status_code == 200, response.text
            assert same_answers(response.json(), shown), (response.json(), shown)
        unknown = httpx.post(server.url + "/v1/systemone", json={**examples[0][1], "model": "vllm-sr/vela3-fast"})
        shown = re.search(r"## Model names.*?```json\n(.*?)```", (DOCS / "server.md").read_text(), flags=re.S)
        assert shown is not None and unknown.status_code == 400 and unknown.json() == json.loads(shown.group(1))
        assert_conformant(server.url)
        answers = sdk_answers(server.url, key="not-checked")
        assert answers["team"] == "engineering" and 0 <= answers["urgent"] <= 1 and 0 <= answers["anger"] <= 2
        assert_box_is_the_documented_422(server.url, key="not-checked")


@pytest.mark.slow
def test_a_tiny_prefix_bidir_checkpoint_with_auth_is_conformant(checkpoint: Path) -> None:
    with vllm_srun_serve(
        str(checkpoint), "--api-key-env", "VLLM_SR_TEST_KEY", env={"VLLM_SR_TEST_KEY": "sekrit"}
    ) as server:
        assert "auth=True" in server.lines[0]
        assert_conformant(server.url, key="sekrit")
        answers = sdk_answers(server.url, key="sekrit")
        assert answers["team"] in ("billing", "engineering")
        assert_box_is_the_documented_422(server.url, key="sekrit")
        with (
            TypeSafeClient(api_key="wrong", base_url=server.url) as client,
            pytest.raises(TypeSafeAuthenticationError) as caught,
        ):
            client.system_one(state="x", questions={"q": Noul(instructions="?")})
        assert caught.value.status == 401
        # Two Authorization headers are refused in either order, as the sidecar refuses them.
        body = {"state": "x", "questions": {"q": {"type": "noul", "instructions": "?"}}}
        for pair in (["Bearer sekrit", "Bearer wrong"], ["Bearer wrong", "Bearer sekrit"]):
            two = httpx.post(server.url + "/v1/systemone", json=body, headers=[("authorization", v) for v in pair])
            assert two.status_code == 401 and "two Authorization headers" in two.json()["detail"]["message"]


def test_the_listening_socket_turns_nagle_off_for_every_connection() -> None:
    """Without TCP_NODELAY each keep-alive response waits ~40 ms for the client's delayed ACK."""
    import asyncio

    from sr_runtime.server.process import bind

    async def accepted_nodelay() -> int:
        seen: asyncio.Future[int] = asyncio.get_running_loop().create_future()

        class Probe(asyncio.Protocol):
            def connection_made(self, transport: asyncio.BaseTransport) -> None:
                seen.set_result(transport.get_extra_info("socket").getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY))
                transport.close()

        server = await asyncio.get_running_loop().create_server(Probe, sock=bind("127.0.0.1", 0))
        port = server.sockets[0].getsockname()[1]
        _, writer = await asyncio.open_connection("127.0.0.1", port)
        try:
            return await asyncio.wait_for(seen, 10)
        finally:
            writer.close()
            server.close()

    assert asyncio.run(accepted_nodelay()) != 0


def test_light_rounds_leave_the_event_loop_a_core_and_heavy_rounds_take_every_core(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import torch

    from sr_runtime.server import ServerSettings
    from sr_runtime.server.threads import HEAVY_ROUND, MathThreads, RoundThreads, math_threads

    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    monkeypatch.setattr("os.sched_getaffinity", lambda pid: {0, 1, 2, 3})
    assert math_threads(ServerSettings("default")) == MathThreads(light=3, heavy=4)
    monkeypatch.setattr("os.sched_getaffinity", lambda pid: {0})
    assert math_threads(ServerSettings("default")) == MathThreads(1, 1)
    assert math_threads(ServerSettings("default", threads=2)) == MathThreads(2, 2)  # --threads wins
    assert math_threads(ServerSettings("default", device="cuda")) is None  # torch's own choice
    monkeypatch.setenv("OMP_NUM_THREADS", "4")
    assert math_threads(ServerSettings("default")) is None  # the operator's OMP_NUM_THREADS

    before = torch.get_num_threads()
    try:
        rounds = RoundThreads(MathThreads(1, 2))
        rounds(4)  # one request of four questions
        assert torch.get_num_threads() == 1
        rounds(HEAVY_ROUND)  # many requests packed into one round
        assert torch.get_num_threads() == 2
        rounds(HEAVY_ROUND - 1)
        assert torch.get_num_threads() == 1
    finally:
        torch.set_num_threads(before)
