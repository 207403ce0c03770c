"""A recompile after an edit equals compiling the edited config whole: same resources, same
bytes, same versions, whatever the edit touched (a listener, a deployment, a pool, a provider
model, an entry added or removed) and however many edits came before."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings

from sr_control.compiler import CompileError, Resources, compile, consistent
from sr_control.compiler.incremental import Recompiler
from sr_control.compiler.protos import LISTENER
from sr_control.config.load import load_text, validate_text
from sr_control.config.reread import Rereader
from tests.config.generated import edit_series

FILE = "config.yaml"


def served(resources: Resources) -> dict[str, list[tuple[str, str, bytes]]]:
    return {t: [(r.name, r.version, r.packed.value) for r in resources[t]] for t in resources}


def compiled(recompile: Recompiler | None, config) -> Resources | str:  # type: ignore[no-untyped-def]
    try:
        return consistent(recompile.compile(config)) if recompile is not None else compile(config)
    except CompileError as exc:
        return f"{type(exc).__name__}: {exc}"


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(edit_series())
def test_a_recompile_after_each_edit_equals_the_whole_compile(texts: list[str]) -> None:
    recompiler, reader = Recompiler(), Rereader()
    for text in texts:
        report = validate_text(
            text, FILE, reader=reader
        )  # the reload path: the same model objects for unchanged entries
        if report.config is None:
            continue
        got, want = compiled(recompiler, report.config), compiled(None, load_text(text, FILE))
        if isinstance(want, str):
            assert got == want
        else:
            assert isinstance(got, Resources)
            assert served(got) == served(want)
            assert got.version == want.version


LISTENERS = """version: 2
providers:
  models:
    - {name: m, api_format: chat_completions, endpoints: ["http://127.0.0.1:9/v1"]}
deployments:
  d3: {provider: systemone, endpoint: "http://127.0.0.1:9/v1/systemone", model: d3}
pools:
  vllm-sr/auto: {members: [d3]}
listeners:
""" + "".join(
    f"  - {{name: l{i}, port: {9000 + i}, apis: {{chat_completions: {{}}{', systemone: {}' if i % 2 else ''}}}}}\n"
    for i in range(20)
)


def test_a_one_listener_edit_builds_that_listener_alone() -> None:
    recompiler = Recompiler()
    before = recompiler.compile(load_text(LISTENERS))
    after = recompiler.compile(load_text(LISTENERS.replace("port: 9007,", "port: 9907,")))
    assert (recompiler.built, recompiler.reused) == (1, 21)  # 20 listeners and 2 clusters reused
    changed = [r.name for r in after[LISTENER] if before.named(LISTENER)[r.name] is not r]
    assert changed == ["listener/l7"]


def test_a_deployment_edit_builds_its_cluster_and_the_listeners_that_reach_it() -> None:
    recompiler = Recompiler()
    recompiler.compile(load_text(LISTENERS))
    recompiler.compile(load_text(LISTENERS.replace("model: d3}", "model: d3, max_concurrency: 3}")))
    assert recompiler.built == 1 + 10  # the cluster, and the ten listeners offering systemone


def test_a_compile_error_is_the_whole_compiles_and_leaves_the_last_good_units() -> None:
    recompiler = Recompiler()
    good = recompiler.compile(load_text(LISTENERS))
    bad = load_text(
        LISTENERS.replace(
            'endpoints: ["http://127.0.0.1:9/v1"]', 'endpoints: ["http://127.0.0.1:9/v1", "https://127.0.0.2:9/v1"]'
        )
    )
    with pytest.raises(CompileError) as whole:
        compile(bad)
    with pytest.raises(CompileError) as again:
        recompiler.compile(bad)
    assert (
        str(again.value)
        == str(whole.value)
        == "providers.models[0].endpoints: endpoints mix http and https; one model's endpoints share a scheme"
    )
    assert recompiler.compile(load_text(LISTENERS)).version == good.version
    assert recompiler.built == 0
