"""`vllm-sr serve` probed as another user on the same host would, and by its owner turning Envoy's
debug logging on (issue 28): no key in any file the stack writes, no door open to others."""

from __future__ import annotations

import os
import pwd
import re
import shutil
import signal
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from sr_control.stack import Ports, admin_get
from tests.e2e.upstreams import Upstream
from tests.stack.test_serve_stack import SEED_002_CURL, _free_offset, _get, child_environ, start_stack

LISTENER_KEY = "listener-key-for-the-stack-9f3"
PROVIDER_KEY = "provider-key-for-the-stack-41c"
CLIENT_QUERY_KEY = "client-query-key-77d"
CLIENT_HEADER_KEY = "client-header-key-2be"


def _config(ports: Ports, provider: str) -> str:
    return f"""version: 2
providers:
  models:
    - name: gpt
      api_format: chat_completions
      endpoints: ["{provider}/v1"]
      api_key_env: VSR_T_PROVIDER_KEY
deployments:
  local:
    provider: systemone
    endpoint: http://127.0.0.1:{ports.runtime}/v1/systemone
    model: default
    schema: vllm-sr/5.0
    api_key_env: VLLM_SR_RUNTIME_KEY
listeners:
  - name: keyed
    address: 127.0.0.1
    port: {ports.listener}
    auth: {{keys_env: VSR_T_LISTENER_KEYS}}
    apis:
      systemone: {{models: [default], max_deadline_ms: 10000}}
      chat_completions: {{models: [gpt]}}
"""


def _as_nobody_connect(path: Path) -> subprocess.CompletedProcess[str]:
    nobody = pwd.getpwnam("nobody")
    script = f"import socket; s = socket.socket(socket.AF_UNIX); s.connect({str(path)!r})"
    return subprocess.run(
        [
            shutil.which("setpriv") or "setpriv",
            f"--reuid={nobody.pw_uid}",
            f"--regid={nobody.pw_gid}",
            "--clear-groups",
            sys.executable,
            "-c",
            script,
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )


@pytest.mark.slow
def test_serve_keeps_every_key_out_of_its_files_and_every_door_shut_to_others(tmp_path: Path) -> None:
    offset = _free_offset()
    ports = Ports().shifted(offset)
    provider = Upstream("provider")
    config = tmp_path / "config.yaml"
    config.write_text(_config(ports, provider.url))
    state = tmp_path / "state"
    env = {
        **os.environ,
        "VSR_T_PROVIDER_KEY": PROVIDER_KEY,
        "VSR_T_LISTENER_KEYS": f"{LISTENER_KEY}, another-listener-key-5e1",
    }
    stack = start_stack(
        ["--config", str(config), "--port-offset", str(offset), "--state-dir", str(state)], tmp_path / "out.txt", env
    )
    try:
        summary = (tmp_path / "out.txt").read_text()
        sockets = {
            m.group(1): Path(m.group(2))
            for m in re.finditer(r"^(ext_proc sidecar|envoy admin) +unix:(\S+)", summary, re.M)
        }
        admin, sidecar = sockets["envoy admin"], sockets["ext_proc sidecar"]
        runtime_key = child_environ(stack.pid, "vllm-srun")["VLLM_SR_RUNTIME_KEY"]

        # Each child holds only the keys it reads.
        runtime_env, sidecar_env, envoy_env = (child_environ(stack.pid, p) for p in ("vllm-srun", "vllm-sr", "envoy"))
        assert "VSR_T_PROVIDER_KEY" not in runtime_env and "VSR_T_LISTENER_KEYS" not in runtime_env
        assert (
            "VSR_T_PROVIDER_KEY" not in sidecar_env
            and sidecar_env["VSR_T_LISTENER_KEYS"]
            and sidecar_env["VLLM_SR_RUNTIME_KEY"] == runtime_key
        )
        assert (
            "VSR_T_LISTENER_KEYS" not in envoy_env
            and envoy_env["VSR_T_PROVIDER_KEY"] == PROVIDER_KEY
            and envoy_env["VLLM_SR_RUNTIME_KEY"] == runtime_key
        )

        # The owner turns Envoy's debug logging on (its admin socket is the owner's), then traffic
        # with every kind of key goes through.
        assert admin_get(admin, "/logging?level=debug", method="POST")[0] == 200
        listener = f"http://127.0.0.1:{ports.listener}"
        status, answer = _get(
            f"{listener}/v1/systemone?key={CLIENT_QUERY_KEY}", SEED_002_CURL, authorization=f"Bearer {LISTENER_KEY}"
        )
        assert status == 200 and answer["answers"]["urgent"]["type"] == "noul"
        chat = {"model": "gpt", "messages": [{"role": "user", "content": "hi"}]}
        status, seen = _get(
            f"{listener}/v1/chat/completions?api_key={CLIENT_QUERY_KEY}&stream=false",
            chat,
            authorization=f"Bearer {LISTENER_KEY}",
            **{"x-api-key": CLIENT_HEADER_KEY},
        )
        assert status == 200
        # The provider gets its own key from Envoy, and none of the client's.
        assert seen["authorization"] == f"Bearer {PROVIDER_KEY}" and seen["x-api-key"] is None
        assert seen["path"] == "/v1/chat/completions?stream=false"
        assert _get(f"{listener}/v1/systemone", SEED_002_CURL)[0] == 401
        # The runtime answers no caller without the stack's key.
        status, refused = _get(f"http://127.0.0.1:{ports.runtime}/v1/systemone", SEED_002_CURL)
        assert status == 401 and refused["detail"]["error_type"] == "authentication_error"
        assert admin_get(admin, "/logging?level=warning", method="POST")[0] == 200

        # The sockets: this user's alone, in a folder of its own.
        for path in (admin, sidecar):
            assert stat.S_IMODE(path.stat().st_mode) == 0o600 and stat.S_IMODE(path.parent.stat().st_mode) == 0o700
        if os.geteuid() == 0 and shutil.which("setpriv"):
            # Another user, even one who could reach the folder, cannot connect to either: the
            # sidecar refuses before reading any ext_proc message, Envoy's admin before any request.
            path_mode = stat.S_IMODE(sidecar.parent.stat().st_mode)
            os.chmod(sidecar.parent, 0o755)
            try:
                for path in (sidecar, admin):
                    other = _as_nobody_connect(path)
                    assert other.returncode != 0 and "PermissionError" in other.stderr, other.stderr
            finally:
                os.chmod(sidecar.parent, path_mode)

        stack.send_signal(signal.SIGTERM)
        assert stack.wait(timeout=60) == 0
    finally:
        if stack.poll() is None:
            os.killpg(stack.pid, signal.SIGKILL)
            stack.wait()
        provider.stop()

    # Every file the stack wrote: no key, though debug logging dumped each request's headers.
    written = [p for p in state.rglob("*") if p.is_file()]
    assert {p.name for p in written} >= {"envoy.log", "extproc.log", "runtime.log", "config.yaml", "bootstrap.yaml"}
    envoy_log = (state / "logs" / "envoy.log").read_text()
    assert "'authorization', '[redacted]'" in envoy_log  # the debug lines were written, without their values
    for path in written:
        text = path.read_bytes()
        for key in (
            LISTENER_KEY,
            PROVIDER_KEY,
            runtime_key,
            CLIENT_QUERY_KEY,
            CLIENT_HEADER_KEY,
            "another-listener-key-5e1",
        ):
            assert key.encode() not in text, f"{key} in {path}"
    # The access log names paths without their query strings.
    access = [line for line in envoy_log.splitlines() if line.startswith('{"bytes_received"')]
    assert access and all('"path":"/v1/' in line and "?" not in line for line in access), access
    # Logs are this user's alone.
    assert stat.S_IMODE(state.stat().st_mode) == 0o700 and stat.S_IMODE((state / "logs").stat().st_mode) == 0o700
    assert all(stat.S_IMODE(p.stat().st_mode) == 0o600 for p in (state / "logs").iterdir())


def test_a_deployment_of_the_stacks_runtime_without_its_key_is_refused_before_anything_starts(tmp_path: Path) -> None:
    from sr_control.stack import Stack, StackError, StackOptions

    offset = _free_offset()
    ports = Ports().shifted(offset)
    config = tmp_path / "mine.yaml"
    config.write_text(_config(ports, "http://127.0.0.1:9").replace("    api_key_env: VLLM_SR_RUNTIME_KEY\n", ""))
    stack = Stack(StackOptions(state_dir=tmp_path / "state", config=config, ports=ports))
    with pytest.raises(StackError) as refused:
        stack.start()
    message = str(refused.value)
    assert (
        f"{config}: deployments.local reaches the stack's runtime" in message
        and "api_key_env: VLLM_SR_RUNTIME_KEY" in message
    )
    assert not (tmp_path / "state" / "logs" / "runtime.log").exists()  # nothing was started


@pytest.mark.parametrize(
    ("line", "shown"),
    [
        (b"'authorization', 'Bearer abc'", b"'authorization', '[redacted]'"),  # Envoy's debug header dump
        (b"'x-api-key', 'abc'", b"'x-api-key', '[redacted]'"),
        (
            b"':path', '/v1/chat?api_key=abc&stream=false&key=def'",
            b"':path', '/v1/chat?api_key=[redacted]&stream=false&key=[redacted]'",
        ),
        (b'{"authorization": "Bearer abc"}', b'{"authorization": "[redacted]"}'),
        (b"a known key sk-0123456789 anywhere", b"a known key [redacted] anywhere"),
        (b"a line about keys and tokens", b"a line about keys and tokens"),
    ],
)
def test_the_log_redactor_removes_keys_by_value_header_and_query(line: bytes, shown: bytes) -> None:
    from sr_control.redact import Redactor

    assert Redactor(["sk-0123456789", "short"]).line(line) == shown


def test_each_child_gets_only_the_key_variables_it_reads_and_unset_ones_are_named() -> None:
    from sr_control.config.load import load_text
    from sr_control.stack import Environments

    config = load_text(
        _config(Ports(), "http://127.0.0.1:9")
        + "  - {name: other, address: 127.0.0.1, port: 9, auth: {keys_env: VSR_T_UNSET}}\n"
    )
    environ = {
        "PATH": "/bin",
        "VSR_T_PROVIDER_KEY": PROVIDER_KEY,
        "VSR_T_LISTENER_KEYS": LISTENER_KEY,
        "VLLM_SR_RUNTIME_KEY": "inherited-and-dropped",
    }
    env = Environments.of(config, environ, "made-at-start")
    assert env.runtime == {"PATH": "/bin", "VLLM_SR_RUNTIME_KEY": "made-at-start"}
    assert env.sidecar == {"PATH": "/bin", "VSR_T_LISTENER_KEYS": LISTENER_KEY, "VLLM_SR_RUNTIME_KEY": "made-at-start"}
    assert env.envoy == {"PATH": "/bin", "VSR_T_PROVIDER_KEY": PROVIDER_KEY, "VLLM_SR_RUNTIME_KEY": "made-at-start"}
    assert env.missing == ("VSR_T_UNSET",)


def test_the_keys_of_a_listeners_keys_file_are_redacted_by_value_too(tmp_path: Path) -> None:
    from sr_control.config.load import load_text
    from sr_control.stack import _file_keys

    keys = tmp_path / "keys"
    keys.write_text("# one a line\nfile-key-one-0a1\nfile-key-two-9b2  # the second\n")
    config = load_text(
        _config(Ports(), "http://127.0.0.1:9").replace(
            "auth: {keys_env: VSR_T_LISTENER_KEYS}", f"auth: {{keys_file: {keys}}}"
        )
    )
    assert _file_keys(config) == ["file-key-one-0a1", "file-key-two-9b2"]
