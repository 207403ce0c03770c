"""One world for the sidecar's end-to-end tests: real runtimes on tiny checkpoints, the
jevcompat mock, the control plane, ``vllm-sr extproc serve`` and Envoy fed over xDS.

Members and what tells them apart:

    full      vllm-srun, vllm-sr/5.0, model tiny       card: noul, choice, score; 255 options
    backup    vllm-srun, vllm-sr/5.0, model tiny       the same weights (the ``ha`` pool)
    capped    vllm-srun, vllm-sr/5.0, model tiny-26    card: 26 options at most
    standard  vllm-srun --systemone-schema systemone/0.2, model tiny-std, state_text,
              max_concurrency 2, declares noul/choice/score
    mock      jevcompat mock (systemone/0.2), model jev-1.13.0, state_text, declares noul/choice/box
              (it answers no box: a box question gets its 422)
    busy      jevcompat mock answering every call 429 (Retry-After: 0), model mock, declares noul
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from sr_runtime.presets import create
from tests.e2e.envoy_proc import free_port
from tests.extproc.harness import Mock, Plane, Runtime, SidecarProc, World, capped_checkpoint, envoy_for

LISTENERS = ("v40", "v50", "keyed", "chat")
LISTENER_KEY = "listener-key-1"
RUNTIME_KEY = "runtime-key-1"
PROVIDER_KEY = "provider-key-1"


def render(
    ports: dict[str, int],
    runtimes: dict[str, Runtime],
    mock: Mock,
    busy: Mock,
    llm: str,
    *,
    v40_schema: str = "vllm-sr/4.0",
    auto: tuple[str, ...] = ("capped", "full"),
    keys_file: str = "",
) -> str:
    r = runtimes
    return f"""version: 2
providers:
  models:
    - {{name: chat-a, api_format: chat_completions, endpoints: ["{llm}/v1"]}}
    - {{name: chat-b, api_format: chat_completions, endpoints: ["{llm}/openai/v1"], api_key_env: VSR_TEST_PROVIDER_KEY}}
    - {{name: claude-x, api_format: messages, endpoints: ["{llm}/v1"], api_key_env: VSR_TEST_PROVIDER_KEY}}
deployments:
  full: {{provider: systemone, endpoint: "{r["full"].url}/v1/systemone", model: tiny, schema: vllm-sr/5.0}}
  backup: {{provider: systemone, endpoint: "{r["backup"].url}/v1/systemone", model: tiny, schema: vllm-sr/5.0}}
  capped: {{provider: systemone, endpoint: "{r["capped"].url}/v1/systemone", model: tiny-26, schema: vllm-sr/5.0,
           api_key_env: VSR_TEST_RUNTIME_KEY}}
  standard:
    provider: systemone
    endpoint: "{r["standard"].url}/v1/systemone"
    model: tiny-std
    schema: systemone/0.2
    deviations: [state_text]
    max_concurrency: 2
    capabilities: {{question_types: [noul, choice, score]}}
  mock:
    provider: systemone
    endpoint: "{mock.url}/v1/systemone"
    model: jev-1.13.0
    schema: systemone/0.2
    deviations: [state_text]
    max_concurrency: 4
    capabilities: {{question_types: [noul, choice, box]}}
  busy:
    provider: systemone
    endpoint: "{busy.url}/v1/systemone"
    model: mock
    schema: systemone/0.2
    capabilities: {{question_types: [noul]}}
pools:
  vllm-sr/auto: {{members: [{", ".join(auto)}]}}
  ha: {{members: [full, backup]}}
  gateways: {{members: [mock, standard]}}
  busy-first: {{members: [busy, standard]}}
listeners:
  - name: v40
    address: 127.0.0.1
    port: {ports["v40"]}
    apis:
      systemone: {{schema: {v40_schema}, models: [vllm-sr/auto, tiny], max_deadline_ms: 20000}}
  - name: v50
    address: 127.0.0.1
    port: {ports["v50"]}
    apis:
      systemone: {{models: [vllm-sr/auto, tiny, tiny-26, ha, gateways, jev-1.13.0, tiny-std, mock, busy-first],
                   max_deadline_ms: 20000}}
  - name: keyed
    address: 127.0.0.1
    port: {ports["keyed"]}
    auth: {{keys_file: "{keys_file}"}}
    apis:
      systemone: {{models: [tiny], max_deadline_ms: 20000}}
      chat_completions: {{models: [chat-a]}}
  - name: chat
    address: 127.0.0.1
    port: {ports["chat"]}
    apis:
      chat_completions: {{models: [chat-a, chat-b]}}
      messages: {{models: [claude-x]}}
"""


@pytest.fixture(scope="session")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return create(tmp_path_factory.mktemp("ckpt") / "tiny", "llama-prefix-bidir", seed=0)


@pytest.fixture(scope="session")
def world(tmp_path_factory: pytest.TempPathFactory, tiny: Path) -> Iterator[World]:
    from tests.e2e.upstreams import Upstream

    directory = tmp_path_factory.mktemp("world")
    capped = capped_checkpoint(tiny, tiny.parent / "tiny-26", 26)
    (tiny.parent / "tiny-std").symlink_to(tiny, target_is_directory=True)
    runtimes = {
        "full": Runtime(tiny, directory / "full.log"),
        "backup": Runtime(tiny, directory / "backup.log"),
        "capped": Runtime(capped, directory / "capped.log", api_key="runtime-key-1"),
        "standard": Runtime(tiny.parent / "tiny-std", directory / "standard.log", schema="systemone/0.2"),
    }
    for runtime in runtimes.values():
        runtime.start()
    mock = Mock()
    busy = Mock(busy_every=1)
    llm = Upstream("llm")
    keys = directory / "listener-keys.txt"
    keys.write_text(f"# listener keys, one a line\n{LISTENER_KEY}\nlistener-key-2\n")
    ports = {name: free_port() for name in LISTENERS}
    sidecar_port = free_port()
    try:
        for runtime in runtimes.values():
            runtime.wait()

        def text(**changes: object) -> str:
            return render(ports, runtimes, mock, busy, llm.url, keys_file=str(keys), **changes)  # type: ignore[arg-type]

        plane = Plane(directory, text(), sidecar_port)
        # Each process gets the keys it uses: the sidecar the runtime's (it calls members itself)
        # and never a provider's; Envoy both, as it adds each upstream's key to what it forwards.
        sidecar = SidecarProc(
            directory, plane.port, port=sidecar_port, env={"VSR_TEST_RUNTIME_KEY": RUNTIME_KEY}
        ).wait()
        envoy = envoy_for(
            directory,
            plane,
            sidecar_port,
            env={"VSR_TEST_RUNTIME_KEY": RUNTIME_KEY, "VSR_TEST_PROVIDER_KEY": PROVIDER_KEY},
        )
        w = World(directory, ports, runtimes, mock, busy, plane, sidecar, envoy, text, {"llm": llm, "keys": keys})
        w.apply(text())
    except BaseException:
        for runtime in runtimes.values():
            runtime.stop()
        mock.stop()
        busy.stop()
        llm.stop()
        raise
    yield w
    w.stop()
    llm.stop()
