"""``vllm-sr status`` against a real stack: every node in step, then Envoy's NACK standing."""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema
import pytest

from sr_control.operate.status import REPORT_SCHEMA
from tests.e2e.envoy_proc import wait_for
from tests.extproc.harness import get_json
from tests.operate.stack import Live, port_taken, second_listener

pytestmark = [pytest.mark.envoy, pytest.mark.slow]


def _status(live: Live) -> tuple[int, dict]:  # type: ignore[type-arg]
    done = live.cli("status", *live.where(), "--format", "json")
    report = json.loads(done.stdout)
    jsonschema.validate(report, REPORT_SCHEMA)
    return done.returncode, report


def test_status_shows_every_node_in_step_with_listeners_and_members(live: Live) -> None:
    code, report = _status(live)
    version = live.status()["version"]
    assert code == 0 and report["in_step"] and report["problems"] == []
    assert report["control_plane"]["version"] == version
    assert report["control_plane"]["config"] == str(live.config)
    kinds = sorted((n["kind"], n["state"], n["version"], n["protocol"]) for n in report["nodes"])
    assert kinds == [("envoy", "in_step", version, "delta"), ("sidecar", "in_step", version, "delta")]
    assert all(n["since"] >= n["connected_at"] for n in report["nodes"])  # since when each holds it
    (public,) = report["listeners"]
    (api,) = public["apis"]
    assert (public["name"], public["port"], api["api"], api["schema"]) == (
        "public",
        live.ports["public"],
        "systemone",
        "vllm-sr/5.0",
    )
    (full,) = api["models"]["vllm-sr/auto"]
    assert full["name"] == "full" and full["health"] == "up" and "noul" in full["question_types"]
    # The card's limits, as the runtime lists them in GET /v1/models.
    card = get_json(f"{live.runtime.url}/v1/models")[1]["models"][0]["card"]
    assert full["limits"] == card["limits"] and full["limits"]["max_input_tokens"] > 0
    assert full["open_calls"] == 0
    # Only --xds was given: the sidecar was found from the control plane's nodes.
    (sidecar,) = report["sidecars"]
    assert sidecar["reachable"] and sidecar["address"] == f"127.0.0.1:{live.sidecar.status_port}"
    assert sidecar["listen"] == f"127.0.0.1:{live.sidecar.port}"
    (node,) = [n for n in report["nodes"] if n["kind"] == "sidecar"]
    assert sidecar["nodes"] == [node["id"]] and node["status_address"] == sidecar["address"]

    text = live.cli("status", *live.where())
    assert text.returncode == 0
    assert f"in step: every node holds {version}" in text.stdout
    assert "vllm-sr/auto: full up" in text.stdout
    assert f"limits  max_options {card['limits']['max_options']}," in text.stdout
    assert f"127.0.0.1:{live.sidecar.status_port}  1 worker(s), ready, ext_proc on 127.0.0.1:{live.sidecar.port}" in (
        text.stdout
    )


def test_status_reads_the_sidecars_given_instead_of_those_the_nodes_tell(live: Live) -> None:
    from tests.e2e.envoy_proc import free_port

    gone = f"127.0.0.1:{free_port()}"
    done = live.cli("status", *live.where(), "--sidecar", gone, "--format", "json")
    report = json.loads(done.stdout)
    jsonschema.validate(report, REPORT_SCHEMA)
    # The nodes are in step, so it exits 0; what the missing sidecar would say is unknown, and said so.
    assert done.returncode == 0
    assert [s["address"] for s in report["sidecars"]] == [gone] and not report["sidecars"][0]["reachable"]
    assert any(w.startswith(f"sidecar status {gone} unreachable") for w in report["warnings"])
    (full,) = report["listeners"][0]["apis"][0]["models"]["vllm-sr/auto"]
    assert full["health"] == "unknown"


def test_status_shows_envoys_nack_and_exits_1_until_it_is_cleared(live: Live) -> None:
    good = live.text()
    before = live.status()["version"]
    with port_taken() as port:
        # A second listener on a port something already holds: valid, served, and refused by Envoy.
        live.write(live.text(extra=second_listener(port)))
        wait_for(lambda: _status(live)[1]["problems"], timeout=30, what="Envoy's NACK in the status")
        code, report = _status(live)
        assert code == 1 and not report["in_step"]
        (envoy,) = [n for n in report["nodes"] if n["kind"] == "envoy"]
        assert envoy["state"] == "refused"
        assert envoy["nack"]["type"] == "listeners"
        assert "address already in use" in envoy["nack"]["message"].lower()
        # Envoy still holds the previous version for what it refused, and the status says so.
        assert report["control_plane"]["version"] != before
        assert envoy["version"] == before, envoy["types"]
        text = live.cli("status", *live.where())
        assert text.returncode == 1
        assert "NOT IN STEP: vllm-sr-envoy refused listeners" in text.stdout
    live.write(good)
    live.wait_synced(good)
    assert wait_for(lambda: _status(live)[0] == 0, timeout=30, what="status back in step")


def test_status_exits_2_when_the_control_plane_does_not_answer(tmp_path: Path) -> None:
    from tests.conftest import run_cli
    from tests.e2e.envoy_proc import free_port

    done = run_cli("status", "--xds", f"127.0.0.1:{free_port()}")
    assert done.returncode == 2 and "the control plane does not answer" in done.stderr


def test_status_watch_shows_the_report_again_until_ctrl_c(live: Live) -> None:
    import signal
    import subprocess

    from tests.conftest import BIN

    watching = subprocess.Popen(
        [str(BIN / "vllm-sr"), "status", *live.where(), "--watch", "--interval", "0.2"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert watching.stdout is not None
        seen = 0
        for line in watching.stdout:
            seen += line.startswith("in step: every node holds")
            if seen == 2:
                break
        watching.send_signal(signal.SIGINT)
        assert watching.wait(timeout=30) == 0
    finally:
        if watching.poll() is None:
            watching.kill()
            watching.wait()
