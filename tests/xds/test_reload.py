"""From the config file to a served version: only a valid config becomes a new version."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings

from sr_control.compiler import Settings, compile
from sr_control.config.load import validate_text
from sr_control.xds.cache import SnapshotCache
from sr_control.xds.metrics import Metrics
from sr_control.xds.reload import Reloader
from sr_control.xds.snapshot import Snapshot
from tests.config.generated import edit_series
from tests.xds.xds_support import NODE, config_text


@pytest.fixture
def setup(tmp_path: Path) -> tuple[Path, Reloader, SnapshotCache, Metrics]:
    path = tmp_path / "config.yaml"
    path.write_text(config_text({"public": 8801}))
    cache, metrics = SnapshotCache(), Metrics()
    return path, Reloader(path, Settings(), cache, metrics), cache, metrics


def reloads(metrics: Metrics, result: str) -> float:
    return metrics.registry.get_sample_value("vsr_config_reload_total", {"result": result}) or 0.0


def test_a_valid_config_is_served_as_a_new_version(setup) -> None:  # type: ignore[no-untyped-def]
    path, reloader, cache, metrics = setup
    outcome = reloader.reload()
    assert outcome.result == "ok"
    served = cache.snapshot(NODE)
    assert served is not None and served.version == outcome.version
    assert metrics.registry.get_sample_value("vsr_config_version", {"version": outcome.version}) == 1


def test_an_edit_that_compiles_to_the_same_resources_is_unchanged(setup) -> None:  # type: ignore[no-untyped-def]
    path, reloader, cache, metrics = setup
    first = reloader.reload()
    path.write_text("# a comment changes nothing Envoy sees\n" + path.read_text())
    again = reloader.reload()
    assert again.result == "unchanged" and again.version == first.version
    assert reloads(metrics, "unchanged") == 1


def test_an_invalid_edit_is_reported_with_file_line_and_field_and_the_old_version_stays(setup) -> None:  # type: ignore[no-untyped-def]
    path, reloader, cache, metrics = setup
    good = reloader.reload()
    path.write_text(config_text({"public": 8801}).replace("port: 8801", "port: 70000"))
    bad = reloader.reload()
    assert bad.result == "invalid"
    assert bad.version == good.version
    assert cache.snapshot(NODE).version == good.version  # type: ignore[union-attr]
    (problem,) = reloader.last_error["problems"]  # type: ignore[index]
    assert problem["file"] == str(path)
    assert problem["line"] == 6
    assert problem["field"] == "listeners[0].port"
    assert reloads(metrics, "invalid") == 1


def test_a_vanished_file_is_unreadable_and_the_old_version_stays(setup) -> None:  # type: ignore[no-untyped-def]
    path, reloader, cache, metrics = setup
    good = reloader.reload()
    path.unlink()
    outcome = reloader.reload()
    assert outcome.result == "unreadable" and outcome.version == good.version
    assert "no such file" in reloader.last_error["problems"][0]["message"]  # type: ignore[index]


def test_a_fixed_config_is_served_as_the_next_generation(setup) -> None:  # type: ignore[no-untyped-def]
    path, reloader, cache, metrics = setup
    reloader.reload()
    path.write_text("listeners: [")
    reloader.reload()
    path.write_text(config_text({"public": 8801, "internal": 8802}))
    fixed = reloader.reload()
    assert fixed.result == "ok"
    assert reloader.status()["generation"] == 2
    assert reloader.status()["resources"]["listeners"] == 2
    assert metrics.registry.get_sample_value("vsr_config_version", {"version": fixed.version}) == 2


# -- incremental reloads: the version served after each edit is the whole compile's


def _expected(text: str, path: Path) -> tuple[str | None, list[tuple[int, int, str, str]]]:
    """What a control plane started on ``text`` would say: the version, or the problems."""
    report = validate_text(text, str(path))
    if report.config is None:
        return None, [(p.line, p.column, p.path, p.message) for p in report.errors]
    return Snapshot.of(compile(report.config), 1).version, []


@settings(
    max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture]
)
@given(texts=edit_series())
def test_every_edit_serves_what_a_whole_compile_would_and_a_bad_one_is_never_served(
    tmp_path: Path, texts: list[str]
) -> None:
    path = tmp_path / "config.yaml"
    cache = SnapshotCache()
    reloader = Reloader(path, Settings(), cache, Metrics())
    served = None
    previous = None
    for text in texts:
        path.write_text(text)
        outcome = reloader.reload()
        version, problems = _expected(text, path)
        if text == previous:
            # The same text again is not read again, good or bad: nothing Envoy sees can change.
            assert outcome.result == "unchanged" and outcome.version == served
        elif version is None:
            assert outcome.result == "invalid" and outcome.version == served
            assert [(p["line"], p["column"], p["field"], p["message"]) for p in outcome.problems] == problems
        else:
            served = version
            assert outcome.version == version
        previous = text
        assert (cache.snapshot(NODE).version if cache.snapshot(NODE) else None) == served  # type: ignore[union-attr]


def test_a_dangling_pool_member_after_an_edit_is_reported_at_its_line_and_not_served(setup) -> None:  # type: ignore[no-untyped-def]
    path, reloader, cache, metrics = setup
    text = config_text({f"l{i}": 8800 + i for i in range(30)}) + (
        "deployments:\n  d3: {provider: systemone, endpoint: 'http://127.0.0.1:9/v1/systemone', model: d3}\n"
        "pools:\n  p: {members: [d3]}\n"
    )
    path.write_text(text)
    good = reloader.reload()
    path.write_text(text.replace("members: [d3]", "members: [d3, d4]"))
    bad = reloader.reload()
    assert bad.result == "invalid" and cache.snapshot(NODE).version == good.version  # type: ignore[union-attr]
    (problem,) = bad.problems
    assert (problem["line"], problem["column"], problem["field"]) == (39, 21, "pools.p.members[1]")
    assert problem["message"] == "unknown deployment 'd4' (deployments: d3)"
