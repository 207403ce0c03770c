"""What an operator checks before `helm install` on a production cluster, on the rendered chart:
every pod under Pod Security "restricted" with a read-only root, sized scratch space and probes;
NetworkPolicies over every pod; GPU rollouts that need no spare GPU; disruption budgets only
where they can be met; a stopping Envoy pod that drains before it goes."""

from __future__ import annotations

from typing import Any

import helm_python as helm
import pytest

from tests.deploy.chart import CHART, NAMESPACE, RELEASE, container, find, objects, render
from tests.deploy.pod_security import containers, violations
from tests.deploy.value_sets import GPU_AND_CPU, VALUE_SETS

WORKLOADS = ("Deployment", "Job", "StatefulSet", "DaemonSet")


def pods(objs: list[dict[str, Any]]) -> list[tuple[str, dict[str, Any]]]:
    """(kind/name, pod template) of every workload."""
    return [(f"{o['kind']}/{o['metadata']['name']}", o["spec"]["template"]) for o in objs if o["kind"] in WORKLOADS]


@pytest.mark.parametrize("name", VALUE_SETS)
def test_every_pod_meets_pod_security_restricted(rendered: dict[str, list[dict[str, Any]]], name: str) -> None:
    found = pods(rendered[name])
    assert found
    for where, template in found:
        assert violations(template["spec"], template["metadata"].get("annotations")) == [], where


@pytest.mark.parametrize("name", VALUE_SETS)
def test_every_container_is_read_only_sized_and_pulled_as_told(
    rendered: dict[str, list[dict[str, Any]]], name: str
) -> None:
    for where, template in pods(rendered[name]):
        spec = template["spec"]
        for cname, c in containers(spec):
            assert c["securityContext"]["readOnlyRootFilesystem"] is True, f"{where} {cname}"
            requests = c["resources"]["requests"]
            assert {"cpu", "memory", "ephemeral-storage"} <= requests.keys(), f"{where} {cname}"
            assert "memory" in c["resources"]["limits"], f"{where} {cname}"
            assert c["imagePullPolicy"] in ("IfNotPresent", "Always", "Never"), f"{where} {cname}"
        for volume in spec.get("volumes", []):
            if "emptyDir" in volume:
                assert volume["emptyDir"].get("sizeLimit"), f"{where}: emptyDir {volume['name']}"
        # Once any container has an ephemeral-storage limit, the kubelet evicts the pod when its
        # emptyDirs and logs together pass the sum of them: the runtime's weights and cache would.
        if any(v["name"] in ("models", "cache") for v in spec.get("volumes", [])):
            for cname, c in containers(spec):
                assert "ephemeral-storage" not in c["resources"].get("limits", {}), f"{where} {cname}"


@pytest.mark.parametrize("name", VALUE_SETS)
def test_every_long_running_container_has_liveness_and_readiness_probes(
    rendered: dict[str, list[dict[str, Any]]], name: str
) -> None:
    for where, template in pods(rendered[name]):
        if where.startswith("Job/"):
            continue  # the helm test: runs once
        for c in template["spec"]["containers"]:
            assert {"livenessProbe", "readinessProbe"} <= c.keys(), f"{where} {c['name']}"
            assert c["livenessProbe"].get("timeoutSeconds", 1) > 1, f"{where} {c['name']}"


def test_the_restricted_checker_refuses_what_the_standard_refuses() -> None:
    good = {
        "securityContext": {"runAsNonRoot": True, "seccompProfile": {"type": "RuntimeDefault"}},
        "containers": [
            {"name": "c", "securityContext": {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}}}
        ],
    }
    assert violations(good) == []
    bad = [
        ({"hostNetwork": True}, "Host Namespaces"),
        ({"volumes": [{"name": "w", "hostPath": {"path": "/data"}}]}, "HostPath Volumes"),
        ({"securityContext": {"runAsNonRoot": True}}, "Seccomp"),
        ({"securityContext": {"seccompProfile": {"type": "RuntimeDefault"}}}, "Running as Non-root"),
        ({"volumes": [{"name": "n", "nfs": {"server": "x", "path": "/"}}]}, "Volume Types"),
    ]
    for change, control in bad:
        spec = {**good, **change}
        assert any(v.startswith(control) for v in violations(spec)), (change, violations(spec))
    for container_sc, control in [
        ({"allowPrivilegeEscalation": True, "capabilities": {"drop": ["ALL"]}}, "Privilege Escalation"),
        ({"allowPrivilegeEscalation": False}, "Capabilities"),
        ({"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"], "add": ["NET_ADMIN"]}}, "Capabilities"),
        ({"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}, "privileged": True}, "Privileged"),
        ({"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}, "runAsUser": 0}, "Running as Non-root"),
    ]:
        spec = {**good, "containers": [{"name": "c", "securityContext": container_sc}]}
        assert any(v.startswith(control) for v in violations(spec)), (container_sc, violations(spec))


@pytest.mark.parametrize("name", VALUE_SETS)
def test_network_policies_cover_every_pod(rendered: dict[str, list[dict[str, Any]]], name: str) -> None:
    policies = [o for o in rendered[name] if o["kind"] == "NetworkPolicy"]
    for where, template in pods(rendered[name]):
        labels = template["metadata"]["labels"]
        assert any(p["spec"]["podSelector"]["matchLabels"].items() <= labels.items() for p in policies), where


def test_the_envoy_pods_admit_their_listeners_and_stats_and_nothing_else(
    rendered: dict[str, list[dict[str, Any]]],
) -> None:
    policy = find(rendered["gpu-and-cpu"], "NetworkPolicy", f"{RELEASE}-vllm-sr-envoy")
    listeners, stats = policy["spec"]["ingress"]
    assert listeners == {"ports": [{"port": 8801, "protocol": "TCP"}]}  # clients, from anywhere
    assert stats["ports"] == [{"port": 9902, "protocol": "TCP"}, {"port": 18081, "protocol": "TCP"}]
    assert stats["from"] == GPU_AND_CPU["networkPolicy"]["metricsFrom"]
    envoy = find(rendered["default"], "Deployment", f"{RELEASE}-vllm-sr-envoy")
    bootstrap = find(rendered["default"], "ConfigMap", f"{RELEASE}-vllm-sr-envoy")["data"]["bootstrap.yaml"]
    assert 'socket_address: {address: "127.0.0.1", port_value: 9901}' in bootstrap  # the admin
    ports = {p["containerPort"] for c in envoy["spec"]["template"]["spec"]["containers"] for p in c.get("ports", [])}
    assert ports == {8801, 9902}  # the listener and the stats listener; no admin


def test_gpu_groups_roll_in_place_and_cpu_groups_size_their_threads(
    rendered: dict[str, list[dict[str, Any]]],
) -> None:
    objs = rendered["gpu-and-cpu"]
    gpu, cpu = find(objs, "Deployment", "gpu"), find(objs, "Deployment", "cpu")
    # A surge pod would wait for a spare GPU: the old pod goes first.
    assert gpu["spec"]["strategy"] == {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 0, "maxUnavailable": 1}}
    assert "strategy" not in cpu["spec"]  # Kubernetes' default: surge first
    assert gpu["spec"]["template"]["spec"]["runtimeClassName"] == "nvidia"
    threads = {e["name"]: e for e in container(cpu, "runtime")["env"]}["OMP_NUM_THREADS"]
    assert threads["valueFrom"]["resourceFieldRef"] == {
        "containerName": "runtime",
        "resource": "requests.cpu",
        "divisor": "1",
    }
    given = objects(
        render(
            {**GPU_AND_CPU, "runtimes": {"gpu": {**GPU_AND_CPU["runtimes"]["gpu"], "strategy": {"type": "Recreate"}}}}
        )
    )
    assert find(given, "Deployment", "gpu")["spec"]["strategy"] == {"type": "Recreate"}


def test_more_than_one_gpu_per_pod_is_refused_saying_what_to_do_instead() -> None:
    with pytest.raises(helm.HelmRenderError) as refused:
        render(
            {
                **GPU_AND_CPU,
                "runtimes": {**GPU_AND_CPU["runtimes"], "gpu": {**GPU_AND_CPU["runtimes"]["gpu"], "gpus": 2}},
            }
        )
    assert (
        "runtimes.gpu.gpus is 2, but vllm-srun serves one model on one device, so a pod uses one GPU and the "
        "others would sit reserved and idle: give gpus: 1 and replicas: 2 (one pod per GPU)"
    ) in str(refused.value)


@pytest.mark.parametrize(
    ("values", "budgets"),
    [
        ({}, {f"{RELEASE}-vllm-sr-envoy", f"{RELEASE}-vllm-sr-control-plane"}),
        ({"envoy": {"replicas": 1}, "controlPlane": {"replicas": 1}}, set()),  # would block every node drain
        ({"envoy": {"replicas": 3, "podDisruptionBudget": {"minAvailable": 3}}}, {f"{RELEASE}-vllm-sr-control-plane"}),
        (
            {"envoy": {"replicas": 1, "autoscaling": {"enabled": True, "minReplicas": 2}}},
            {f"{RELEASE}-vllm-sr-envoy", f"{RELEASE}-vllm-sr-control-plane"},
        ),
        (
            {"envoy": {"replicas": 2, "podDisruptionBudget": {"minAvailable": "50%"}}},
            {f"{RELEASE}-vllm-sr-envoy", f"{RELEASE}-vllm-sr-control-plane"},
        ),
    ],
)
def test_a_disruption_budget_exists_only_where_it_can_be_met(values: dict[str, Any], budgets: set[str]) -> None:
    objs = objects(render(values))
    assert {o["metadata"]["name"] for o in objs if o["kind"] == "PodDisruptionBudget"} == budgets


def test_envoy_replicas_spread_over_nodes_and_zones_softly(rendered: dict[str, list[dict[str, Any]]]) -> None:
    spec = find(rendered["default"], "Deployment", f"{RELEASE}-vllm-sr-envoy")["spec"]["template"]["spec"]
    spread = spec["topologySpreadConstraints"]
    assert [(s["topologyKey"], s["whenUnsatisfiable"]) for s in spread] == [
        ("kubernetes.io/hostname", "ScheduleAnyway"),
        ("topology.kubernetes.io/zone", "ScheduleAnyway"),
    ]


def test_a_stopping_envoy_pod_drains_for_as_long_as_its_longest_deadline(
    rendered: dict[str, list[dict[str, Any]]],
) -> None:
    envoy = find(rendered["default"], "Deployment", f"{RELEASE}-vllm-sr-envoy")
    assert container(envoy, "envoy")["lifecycle"]["preStop"]["exec"]["command"] == [
        "vllm-sr", "envoy", "drain", "--admin", "127.0.0.1:9901", "--announce-s", "5", "--timeout-s", "12",
    ]  # fmt: skip
    args = container(envoy, "envoy")["args"]
    # A listener an LDS update replaces keeps its connections as long as a stopping pod's requests get.
    assert args[args.index("--drain-time-s") + 1] == "12" and args[args.index("--drain-strategy") + 1] == "immediate"
    sidecar = container(envoy, "sidecar")["lifecycle"]["preStop"]["exec"]["command"]
    assert sidecar[:3] == ["vllm-sr", "envoy", "wait"]
    # The default listener allows 10 s: 5 s announced, 12 s for requests in flight, then the
    # sidecar's 10 s drain and 5 s to spare.
    assert envoy["spec"]["template"]["spec"]["terminationGracePeriodSeconds"] == 5 + 12 + 10 + 5
    # public-4.0's longest System One API has no max_deadline_ms: 60 s, and 2 s more.
    envoy_40 = find(rendered["public-4.0"], "Deployment", f"{RELEASE}-vllm-sr-envoy")
    assert container(envoy_40, "envoy")["lifecycle"]["preStop"]["exec"]["command"][-1] == "62"


def test_a_stopping_runtime_serves_until_envoy_has_heard(rendered: dict[str, list[dict[str, Any]]]) -> None:
    runtime = find(rendered["default"], "Deployment", "runtime")
    assert container(runtime, "runtime")["lifecycle"]["preStop"]["exec"]["command"] == ["sleep", "5"]
    probe = container(runtime, "runtime")["livenessProbe"]
    assert probe["httpGet"]["path"] == "/health" and probe["timeoutSeconds"] == 5


def test_a_grace_period_shorter_than_the_runtimes_stop_is_refused() -> None:
    with pytest.raises(helm.HelmRenderError) as refused:
        render({"runtimeDefaults": {"preStopSeconds": 30, "terminationGracePeriodSeconds": 30}})
    assert (
        "runtimes.runtime.terminationGracePeriodSeconds is 30, but the pod serves on for preStopSeconds (30) "
        "before SIGTERM, and vllm-srun needs up to 5 s more to finish its requests: give at least 40"
    ) in str(refused.value)


def test_pods_carry_the_recommended_labels(rendered: dict[str, list[dict[str, Any]]]) -> None:
    for where, template in pods(rendered["gpu-and-cpu"]):
        labels = template["metadata"]["labels"]
        for key in ("name", "instance", "component", "version", "managed-by"):
            assert f"app.kubernetes.io/{key}" in labels, where


def test_helm_test_checks_the_control_plane_and_a_listener(rendered: dict[str, list[dict[str, Any]]]) -> None:
    job = find(rendered["default"], "Job", f"{RELEASE}-vllm-sr-test")
    assert job["metadata"]["annotations"]["helm.sh/hook"] == "test"
    script = job["spec"]["template"]["spec"]["containers"][0]["command"][-1]
    assert f"http://{RELEASE}-vllm-sr-control-plane:18001/healthz" in script
    assert f"http://{RELEASE}-vllm-sr-envoy:8801/v1/models" in script


def test_discovery_roles_of_same_named_releases_in_two_namespaces_do_not_collide() -> None:
    names = set()
    for namespace in (NAMESPACE, "staging"):
        with helm.Chart.load(CHART) as chart:
            text = chart.render(
                {"controlPlane": {"discoveryNamespaces": ["models"]}},
                name=RELEASE,
                namespace=namespace,
                is_install=True,
            )
        roles = [o for o in objects(text) if o["kind"] == "Role" and o["metadata"]["namespace"] == "models"]
        names |= {r["metadata"]["name"] for r in roles}
    assert names == {f"{RELEASE}-vllm-sr-{NAMESPACE}-discovery", f"{RELEASE}-vllm-sr-staging-discovery"}


# Where each side's certificate, key and CA are mounted, in that order.
MOUNTED_TLS = ["/etc/vllm-sr-tls/tls.crt", "/etc/vllm-sr-tls/tls.key", "/etc/vllm-sr-tls/ca.crt"]


def flag_values(args: list[str], *flags: str) -> list[str]:
    """The value after each of ``flags`` in a container's args."""
    return [args[args.index(flag) + 1] for flag in flags]


def test_ads_over_mtls_mounts_each_side_its_certificate(rendered: dict[str, list[dict[str, Any]]]) -> None:
    for name, server, client in (("public-4.0", "xds-server", "xds-client"), ("one-pool", None, None)):
        objs = rendered[name]
        plane = find(objs, "Deployment", f"{RELEASE}-vllm-sr-control-plane")
        args = container(plane, "control-plane")["args"]
        assert flag_values(args, "--tls-cert", "--tls-key", "--client-ca") == MOUNTED_TLS
        assert "--insecure" not in args
        envoy = find(objs, "Deployment", f"{RELEASE}-vllm-sr-envoy")
        sidecar = container(envoy, "sidecar")["args"]
        assert flag_values(sidecar, "--xds-cert", "--xds-key", "--xds-ca") == MOUNTED_TLS
        secrets = {
            v["secret"]["secretName"]
            for d in (plane, envoy)
            for v in d["spec"]["template"]["spec"]["volumes"]
            if v["name"] == "xds-tls"
        }
        if server is None:  # cert-manager's Certificates, named by the release
            certs = {o["metadata"]["name"]: o for o in objs if o["kind"] == "Certificate"}
            server, client = f"{RELEASE}-vllm-sr-xds-server", f"{RELEASE}-vllm-sr-xds-client"
            assert certs[server]["spec"]["dnsNames"][1] == f"{RELEASE}-vllm-sr-control-plane.{NAMESPACE}.svc"
            assert certs[client]["spec"]["usages"][0] == "client auth"
            assert {c["spec"]["issuerRef"]["name"] for c in certs.values()} == {"vllm-sr-ca"}
        assert secrets == {server, client}
    # Without TLS, plaintext ADS on the pod network is asked for by name.
    default = container(find(rendered["default"], "Deployment", f"{RELEASE}-vllm-sr-control-plane"), "control-plane")
    assert "--insecure" in default["args"] and "--tls-cert" not in default["args"]


def test_mtls_without_certificates_is_refused_saying_what_to_give() -> None:
    with pytest.raises(helm.HelmRenderError) as refused:
        render({"controlPlane": {"tls": {"enabled": True}}})
    assert "controlPlane.tls.enabled: give controlPlane.tls.secretName" in str(refused.value)
