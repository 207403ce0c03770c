"""``vllm-sr config apply``: compare-and-swap, each node's ACK, and an automatic rollback on a NACK."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.operate.stack import Live, port_taken, second_listener

pytestmark = [pytest.mark.envoy, pytest.mark.slow]


def _apply(live: Live, file: Path, *args: str) -> tuple[int, str, str]:
    done = live.cli("config", "apply", str(file), "--xds", live.plane.status_address, *args)
    return done.returncode, done.stdout, done.stderr


def test_apply_follows_every_node_and_refuses_a_stale_expect(live: Live, tmp_path: Path) -> None:
    before = live.status()["version"]
    edited = tmp_path / "edited.yaml"
    edited.write_text(live.text().replace("max_deadline_ms: 20000}", "max_deadline_ms: 12000}", 1))
    code, out, err = _apply(live, edited, "--expect", before)
    assert code == 0, out + err
    now = live.status()["version"]
    assert now != before and f"live: {now} on 2 node(s)" in out
    assert "ACK  envoy   vllm-sr-envoy" in out and "ACK  sidecar" in out
    assert live.config.read_text() == edited.read_text()

    # Another edit got there first: the version this one was planned against is no longer live.
    again = tmp_path / "again.yaml"
    again.write_text(live.text())
    code, out, err = _apply(live, again, "--expect", before)
    assert code == 1 and f"refused: the live version is {now}, not {before}" in err
    assert live.config.read_text() == edited.read_text() and live.status()["version"] == now

    code, out, err = _apply(live, again, "--expect", now)  # back as the other tests expect it
    assert code == 0 and live.status()["version"] == before


def test_apply_of_an_edit_envoy_refuses_is_rolled_back_on_every_node(live: Live, tmp_path: Path) -> None:
    before = live.status()["version"]
    good = live.config.read_text()
    with port_taken() as port:
        clash = tmp_path / "clash.yaml"
        clash.write_text(live.text(extra=second_listener(port)))
        code, out, err = _apply(live, clash)
        assert code == 1, out + err
        assert "NACK vllm-sr-envoy refused listeners" in err and "address already in use" in err.lower()
        assert f"rolled back: {before} is live again on 2 node(s)" in err
    status = live.status()
    assert status["version"] == before and live.config.read_text() == good
    # Every node is back on the previous version, no NACK standing.
    for node in status["nodes"]:
        for name, t in node["types"].items():
            assert t["nack"] is None and t["acked"] == status["type_versions"][name], (node["id"], name, t)
    assert live.cli("status", *live.where()).returncode == 0


def test_apply_of_an_invalid_file_writes_nothing(live: Live, tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text(live.text(schema="vllm-sr/9.9"))
    before = live.config.read_text()
    code, out, err = _apply(live, bad)
    assert code == 1 and f"{bad}:11:" in err and "nothing was written" in err
    assert live.config.read_text() == before

    # A valid file, and a control plane that does not answer: 2, nothing written.
    from tests.conftest import run_cli
    from tests.e2e.envoy_proc import free_port

    good = tmp_path / "good.yaml"
    good.write_text(live.text())
    done = run_cli("config", "apply", str(good), "--xds", f"127.0.0.1:{free_port()}")
    assert done.returncode == 2 and "the control plane does not answer" in done.stderr
    assert live.config.read_text() == before
