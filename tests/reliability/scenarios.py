"""The reliability scenarios, each a function that drives real parts and returns what it saw.

The tests in this folder assert on what a scenario returns; ``bench/reliability.py`` runs the
same functions, longer, and prints the figures. A scenario never asserts on time: waits are
bounded polls, and times are measured, not required.

    xds_restart     the control plane is killed (SIGKILL) under traffic, the config is edited
                    while it is down, and it is started again on the same ports
    invalid_edits   edits that must never be served, while traffic flows
    (runtime scenarios: see runtime_scenarios.py)
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from structlog.testing import capture_logs

from sr_control.compiler.templates import Template, templates
from tests.e2e.envoy_proc import wait_for
from tests.extproc.harness import get_text, metric
from tests.reliability.parts import (
    ASK,
    Answer,
    Figures,
    PlaneProc,
    Stack,
    Traffic,
    expected_versions,
    post,
    synced,
    write,
)

# ---------------------------------------------------------------------------- xDS server killed and restarted


@dataclass
class Restart:
    figures: Figures  # traffic on the listener in use, from before the kill to after the resync
    failures: list[Answer]
    answered_while_down: int  # 200s while no control plane ran
    down_s: float  # kill to the new process serving
    resync_s: float  # new process serving -> Envoy and the sidecar ACKed the version edited while down
    new_listener_s: float  # new process serving -> the listener added while down answers
    new_pool_status: int  # the pool added while down, asked on the listener in use
    reconnected_s: dict[str, float] = field(
        default_factory=dict
    )  # "envoy", "sidecar" -> new process serving -> its stream opened


def xds_restart(
    s: Stack, *, edit: bool = True, warm_s: float = 0.5, down_s: float = 3.0, after_s: float = 1.0, clients: int = 2
) -> Restart:
    """Kill the control plane under steady traffic, edit the config while it is down (a new
    deployment, a new pool on the listener in use, a new listener), start it again on the same
    ports, and wait for Envoy and the sidecar to reconnect and hold the edited version. With
    ``edit=False`` the config stays as it is (the ``new_*`` figures are then 0)."""
    assert isinstance(s.plane, PlaneProc), "xds_restart kills the control plane: run it as a process"
    edited = s.text(spare=True) if edit else s.config.read_text()
    with Traffic(s.listeners["public"], clients=clients) as traffic:
        time.sleep(warm_s)
        killed = time.monotonic()
        s.plane.kill()
        write(s.config, edited)
        time.sleep(down_s)
        restarted = time.monotonic()
        answered_while_down = sum(a.status == 200 for a in traffic.since(killed) if a.at + a.wait_s < restarted)
        s.plane.start().wait()
        serving, serving_at = time.monotonic(), datetime.now(UTC)
        expected = expected_versions(edited, s.plane.settings)
        wait_for(
            lambda: synced(s.status(), expected), timeout=30, interval=0.01, what="Envoy and the sidecar to resync"
        )
        resynced = late = time.monotonic()
        new_pool = 0
        if edit:
            wait_for(
                lambda: post(s.listeners["late"], {**ASK, "model": "ha"}, timeout=5).status == 200,
                timeout=30,
                interval=0.01,
                what="the new listener to answer",
            )
            late = time.monotonic()
            new_pool = post(s.listeners["public"], {**ASK, "model": "ha"}).status
        time.sleep(after_s)
    reconnected = {
        ("sidecar" if node["cluster"] == "vllm-sr-sidecar" else "envoy"): (
            datetime.fromisoformat(node["connected_at"]) - serving_at
        ).total_seconds()
        for node in s.status()["nodes"]
    }
    return Restart(
        traffic.figures(),
        traffic.failures,
        answered_while_down,
        serving - killed,
        resynced - serving,
        late - serving if edit else 0.0,
        new_pool,
        reconnected,
    )


# ---------------------------------------------------------------------------- invalid edits


def _yaml_syntax(text: str) -> str:
    return text.replace("apis:", "apis: {", 1)


def _schema(text: str) -> str:
    return text.replace("systemone: {models", "systemone: {schema: vllm-sr/9.9, models", 1)


def _dangling_member(text: str) -> str:
    return text.replace("members: [full]", "members: [full, ghost]", 1)


def _valid_change(text: str) -> str:
    return text.replace("max_deadline_ms: 20000", "max_deadline_ms: 15000", 1)


@contextmanager
def broken_template(name: str = "listener/access_log") -> Iterator[None]:
    """A template with a misspelled placeholder (``$listner``), as a bad edit of
    envoy_templates/ would leave it: every compile that fills it fails. In this process only."""
    table = templates()
    good = table[name]
    table[name] = Template(name, {"typed_config": "$listner"})  # type: ignore[index]
    try:
        yield
    finally:
        table[name] = good  # type: ignore[index]


@dataclass(frozen=True)
class Edit:
    name: str
    change: Callable[[str], str]
    result: str  # what /status and the metric must say
    injected: Callable[[], Any] | None = None  # a context to make the edit in (a fault outside the file)


EDITS = (
    Edit("yaml syntax", _yaml_syntax, "invalid"),
    Edit("schema", _schema, "invalid"),
    Edit("dangling pool member", _dangling_member, "invalid"),
    Edit("template error", _valid_change, "error", broken_template),
)


@dataclass
class Refusal:
    edit: str
    result: str  # last_reload.result in /status
    served_before: str
    served_after: str
    still_acked: bool  # Envoy and the sidecar still hold the version served before
    problems: list[dict[str, Any]]  # last_error.problems in /status
    logged: list[dict[str, Any]]  # the "config rejected" log events
    metric_delta: float  # vsr_config_reload_total{result} during the edit


@dataclass
class Edits:
    figures: Figures
    failures: list[Answer]
    refusals: list[Refusal] = field(default_factory=list)
    next_valid_served: bool = False


def invalid_edits(s: Stack, *, hold_s: float = 0.3, clients: int = 2) -> Edits:
    """Under steady traffic, make each edit of ``EDITS`` in turn; after each, what /status,
    /metrics and the log say, and whether Envoy and the sidecar still hold the version served.
    Then a valid edit, which must be served."""
    metrics_url = s.plane.status_url.replace("/status", "/metrics")
    original = s.config.read_text()
    old = expected_versions(original, s.plane.settings)
    out: list[Refusal] = []
    with Traffic(s.listeners["public"], clients=clients) as traffic, capture_logs() as logs:
        time.sleep(hold_s)
        for edit in EDITS:
            before = s.status()
            count = metric(get_text(metrics_url), "vsr_config_reload_total", result=edit.result)
            logged_before = len(logs)
            with edit.injected() if edit.injected else _nothing():
                write(s.config, edit.change(original))
                after = wait_for(
                    lambda before=before: (st := s.status())["last_reload"] != before["last_reload"] and st,
                    timeout=30,
                    interval=0.01,
                    what=f"the {edit.name} edit to be read",
                )
            time.sleep(hold_s)  # traffic goes on meanwhile; nothing must have moved
            st = s.status()
            rejected = [e for e in logs[logged_before:] if e.get("event") == "config rejected"]
            out.append(
                Refusal(
                    edit.name,
                    after["last_reload"]["result"],
                    before["version"],
                    st["version"],
                    synced(st, old),
                    (after.get("last_error") or {}).get("problems", []),
                    rejected,
                    metric(get_text(metrics_url), "vsr_config_reload_total", result=edit.result) - count,
                )
            )
        valid = _valid_change(original)
        write(s.config, valid)
        expected = expected_versions(valid, s.plane.settings)
        served = _eventually(lambda: synced(s.status(), expected), timeout=30)
        time.sleep(hold_s)
    return Edits(traffic.figures(), traffic.failures, out, served)


@contextmanager
def _nothing() -> Iterator[None]:
    yield


def _eventually(predicate: Callable[[], bool], timeout: float) -> bool:
    try:
        wait_for(predicate, timeout=timeout, interval=0.01)
    except AssertionError:
        return False
    return True


__all__ = ["EDITS", "Edits", "Refusal", "Restart", "broken_template", "invalid_edits", "xds_restart"]
