"""Where keys go, probed as an attacker on the same host would (issue 28).

An upstream's key is added by Envoy as the request leaves, from Envoy's environment, so no
ext_proc answer carries one; a client's credentials never reach an upstream that has a key of its
own, nor any upstream behind a listener with keys; the sidecar takes a config version only for
the listener it belongs to; its Unix socket lets no other user connect.
"""

from __future__ import annotations

import json
import os
import pwd
import shutil
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from tests.extproc.conftest import LISTENER_KEY, PROVIDER_KEY, RUNTIME_KEY
from tests.extproc.harness import SidecarProc, World
from tests.extproc.test_fuzz import VALID, _exchange

pytestmark = pytest.mark.envoy

CHAT = {"model": "chat-b", "messages": [{"role": "user", "content": "hi"}]}
CLIENT_CREDENTIALS = {
    "authorization": "Bearer client-own-key",
    "x-api-key": "client-x-key",
    "api-key": "client-azure-key",
}
KEYED_QUERY = "?key=client-q1&api_key=client-q2&access_token=client-q3&keep=1"


def test_a_provider_with_a_key_gets_its_own_and_none_of_the_clients(world: World) -> None:
    seen = world.post("chat", f"/v1/chat/completions{KEYED_QUERY}", CHAT, **CLIENT_CREDENTIALS).json()
    assert seen["authorization"] == f"Bearer {PROVIDER_KEY}"  # added by Envoy, from its environment
    assert seen["x-api-key"] is None and seen["api-key"] is None
    assert seen["path"] == "/openai/v1/chat/completions?keep=1"  # the query's keys removed, the rest kept
    assert seen["x-envoy-original-path"] == "/v1/chat/completions"
    claude = world.post(
        "chat", f"/v1/messages{KEYED_QUERY}", {**CHAT, "model": "claude-x", "max_tokens": 5}, **CLIENT_CREDENTIALS
    ).json()
    assert claude["x-api-key"] == PROVIDER_KEY and claude["authorization"] is None and claude["api-key"] is None
    assert "client-q" not in json.dumps(claude)


def test_behind_a_listener_with_keys_no_client_credential_goes_upstream(world: World) -> None:
    headers = {**CLIENT_CREDENTIALS, "authorization": f"Bearer {LISTENER_KEY}"}
    seen = world.post("keyed", f"/v1/chat/completions{KEYED_QUERY}", {**CHAT, "model": "chat-a"}, **headers)
    assert seen.status == 200, seen.body
    body = seen.json()
    assert body["authorization"] is None and body["x-api-key"] is None and body["api-key"] is None
    assert body["path"] == "/v1/chat/completions?keep=1"


def test_a_keyless_listener_to_a_keyless_provider_lets_the_clients_own_key_through(world: World) -> None:
    seen = world.post("chat", "/v1/chat/completions?key=own", {**CHAT, "model": "chat-a"}, **CLIENT_CREDENTIALS).json()
    assert (
        seen["authorization"] == "Bearer client-own-key"
        and seen["x-api-key"] == "client-x-key"
        and seen["path"].endswith("?key=own")
    )


def test_no_ext_proc_answer_carries_an_upstream_key_even_from_a_sidecar_holding_them(
    world: World, tmp_path: Path
) -> None:
    """The worst case: a sidecar given every key (as one was before issue 28). Forwarded answers
    (Envoy calls the member or provider) and the answers it makes itself hold none of them."""
    env = {"VSR_TEST_RUNTIME_KEY": RUNTIME_KEY, "VSR_TEST_PROVIDER_KEY": PROVIDER_KEY}
    sidecar = SidecarProc(tmp_path, world.plane.port, env=env, args=("--forwarding", "envoy")).wait()
    try:
        json_type = [("content-type", "application/json")]
        chat = [
            ("x-vsr-listener", "chat"),
            ("x-vsr-api", "chat_completions"),
            ("x-vsr-config-version", world.plane_sidecar_version("chat")),
        ]
        v50 = [
            ("x-vsr-listener", "v50"),
            ("x-vsr-api", "systemone"),
            ("x-vsr-config-version", world.plane_sidecar_version("v50")),
        ]
        answers = [
            *_exchange(sidecar.port, chat, "/v1/chat/completions", json_type, json.dumps(CHAT).encode()),
            *_exchange(
                sidecar.port,
                [chat[0], ("x-vsr-api", "messages"), chat[2]],
                "/v1/messages",
                json_type,
                json.dumps({**CHAT, "model": "claude-x"}).encode(),
            ),
            *_exchange(
                sidecar.port, v50, "/v1/systemone", json_type, json.dumps({**VALID, "model": "tiny-26"}).encode()
            ),  # the keyed runtime
        ]
        forwarded = [a for a in answers if a.HasField("request_body")]
        assert len(forwarded) == 3, answers  # each went on to Envoy (a cluster named), none answered here
        for answer in answers:
            wire = answer.SerializeToString()
            assert PROVIDER_KEY.encode() not in wire and RUNTIME_KEY.encode() not in wire
            assert "authorization" not in {
                h.header.key for h in answer.request_body.response.header_mutation.set_headers
            }
    finally:
        sidecar.stop()


def test_a_config_version_is_taken_only_for_its_own_listener(world: World) -> None:
    """Naming the version of a listener without keys does not lend its lack of keys to another."""
    metadata = [
        ("x-vsr-listener", "keyed"),
        ("x-vsr-api", "chat_completions"),
        ("x-vsr-config-version", world.plane_sidecar_version("chat")),
    ]
    answer = _exchange(
        world.sidecar.port,
        metadata,
        "/v1/chat/completions",
        [("content-type", "application/json")],
        json.dumps(CHAT).encode(),
    )[-1]
    assert answer.HasField("immediate_response") and answer.immediate_response.status.code == 503
    # The listener's own version: the key is checked.
    metadata[2] = ("x-vsr-config-version", world.plane_sidecar_version("keyed"))
    answer = _exchange(
        world.sidecar.port,
        metadata,
        "/v1/chat/completions",
        [("content-type", "application/json")],
        json.dumps(CHAT).encode(),
    )[-1]
    assert answer.immediate_response.status.code == 401


def _as_nobody(script: str) -> subprocess.CompletedProcess[str]:
    setpriv = shutil.which("setpriv")
    assert setpriv is not None
    nobody = pwd.getpwnam("nobody")
    return subprocess.run(
        [
            setpriv,
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


def test_the_sidecar_socket_lets_only_its_own_user_connect(world: World, tmp_path: Path) -> None:
    path = tmp_path / "run" / "extproc.sock"
    sidecar = SidecarProc(tmp_path, world.plane.port, args=("--socket", str(path))).wait()
    try:
        mode = os.stat(path).st_mode
        assert stat.S_ISSOCK(mode) and stat.S_IMODE(mode) == 0o600
        assert sidecar.status()["workers"][0]["socket"] == str(path)
        metadata = [
            ("x-vsr-listener", "v50"),
            ("x-vsr-api", "systemone"),
            ("x-vsr-config-version", world.plane_sidecar_version("v50")),
        ]
        mine = _exchange(
            f"unix:{path}", metadata, "/v1/systemone", [("content-type", "application/json")], b"{not json"
        )[-1]
        assert mine.immediate_response.status.code == 422  # this user (Envoy's) is served: its JSON refused
        if os.geteuid() != 0 or shutil.which("setpriv") is None:
            pytest.skip("another user's attempt needs root to become one (the mode is checked above)")
        os.chmod(tmp_path, 0o755)  # let the other user reach the folder: only the socket's mode stands in the way
        os.chmod(path.parent, 0o755)
        other = _as_nobody(f"import socket; s = socket.socket(socket.AF_UNIX); s.connect({str(path)!r})")
        assert other.returncode != 0 and "PermissionError" in other.stderr, other.stderr
    finally:
        sidecar.stop()


def test_a_socket_another_sidecar_serves_is_refused(world: World, tmp_path: Path) -> None:
    path = tmp_path / "extproc.sock"
    first = SidecarProc(tmp_path, world.plane.port, args=("--socket", str(path))).wait()
    try:
        second = subprocess.run(
            [
                str(Path(sys.executable).parent / "vllm-sr"),
                "extproc",
                "serve",
                "--xds",
                f"127.0.0.1:{world.plane.port}",
                "--socket",
                str(path),
                "--status-port",
                "0",
            ],
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert second.returncode == 2 and f"cannot listen on the Unix socket {path}" in second.stderr
    finally:
        first.stop()


def _raw_post(port: int, path: str, headers: list[tuple[str, str]], body: bytes) -> tuple[int, bytes]:
    """One HTTP/1.1 request with headers exactly as given (repeats included): what a client library
    that lets a header be sent twice would send."""
    import socket

    head = "".join(
        f"{k}: {v}\r\n"
        for k, v in [
            ("host", "x"),
            ("content-type", "application/json"),
            ("content-length", str(len(body))),
            ("connection", "close"),
            *headers,
        ]
    )
    with socket.create_connection(("127.0.0.1", port), timeout=30) as s:
        s.sendall(f"POST {path} HTTP/1.1\r\n{head}\r\n".encode() + body)
        data = b""
        while chunk := s.recv(65536):
            data += chunk
    status = int(data.split(b" ", 2)[1])
    return status, data.split(b"\r\n\r\n", 1)[1]


@pytest.mark.parametrize("order", ["good first", "good last"])
def test_two_authorization_headers_are_refused_whichever_holds_the_key(world: World, order: str) -> None:
    pair = [("authorization", f"Bearer {LISTENER_KEY}"), ("authorization", "Bearer wrong")]
    status, body = _raw_post(
        world.listeners["keyed"],
        "/v1/systemone",
        pair if order == "good first" else pair[::-1],
        json.dumps(VALID).encode(),
    )
    assert status == 401 and json.loads(body)["reason"] == "invalid_key"


def test_envoy_forwarding_to_a_runtime_with_a_key_adds_it_and_drops_the_listeners(world: World, tmp_path: Path) -> None:
    """``--forwarding envoy`` (as for a Service-backed deployment): Envoy carries the request to a
    runtime that checks its key. The sidecar's answer names only the cluster; Envoy drops the
    client's listener key and adds the runtime's from its own environment, so the runtime
    answers 200 (it would answer 401 to the listener's key, or to none)."""
    from tests.e2e.envoy_proc import free_port, wait_for
    from tests.e2e.http_client import request
    from tests.extproc.harness import Plane, envoy_for

    port = free_port()
    capped = world.runtimes["capped"].url
    config = f"""version: 2
deployments:
  capped: {{provider: systemone, endpoint: "{capped}/v1/systemone", model: tiny-26, schema: vllm-sr/5.0,
           api_key_env: VSR_TEST_RUNTIME_KEY}}
listeners:
  - {{name: keyed, address: 127.0.0.1, port: {port}, auth: {{keys_env: VSR_TEST_LISTENER_KEYS}},
     apis: {{systemone: {{models: [tiny-26]}}}}}}
"""
    sidecar_port = free_port()
    plane = Plane(tmp_path, config, sidecar_port)
    # The sidecar reads the runtime's card itself, so it holds that key too; never sends it.
    sidecar_env = {"VSR_TEST_LISTENER_KEYS": LISTENER_KEY, "VSR_TEST_RUNTIME_KEY": RUNTIME_KEY}
    sidecar = SidecarProc(
        tmp_path, plane.port, port=sidecar_port, env=sidecar_env, args=("--forwarding", "envoy")
    ).wait()
    envoy = envoy_for(tmp_path, plane, sidecar_port, env={"VSR_TEST_RUNTIME_KEY": RUNTIME_KEY})
    try:
        body = json.dumps({**VALID, "model": "tiny-26"}).encode()
        headers = {"content-type": "application/json", "authorization": f"Bearer {LISTENER_KEY}"}
        reply = wait_for(
            lambda: (r := request(port, "POST", "/v1/systemone", body, headers)).status != 503 and r,
            timeout=30,
            what="the listener",
        )
        assert reply.status == 200, reply.body
        assert reply.json()["answers"]["q"]["type"] == "noul"
        # Envoy writes its access-log line after the response, so it may land a moment later.
        answered = wait_for(
            lambda: [
                line
                for entry in envoy.log.read_text().splitlines()
                if entry.startswith("{") and (line := json.loads(entry))["status"] == 200
            ],
            timeout=10,
            what="Envoy's access-log line of the answer",
        )
        assert answered[-1]["upstream_cluster"] == "deployment/capped"  # Envoy, not the sidecar, called it
    finally:
        envoy.stop()
        sidecar.stop()
        plane.stop()
