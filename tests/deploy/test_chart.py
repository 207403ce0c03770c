"""The Helm chart, linted and rendered with helm-python-sdk for the default values and three
value sets, every object checked against the Kubernetes API's schemas (kubernetes-validate;
the ServiceMonitor, a CRD, for its shape here), and the config it ships through
``vllm-sr config validate``."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import helm_python as helm
import kubernetes_validate
import pytest
import yaml

from tests.deploy.chart import CHART, NAMESPACE, RELEASE, ROOT, config_text, container, find, render
from tests.deploy.value_sets import GPU_AND_CPU, ONE_POOL, PUBLIC_40, VALUE_SETS

KUBE_VERSIONS = ("1.29", "1.37")  # oldest and newest the chart claims (Chart.yaml kubeVersion)


@pytest.mark.parametrize("name", VALUE_SETS)
def test_the_chart_lints_clean(name: str) -> None:
    report = helm.lint(CHART, VALUE_SETS[name], strict=True, namespace=NAMESPACE)
    assert report["errors"] == []
    assert [m for m in report["messages"] if m["severity"] >= 2] == []


@pytest.mark.parametrize("name", VALUE_SETS)
def test_every_object_is_valid_kubernetes(rendered: dict[str, list[dict[str, Any]]], name: str) -> None:
    for obj in rendered[name]:
        if obj["apiVersion"] in ("monitoring.coreos.com/v1", "cert-manager.io/v1"):
            continue  # CRDs: test_the_service_monitor_scrapes_what_exists and test_ads_over_mtls check them
        for version in KUBE_VERSIONS:
            try:
                kubernetes_validate.validate(obj, version, strict=True)
            except kubernetes_validate.ValidationError as exc:
                raise AssertionError(
                    f"{name}: {obj['kind']} {obj['metadata']['name']} (Kubernetes {version}): {exc.message} "
                    f"at {list(exc.path)}"
                ) from None


def test_every_config_the_chart_ships_passes_config_validate(
    rendered: dict[str, list[dict[str, Any]]], tmp_path: Path, cli
) -> None:  # type: ignore[no-untyped-def]
    files = []
    for name, objs in rendered.items():
        path = tmp_path / f"{name}.yaml"
        path.write_text(config_text(objs))
        files.append(str(path))
    result = cli("config", "validate", *files)
    assert result.returncode == 0, result.stdout + result.stderr


def test_the_default_config_is_the_charts_file_with_its_comments(rendered: dict[str, list[dict[str, Any]]]) -> None:
    assert config_text(rendered["default"]) == (CHART / "files" / "default-config.yaml").read_text()


@pytest.mark.parametrize(
    ("values", "message"),
    [
        (
            {"config": {"version": 2, "listeners": [{"name": "public", "port": 70000}]}},
            "at '/config/listeners/0/port': maximum: got 70,000, want 65,535",
        ),
        ({"config": {"version": 2, "listenrs": []}}, "at '/config': additional properties 'listenrs' not allowed"),
        (
            {
                "config": {
                    "version": 2,
                    "deployments": {
                        "a": {
                            "provider": "systemone",
                            "model": "m",
                            "endpoint": "http://x/",
                            "service": {"name": "rt", "port": 1},
                        }
                    },
                }
            },
            "at '/config/deployments/a': 'oneOf' failed, subschemas 0, 1 matched",
        ),
        (
            {
                "config": {
                    "version": 2,
                    "deployments": {"a": {"provider": "systemone", "model": "m", "service": {"name": "RT", "port": 1}}},
                }
            },
            "at '/config/deployments/a/service/name'",
        ),
        ({"runtimes": {"gpu": {"device": "tpu"}}}, "at '/runtimes/gpu/device': value must be one of 'cpu', 'cuda'"),
        ({"envoy": {"ads": "grpc"}}, "at '/envoy/ads': value must be one of 'delta', 'sotw'"),
    ],
)
def test_a_value_of_the_wrong_shape_is_refused_naming_it(values: dict[str, Any], message: str) -> None:
    with pytest.raises(helm.HelmValuesError) as refused:
        render(values)
    assert message in str(refused.value)


@pytest.mark.parametrize(
    ("base", "values", "message"),
    [
        (
            ONE_POOL,
            {
                "config": {
                    **ONE_POOL["config"],
                    "deployments": {
                        "d3": {**ONE_POOL["config"]["deployments"]["d3"], "service": {"name": "d3", "port": 9000}}
                    },
                }
            },
            "config.deployments.d3.service.port is 9000, but runtime group d3 listens on 8100 (runtimes.d3.port)",
        ),
        (
            ONE_POOL,
            {
                "config": {
                    **ONE_POOL["config"],
                    "deployments": {"d3": {**ONE_POOL["config"]["deployments"]["d3"], "model": "d3"}},
                }
            },
            'config.deployments.d3.model is "d3", but runtime group d3 serves "d3-turbo"',
        ),
        (
            ONE_POOL,
            {
                "config": {
                    **ONE_POOL["config"],
                    "deployments": {
                        "d3": {"provider": "systemone", "service": {"name": "d3", "port": 8100}, "model": "d3-turbo"}
                    },
                }
            },
            (
                "config.deployments.d3.schema is systemone/0.2 (the default), but runtime group d3 speaks "
                "vllm-sr/5.0 (runtimes.d3.schema)"
            ),
        ),
        (
            GPU_AND_CPU,
            {"sidecar": {"secretEnv": {}}},
            (
                "config.providers.models[0].api_key_env names VSR_LLM_KEY, which the sidecar does not have: add "
                "sidecar.secretEnv.VSR_LLM_KEY: {secretName: <an existing Secret>, key: <its key>}"
            ),
        ),
        (
            GPU_AND_CPU,
            {
                "config": {
                    **GPU_AND_CPU["config"],
                    "deployments": {
                        **GPU_AND_CPU["config"]["deployments"],
                        "gpu": {
                            k: v for k, v in GPU_AND_CPU["config"]["deployments"]["gpu"].items() if k != "api_key_env"
                        },
                    },
                }
            },
            (
                "config.deployments.gpu: runtime group gpu requires a key (runtimes.gpu.apiKey); give the "
                "deployment api_key_env"
            ),
        ),
        (
            GPU_AND_CPU,
            {
                "runtimes": {
                    **GPU_AND_CPU["runtimes"],
                    "gpu": {**GPU_AND_CPU["runtimes"]["gpu"], "weights": {"source": "pvc"}},
                }
            },
            "runtimes.gpu.weights.source is pvc: give runtimes.gpu.weights.pvc.claimName",
        ),
    ],
)
def test_what_only_the_chart_can_cross_check_fails_naming_the_value(
    base: dict[str, Any], values: dict[str, Any], message: str
) -> None:
    with pytest.raises(helm.HelmRenderError) as refused:
        render({**base, **values})
    assert message in str(refused.value)


def test_a_listener_keys_file_must_lie_in_a_mounted_secret() -> None:
    with pytest.raises(helm.HelmRenderError) as refused:
        render({**PUBLIC_40, "sidecar": {**PUBLIC_40["sidecar"], "secretFiles": []}})
    assert "config.listeners[0].auth.keys_file /etc/vllm-sr/keys/public.txt is in no mounted Secret" in str(
        refused.value
    )


def test_envoy_and_the_sidecar_share_a_pod_the_control_plane_serves_both(
    rendered: dict[str, list[dict[str, Any]]],
) -> None:
    objs = rendered["default"]
    envoy = find(objs, "Deployment", f"{RELEASE}-vllm-sr-envoy")
    names = [c["name"] for c in envoy["spec"]["template"]["spec"]["containers"]]
    assert names == ["envoy", "sidecar"]
    xds = f"{RELEASE}-vllm-sr-control-plane.{NAMESPACE}.svc:18000"
    sidecar = container(envoy, "sidecar")
    assert sidecar["args"][sidecar["args"].index("--xds") + 1] == xds
    # Envoy reaches its sidecar on a Unix socket (mode 0600) in a volume only the two share.
    assert sidecar["args"][sidecar["args"].index("--socket") + 1] == "/var/run/vllm-sr/extproc.sock"
    plane = container(find(objs, "Deployment", f"{RELEASE}-vllm-sr-control-plane"), "control-plane")
    assert plane["args"][plane["args"].index("--sidecar") + 1] == "unix:/var/run/vllm-sr/extproc.sock"
    for c in (sidecar, container(envoy, "envoy")):
        assert {"name": "sidecar-socket", "mountPath": "/var/run/vllm-sr"} in c["volumeMounts"]
    assert {"name": "sidecar-socket", "emptyDir": {"medium": "Memory", "sizeLimit": "1Mi"}} in envoy["spec"][
        "template"
    ]["spec"]["volumes"]
    assert (
        plane["readinessProbe"]["httpGet"]["path"] == "/healthz"
        and plane["livenessProbe"]["httpGet"]["path"] == "/livez"
    )
    service = find(objs, "Service", f"{RELEASE}-vllm-sr-envoy")
    assert [p["port"] for p in service["spec"]["ports"]] == [8801]


def test_loopback_listeners_stay_out_of_the_service(rendered: dict[str, list[dict[str, Any]]]) -> None:
    service = find(rendered["public-4.0"], "Service", f"{RELEASE}-vllm-sr-envoy")
    assert [(p["name"], p["port"]) for p in service["spec"]["ports"]] == [("public", 8801)]


def test_runtime_groups_for_gpu_and_cpu_nodes(rendered: dict[str, list[dict[str, Any]]]) -> None:
    objs = rendered["gpu-and-cpu"]
    gpu = find(objs, "Deployment", "gpu")
    pod = gpu["spec"]["template"]["spec"]
    runtime = container(gpu, "runtime")
    # The digest is what is pulled; the tag stays for whoever reads the manifest.
    assert runtime["image"] == "vllm-sr/runtime:0.1.0-cuda@sha256:" + "b" * 64
    assert runtime["args"][:4] == ["serve", "/models/d3-ultra", "--device", "cuda"]
    assert runtime["resources"]["limits"] == {"nvidia.com/gpu": 1, "memory": "64Gi"}
    assert {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"} in pod["tolerations"]
    assert pod["nodeSelector"] == {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"}
    assert runtime["startupProbe"]["httpGet"]["path"] == "/health"
    assert (
        runtime["startupProbe"]["periodSeconds"] * runtime["startupProbe"]["failureThreshold"] == 1800
    )  # 30 min to load
    assert runtime["readinessProbe"]["httpGet"]["path"] == "/health"
    (init,) = pod["initContainers"]
    assert init["image"] == "registry.example/d3-ultra-weights:1@sha256:" + "d" * 64
    assert {"name": "models", "mountPath": "/models"} in init["volumeMounts"]
    assert {"name": "models", "mountPath": "/models", "readOnly": True} in runtime["volumeMounts"]
    cpu = find(objs, "Deployment", "cpu")
    assert container(cpu, "runtime")["image"] == "vllm-sr/runtime:0.1.0-cpu@sha256:" + "a" * 64
    assert "nvidia.com/gpu" not in str(cpu) and cpu["spec"]["replicas"] == 2
    assert find(objs, "Service", "cpu")["spec"]["ports"][0]["port"] == 8200


def test_secrets_travel_by_reference_only(rendered: dict[str, list[dict[str, Any]]]) -> None:
    objs = rendered["gpu-and-cpu"]
    assert [o for o in objs if o["kind"] == "Secret"] == []  # the chart creates none
    gpu = container(find(objs, "Deployment", "gpu"), "runtime")
    assert gpu["args"][gpu["args"].index("--api-key-env") + 1] == "VSR_RUNTIME_API_KEY"
    assert {
        "name": "VSR_RUNTIME_API_KEY",
        "valueFrom": {"secretKeyRef": {"name": "runtime-keys", "key": "gpu"}},
    } in gpu["env"]
    pod = find(objs, "Deployment", f"{RELEASE}-vllm-sr-envoy")
    env = {e["name"]: e["valueFrom"]["secretKeyRef"] for e in container(pod, "sidecar")["env"]}
    # The runtime group's key, under the name the deployment that calls it gives; never the LLM
    # provider's: Envoy adds that one, and gets both.
    assert env == {"VSR_GPU_KEY": {"name": "runtime-keys", "key": "gpu"}}
    envoy_env = {e["name"]: e["valueFrom"]["secretKeyRef"] for e in container(pod, "envoy")["env"]}
    assert envoy_env == {
        "VSR_GPU_KEY": {"name": "runtime-keys", "key": "gpu"},
        "VSR_LLM_KEY": {"name": "llm-keys", "key": "token"},
    }
    # Two workers share a loopback port: no socket then.
    assert "--socket" not in container(pod, "sidecar")["args"]
    sidecar_40 = container(find(rendered["public-4.0"], "Deployment", f"{RELEASE}-vllm-sr-envoy"), "sidecar")
    assert {"name": "secret-0", "mountPath": "/etc/vllm-sr/keys", "readOnly": True} in sidecar_40["volumeMounts"]


def test_discovery_may_list_and_watch_endpointslices_where_the_config_looks(
    rendered: dict[str, list[dict[str, Any]]],
) -> None:
    roles = [o for o in rendered["public-4.0"] if o["kind"] == "Role"]
    assert sorted(r["metadata"]["namespace"] for r in roles) == [
        "ml",
        "models",
    ]  # the release's, and the shared Service's
    for role in roles:
        assert role["rules"] == [
            {"apiGroups": ["discovery.k8s.io"], "resources": ["endpointslices"], "verbs": ["get", "list", "watch"]}
        ]
    bindings = [o for o in rendered["public-4.0"] if o["kind"] == "RoleBinding"]
    assert all(
        b["subjects"] == [{"kind": "ServiceAccount", "name": f"{RELEASE}-vllm-sr", "namespace": NAMESPACE}]
        for b in bindings
    )


def test_the_ads_port_is_reachable_only_from_envoy_pods(rendered: dict[str, list[dict[str, Any]]]) -> None:
    policy = find(rendered["gpu-and-cpu"], "NetworkPolicy", f"{RELEASE}-vllm-sr-control-plane")
    ads, status = policy["spec"]["ingress"]
    assert ads["ports"] == [{"port": 18000, "protocol": "TCP"}]
    assert ads["from"] == [
        {
            "podSelector": {
                "matchLabels": {
                    "app.kubernetes.io/name": "vllm-sr",
                    "app.kubernetes.io/instance": RELEASE,
                    "app.kubernetes.io/component": "envoy",
                }
            }
        }
    ]
    assert status["ports"] == [{"port": 18001, "protocol": "TCP"}]
    envoy_pods = find(rendered["gpu-and-cpu"], "Deployment", f"{RELEASE}-vllm-sr-envoy")["spec"]["template"][
        "metadata"
    ]["labels"]
    assert ads["from"][0]["podSelector"]["matchLabels"].items() <= envoy_pods.items()


def test_the_service_monitor_scrapes_what_exists(rendered: dict[str, list[dict[str, Any]]]) -> None:
    objs = rendered["gpu-and-cpu"]
    (monitor,) = [o for o in objs if o["kind"] == "ServiceMonitor"]
    assert monitor["apiVersion"] == "monitoring.coreos.com/v1"
    assert set(monitor["spec"]) == {"selector", "endpoints"}
    assert monitor["metadata"]["labels"]["release"] == "prometheus"
    expressions = monitor["spec"]["selector"]["matchExpressions"]
    assert {e["operator"] for e in expressions} == {"In"}
    services = [
        o
        for o in objs
        if o["kind"] == "Service" and all(o["metadata"]["labels"].get(e["key"]) in e["values"] for e in expressions)
    ]
    ports = {p["name"] for s in services for p in s["spec"]["ports"]}
    for endpoint in monitor["spec"]["endpoints"]:
        assert set(endpoint) == {"port", "path", "interval"}
        assert endpoint["port"] in ports, f"no selected Service has a port named {endpoint['port']}"
    assert {e["path"] for e in monitor["spec"]["endpoints"]} == {"/metrics", "/stats/prometheus"}
    assert "sidecar-status" in {e["port"] for e in monitor["spec"]["endpoints"]}
    # The sidecar's /metrics is opened to the pod network for it; its ext_proc port is not.
    pod = find(objs, "Deployment", f"{RELEASE}-vllm-sr-envoy")["spec"]["template"]["spec"]
    (sidecar,) = [c for c in pod["containers"] if c["name"] == "sidecar"]
    args = sidecar["args"]
    assert args[args.index("--status-host") + 1] == "0.0.0.0" and args[args.index("--host") + 1] == "127.0.0.1"


def test_every_value_is_documented_and_described() -> None:
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    doc = (ROOT / "docs" / "deploy" / "values.md").read_text()
    missing = [path for path in _leaves(values) if f"`{path}`" not in doc]
    assert missing == [], f"values not in docs/deploy/values.md: {missing}"
    schema = yaml.safe_load((CHART / "values.schema.json").read_text())
    undescribed = [path for path, node in _schema_nodes(schema, schema) if "description" not in node]
    assert undescribed == [], f"schema properties without a description: {undescribed}"


def test_the_values_schema_is_generated_from_the_config_schema() -> None:
    result = subprocess.run(
        [sys.executable, str(ROOT / "deploy" / "helm" / "schema.py"), "--check"],
        capture_output=True,
        text=True,
        cwd=ROOT,
    )
    assert result.returncode == 0, result.stderr


def _leaves(node: Any, prefix: str = "") -> list[str]:
    """Documented paths: every key down to a scalar, a list or an empty map; the router config
    (documented in docs/config/reference.md), the runtime groups' map (documented through
    runtimeDefaults) and Kubernetes resource requirements as themselves."""
    if not isinstance(node, dict) or not node or prefix in ("config", "runtimes") or prefix.endswith(".resources"):
        return [prefix]
    return [leaf for key, value in node.items() for leaf in _leaves(value, f"{prefix}.{key}" if prefix else key)]


def _schema_nodes(node: dict[str, Any], root: dict[str, Any], path: str = "") -> list[tuple[str, dict[str, Any]]]:
    out = []
    for key, child in (node.get("properties") or {}).items():
        if path == "" and key == "config":
            continue  # the router config's own schema, documented in docs/config/reference.md
        here = f"{path}.{key}" if path else key
        out.append((here, child))
        out += _schema_nodes(child, root, here)
        for branch in child.get("anyOf", []) + (
            [child["additionalProperties"]] if isinstance(child.get("additionalProperties"), dict) else []
        ):
            out += _schema_nodes(branch, root, here)
            for sub in branch.get("anyOf", []):
                out += _schema_nodes(sub, root, here)
    return out
