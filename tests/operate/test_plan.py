"""``vllm-sr config plan``: the resources an edit changes, as the compiler's own output says."""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema
import pytest

from sr_control.compiler import compile
from sr_control.compiler.protos import ENDPOINT, TYPE_NAMES
from sr_control.config.load import load_text
from sr_control.operate.plan import PLAN_SCHEMA
from tests.conftest import run_cli
from tests.operate.stack import Live, second_listener

pytestmark = [pytest.mark.envoy, pytest.mark.slow]


def _compiler_diff(before: str, after: str, live: Live) -> dict[str, tuple[list[str], list[str], list[str]]]:
    """Per type: (added, removed, changed) names, from compiling both texts."""
    old = compile(load_text(before), live.plane.settings)
    new = compile(load_text(after), live.plane.settings)
    out = {}
    for type_url, name in TYPE_NAMES.items():
        if type_url == ENDPOINT:
            continue
        a, b = old.named(type_url), new.named(type_url)
        out[name] = (
            sorted(b.keys() - a.keys()),
            sorted(a.keys() - b.keys()),
            sorted(n for n in a.keys() & b.keys() if a[n].version != b[n].version),
        )
    return out


def _plan(*args: str) -> tuple[int, dict]:  # type: ignore[type-arg]
    done = run_cli("config", "plan", *args, "--format", "json")
    assert done.returncode in (0, 3), done.stderr
    result = json.loads(done.stdout)
    jsonschema.validate(result, PLAN_SCHEMA)
    return done.returncode, result


def test_plan_against_the_live_stack_names_exactly_what_the_compiler_changes(live: Live, tmp_path: Path) -> None:
    # An edit the plan is not told about: a deadline changed and a listener added.
    edited = live.text(extra=second_listener(live.ports["internal"])).replace(
        "max_deadline_ms: 20000}", "max_deadline_ms: 15000}", 1
    )
    new = tmp_path / "edited.yaml"
    new.write_text(edited)
    code, result = _plan(str(new), "--against", live.plane.status_address, *live.where()[2:])
    assert code == 0 and result["changed"] and not result["risky"]
    expected = _compiler_diff(live.config.read_text(), edited, live)
    got = {kind: (c["added"], c["removed"], sorted(c["changed"])) for kind, c in result["resources"].items()}
    assert got == expected
    assert expected["listeners"][0] == ["listener/internal"]  # the edit did reach the compiler's output
    # The changed sidecar data names the field the edit changed.
    (public,) = [d for n, d in result["resources"]["sidecar"]["changed"].items() if n == "sidecar/public"]
    assert any("deadline" in path for path in public["fields"])

    text = run_cli("config", "plan", str(new), "--against", live.plane.status_address, *live.where()[2:])
    assert text.returncode == 0 and "+ listeners listener/internal" in text.stdout


def test_plan_exits_3_on_a_listener_removal_and_1_on_an_invalid_file(live: Live, tmp_path: Path) -> None:
    old, new = tmp_path / "old.yaml", tmp_path / "new.yaml"
    old.write_text(live.text(extra=second_listener(live.ports["internal"])))
    new.write_text(live.text())
    code, result = _plan(str(new), "--against", str(old))
    assert code == 3 and result["risky"]
    assert result["resources"]["listeners"]["removed"] == ["listener/internal"]
    assert result["warnings"] == [f"listener internal removed: its clients lose port {live.ports['internal']}"]
    text = run_cli("config", "plan", str(new), "--against", str(old))
    assert text.returncode == 3 and "RISKY: listener internal removed" in text.stdout

    # A switch from 4.0 to 5.0 is risky against a file: whether 4.0-only forms are still sent is unknown.
    old.write_text(live.text(schema="vllm-sr/4.0"))
    code, result = _plan(str(new), "--against", str(old))
    assert code == 3 and "schema 4.0 -> 5.0" in result["warnings"][0]

    new.write_text(live.text().replace("max_deadline_ms: 20000", "max_deadline_ms: -1"))
    bad = run_cli("config", "plan", str(new), "--against", str(old))
    assert bad.returncode == 1

    # Against a control plane that does not answer: 2.
    from tests.e2e.envoy_proc import free_port

    gone = run_cli("config", "plan", str(old), "--against", f"127.0.0.1:{free_port()}")
    assert gone.returncode == 2 and "cannot read the live config" in gone.stderr
    assert f"{new}:11:" in bad.stderr and "listeners[0].apis.systemone.max_deadline_ms" in bad.stderr


def test_a_switch_to_5_0_is_risky_while_the_sidecars_count_4_0_only_forms(live: Live, tmp_path: Path) -> None:
    old = live.text(schema="vllm-sr/4.0")
    live.write(old)
    live.wait_synced(old)
    legacy = tmp_path / "legacy.json"
    legacy.write_text(
        json.dumps(
            {"model": "tiny", "state": "A or B?", "questions": {"pick": {"type": "choice", "choices": ["a", "b"]}}}
        )
    )
    sent = run_cli("request", "-l", f"http://127.0.0.1:{live.ports['public']}", str(legacy))
    assert sent.returncode == 0, sent.stdout + sent.stderr
    # `status` shows the 4.0-only form the listener has seen (the sidecar's counter) ...
    status = json.loads(run_cli("status", *live.where(), "--format", "json").stdout)
    (public,) = status["listeners"]
    assert public["apis"][0]["schema"] == "vllm-sr/4.0" and public["legacy_forms"]["choices"] >= 1
    # ... and a plan that switches the listener to 5.0 says how many requests would be refused.
    new = tmp_path / "five.yaml"
    new.write_text(live.text())
    code, result = _plan(str(new), "--against", live.plane.status_address, *live.where()[2:])
    assert code == 3
    (warning,) = result["warnings"]
    assert warning.startswith("listener public: schema 4.0 -> 5.0 while ") and "4.0-only forms" in warning
    live.write(live.text())
    live.wait_synced(live.text())
