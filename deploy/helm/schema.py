"""Write (or check) the chart's values.schema.json: the chart's own values, and under ``config``
the router config's JSON Schema, as ``vllm-sr config schema`` prints it.

    .venv/bin/python deploy/helm/schema.py            # write deploy/helm/vllm-sr/values.schema.json
    .venv/bin/python deploy/helm/schema.py --check    # exit 1 when the file is stale

Helm validates values against it at install, upgrade, lint and template, so a router config of
the wrong shape (an unknown field, a port out of range, a deployment with both an endpoint and
a service) is refused before anything reaches the cluster, with Helm naming the value. What
only the whole-file checks catch (a pool naming an unknown deployment) is the control plane's
to report, with file and line, in its log.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from sr_control.config.model import RouterConfig

SCHEMA = Path(__file__).resolve().parent / "vllm-sr" / "values.schema.json"
DNS_LABEL = "^[a-z]([-a-z0-9]{0,61}[a-z0-9])?$"


def _obj(properties: dict[str, Any], description: str = "", required: tuple[str, ...] = ()) -> dict[str, Any]:
    out: dict[str, Any] = {"type": "object", "additionalProperties": False, "properties": properties}
    if description:
        out["description"] = description
    if required:
        out["required"] = list(required)
    return out


def _str(description: str, **extra: Any) -> dict[str, Any]:
    return {"type": "string", "description": description, **extra}


def _int(description: str, minimum: int = 0, maximum: int | None = None) -> dict[str, Any]:
    out: dict[str, Any] = {"type": "integer", "description": description, "minimum": minimum}
    if maximum is not None:
        out["maximum"] = maximum
    return out


def _port(description: str) -> dict[str, Any]:
    return _int(description, 1, 65535)


def _bool(description: str) -> dict[str, Any]:
    return {"type": "boolean", "description": description}


def _any_obj(description: str) -> dict[str, Any]:
    return {"type": "object", "description": description}


def _list(description: str, items: dict[str, Any] | None = None) -> dict[str, Any]:
    out: dict[str, Any] = {"type": "array", "description": description}
    if items is not None:
        out["items"] = items
    return out


DIGEST = "^$|^sha256:[0-9a-f]{64}$"


def _image(description: str) -> dict[str, Any]:
    return _obj(
        {
            "repository": _str("Image repository."),
            "tag": _str("Image tag."),
            "digest": _str("sha256:... of the image: pulled by digest (the tag stays for reading).", pattern=DIGEST),
            "pullPolicy": _str("Kubernetes imagePullPolicy.", enum=["Always", "IfNotPresent", "Never"]),
        },
        description,
    )


def _probe(description: str) -> dict[str, Any]:
    return _obj(
        {
            "periodSeconds": _int("Seconds between checks.", 1),
            "timeoutSeconds": _int("Seconds one check may take.", 1),
            "failureThreshold": _int("Failures in a row before the container is restarted (or unready).", 1),
        },
        description,
    )


def _pdb(description: str) -> dict[str, Any]:
    return _obj(
        {
            "enabled": _bool("Create a PodDisruptionBudget (only when replicas exceed minAvailable)."),
            "minAvailable": {
                "description": "Pods kept during voluntary disruptions.",
                "type": ["integer", "string"],
            },
        },
        description,
    )


def _secret_ref(description: str) -> dict[str, Any]:
    return _obj(
        {"secretName": _str("An existing Secret."), "key": _str("The key in it.")}, description, ("secretName", "key")
    )


SCHEDULING = {
    "nodeSelector": _any_obj("Pod nodeSelector."),
    "tolerations": _list("Pod tolerations."),
    "affinity": _any_obj("Pod affinity."),
    "podAnnotations": _any_obj("Annotations on the pods."),
}

RUNTIME_GROUP = {
    "enabled": _bool("Whether this group is deployed."),
    "replicas": _int("Pods in the group."),
    "device": _str("cpu, or cuda (the CUDA image and nvidia.com/gpu resources).", enum=["cpu", "cuda"]),
    "gpus": _int("GPUs per pod (device cuda): vllm-srun uses one device, so 1.", 1),
    "strategy": _any_obj("The Deployment's strategy; empty: on cuda maxSurge 0, maxUnavailable 1."),
    "runtimeClassName": _str("The pods' RuntimeClass; empty: the cluster's default."),
    "model": _str(
        "What vllm-srun serves: a built-in (default, smollm2-135m) or a checkpoint folder's path.", minLength=1
    ),
    "schema": _str(
        "What the runtime speaks (vllm-srun --systemone-schema).", enum=["vllm-sr/5.0", "vllm-sr/4.0", "systemone/0.2"]
    ),
    "port": _port("The runtime's port, and its Service's."),
    "apiKey": _obj(
        {"secretName": _str("An existing Secret; empty: no key."), "key": _str("The key in it.")},
        "The runtime's API key, by reference.",
    ),
    "extraArgs": _list("More vllm-srun serve flags.", {"type": "string"}),
    "env": _list("More environment variables (Kubernetes EnvVar objects)."),
    "weights": _obj(
        {
            "source": _str("Where checkpoints come from.", enum=["none", "pvc", "hostPath", "initContainer"]),
            "mountPath": _str("Where they are mounted.", pattern="^/"),
            "pvc": _obj(
                {"claimName": _str("An existing PersistentVolumeClaim."), "readOnly": _bool("Mount it read-only.")},
                "source pvc.",
            ),
            "hostPath": _obj(
                {"path": _str("A folder on the node."), "type": _str("hostPath type.")}, "source hostPath."
            ),
            "initContainer": _obj(
                {
                    "image": _str("An image that writes the checkpoints into mountPath."),
                    "pullPolicy": _str("Its imagePullPolicy.", enum=["Always", "IfNotPresent", "Never"]),
                    "command": _list("Its command.", {"type": "string"}),
                    "args": _list("Its args.", {"type": "string"}),
                    "env": _list("Its environment (EnvVar objects)."),
                    "sizeLimit": _str("Size limit of the emptyDir the checkpoints are written to."),
                    "resources": _any_obj("Its container resources."),
                },
                "source initContainer.",
            ),
        },
        "Model weights.",
    ),
    "cache": _obj(
        {
            "sizeLimit": _str("emptyDir size limit."),
            "medium": _str("emptyDir medium: empty or Memory.", enum=["", "Memory"]),
        },
        "Scratch space for caches.",
    ),
    "tmpSizeLimit": _str("Size limit of /tmp, an emptyDir."),
    "startupProbe": _obj(
        {
            "periodSeconds": _int("Seconds between checks.", 1),
            "failureThreshold": _int("Checks before the pod is restarted.", 1),
        },
        "Model load time allowed.",
    ),
    "readinessProbe": _obj(
        {
            "periodSeconds": _int("Seconds between checks.", 1),
            "failureThreshold": _int("Failures before the pod leaves its Service.", 1),
        },
        "Readiness on /health.",
    ),
    "livenessProbe": _probe("Liveness on /health, after the startup probe."),
    "preStopSeconds": _int("Seconds a stopping pod serves on while Envoy learns it is leaving (0: none)."),
    "resources": _any_obj("Container resources (nvidia.com/gpu is added for cuda)."),
    "terminationGracePeriodSeconds": _int("Seconds a stopping pod has to finish its requests."),
    **SCHEDULING,
}


def chart_schema() -> dict[str, Any]:
    return _obj(
        {
            "global": _any_obj("Helm's global values (unused)."),
            "nameOverride": _str("Replaces the chart name in resource names."),
            "fullnameOverride": _str("Replaces the release-and-chart prefix of resource names."),
            "images": _obj(
                {
                    "controlPlane": _image("vllm-sr: the control plane, the sidecar and (by default) Envoy."),
                    "runtimeCpu": _image("vllm-srun on CPU."),
                    "runtimeCuda": _image("vllm-srun on CUDA."),
                },
                "Images (deploy/docker/).",
            ),
            "imagePullSecrets": _list("Pull secrets for every pod."),
            "podSecurityContext": _any_obj("Every pod's securityContext (Pod Security restricted by default)."),
            "containerSecurityContext": _any_obj(
                "Every container's securityContext (restricted, read-only root filesystem by default)."
            ),
            "logFormat": _str("vllm-sr log lines.", enum=["json", "console"]),
            "logLevel": _str("vllm-sr log level.", enum=["debug", "info", "warning", "error"]),
            "config": {
                "$ref": "#/$defs/RouterConfig",
                "description": "The router config (docs/config/reference.md), format 2.",
            },
            "controlPlane": _obj(
                {
                    "replicas": _int("Control plane pods (each serves every Envoy the same versions).", 1),
                    "podDisruptionBudget": _pdb("Control plane PDB."),
                    "tls": _obj(
                        {
                            "enabled": _bool("Serve ADS over mTLS (off: plaintext, --insecure)."),
                            "secretName": _str("The control plane's Secret: tls.crt, tls.key, ca.crt (the nodes' CA)."),
                            "clientSecretName": _str(
                                "The Envoy pods' Secret: tls.crt, tls.key, ca.crt (the control plane's CA)."
                            ),
                            "certManager": _obj(
                                {
                                    "enabled": _bool("Have cert-manager issue both certificates."),
                                    "issuerRef": _any_obj("The cert-manager issuerRef: {name, kind, group}."),
                                },
                                "Certificates by cert-manager.",
                            ),
                        },
                        "ADS over mTLS.",
                    ),
                    "livenessProbe": _probe("Liveness on /livez."),
                    "adsPort": _port("gRPC ADS port."),
                    "statusPort": _port("HTTP /status, /metrics, /healthz, /livez."),
                    "maxStreams": _int("ADS streams open at once (vllm-sr xds serve --max-streams).", 1),
                    "discoveryNamespaces": _list(
                        "More namespaces to grant EndpointSlice list/watch in.",
                        {"type": "string", "pattern": DNS_LABEL.replace("[a-z]", "[a-z0-9]", 1)},
                    ),
                    "resources": _any_obj("Container resources."),
                    **SCHEDULING,
                },
                "vllm-sr xds serve.",
            ),
            "envoy": _obj(
                {
                    "replicas": _int("Envoy pods (without autoscaling).", 1),
                    "image": _obj(
                        {
                            "repository": _str("Empty: the control-plane image."),
                            "tag": _str("Image tag."),
                            "digest": _str("sha256:... of the image.", pattern=DIGEST),
                            "pullPolicy": _str("imagePullPolicy.", enum=["Always", "IfNotPresent", "Never"]),
                        },
                        "Envoy's image (it must carry vllm-sr for the preStop drain).",
                    ),
                    "ads": _str("xDS protocol.", enum=["delta", "sotw"]),
                    "nodeId": _str("Envoy's node ID.", minLength=1),
                    "xdsAddress": _str(
                        "HOST:PORT of the control plane; empty: the chart's Service.", pattern="^$|^[^:]+:[0-9]+$"
                    ),
                    "adminPort": _port("Envoy's admin port, on 127.0.0.1."),
                    "statsPort": _port("The stats listener: /stats/prometheus, /ready, /livez."),
                    "concurrency": _int("Envoy worker threads.", 1),
                    "logLevel": _str(
                        "Envoy's log level.",
                        enum=["trace", "debug", "info", "warning", "warn", "error", "critical", "off"],
                    ),
                    "drainSeconds": _int("Seconds a stopping pod still accepts, closing each connection."),
                    "drainTimeoutSeconds": _int(
                        "Then, seconds the requests in flight get (and --drain-time-s); 0: the longest System One "
                        "deadline plus 2 s."
                    ),
                    "readinessProbe": _probe("Readiness on the admin's /ready, through the stats listener."),
                    "livenessProbe": _probe("Liveness on the stats listener's /livez."),
                    "resources": _any_obj("Envoy container resources."),
                    "service": _obj(
                        {
                            "type": _str("Service type.", enum=["ClusterIP", "NodePort", "LoadBalancer"]),
                            "annotations": _any_obj("Service annotations."),
                            "loadBalancerSourceRanges": _list("CIDRs a LoadBalancer admits.", {"type": "string"}),
                        },
                        "The listeners' Service.",
                    ),
                    "autoscaling": _obj(
                        {
                            "enabled": _bool("Create a HorizontalPodAutoscaler."),
                            "minReplicas": _int("Fewest pods.", 1),
                            "maxReplicas": _int("Most pods.", 1),
                            "targetCPUUtilizationPercentage": _int("CPU target.", 1, 100),
                        },
                        "Envoy HPA.",
                    ),
                    "podDisruptionBudget": _pdb("Envoy PDB."),
                    "spread": _bool("Spread the pods over nodes and zones (topologySpreadConstraints, soft)."),
                    **SCHEDULING,
                },
                "Envoy and its pods.",
            ),
            "sidecar": _obj(
                {
                    "port": _port("ext_proc gRPC port (loopback)."),
                    "statusPort": _port("/status, /metrics, /healthz (loopback unless exposeMetrics)."),
                    "exposeMetrics": _bool(
                        "Open the status port to the pod network, for the ServiceMonitor (ext_proc stays on loopback)."
                    ),
                    "workers": _int("Worker processes.", 1, 64),
                    "drainSeconds": _int("vllm-sr extproc serve --drain-s (after Envoy has exited)."),
                    "livenessProbe": _probe("Liveness on /livez."),
                    "tmpSizeLimit": _str("Size limit of the sidecar's /tmp, an emptyDir."),
                    "extraArgs": _list("More vllm-sr extproc serve flags.", {"type": "string"}),
                    "resources": _any_obj("Container resources."),
                    "secretEnv": {
                        "type": "object",
                        "description": (
                            "Environment variable name -> {secretName, key}: keys the config names by variable."
                        ),
                        "propertyNames": {"pattern": "^[A-Za-z_][A-Za-z0-9_]*$"},
                        "additionalProperties": _secret_ref("One variable's Secret."),
                    },
                    "secretFiles": _list(
                        "Secrets mounted as files (listener keys_file).",
                        _obj(
                            {"secretName": _str("An existing Secret."), "mountPath": _str("Where.", pattern="^/")},
                            "",
                            ("secretName", "mountPath"),
                        ),
                    ),
                    "env": _list("More environment variables (EnvVar objects)."),
                },
                "vllm-sr extproc serve, in each Envoy pod.",
            ),
            "runtimes": {
                "type": "object",
                "description": (
                    "Runtime groups by name (the name of their Deployment and Service); each overrides runtimeDefaults."
                ),
                "propertyNames": {"pattern": DNS_LABEL},
                "additionalProperties": {"anyOf": [{"type": "null"}, _obj(RUNTIME_GROUP, "A runtime group.")]},
            },
            "runtimeDefaults": _obj(RUNTIME_GROUP, "What each runtime group has unless it says otherwise."),
            "serviceAccount": _obj(
                {
                    "create": _bool("Create the control plane's ServiceAccount."),
                    "name": _str("Its name (default: the release's)."),
                    "annotations": _any_obj("Its annotations."),
                },
                "The control plane's identity (it lists and watches EndpointSlices).",
            ),
            "rbac": _obj(
                {"create": _bool("Create the Roles and RoleBindings discovery needs.")}, "Discovery's permissions."
            ),
            "serviceMonitor": _obj(
                {
                    "enabled": _bool("Create a ServiceMonitor (Prometheus Operator)."),
                    "interval": _str("Scrape interval."),
                    "labels": _any_obj("Labels your Prometheus selects."),
                },
                "Metrics scraping.",
            ),
            "networkPolicy": _obj(
                {
                    "enabled": _bool("Create NetworkPolicies."),
                    "metricsFrom": _list("NetworkPolicy peers allowed to scrape."),
                },
                "Who may reach each pod the chart starts.",
            ),
        },
        "vllm-sr chart values (docs/deploy/values.md).",
    )


def values_schema() -> dict[str, Any]:
    config = RouterConfig.model_json_schema(by_alias=True)
    defs = config.pop("$defs")
    schema = chart_schema()
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        **schema,
        "$defs": {**defs, "RouterConfig": config},
    }


def text() -> str:
    return json.dumps(values_schema(), indent=2) + "\n"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--check", action="store_true", help="exit 1 when values.schema.json is stale")
    args = parser.parse_args()
    if args.check:
        if not SCHEMA.exists() or SCHEMA.read_text() != text():
            print(f"{SCHEMA} is stale: run .venv/bin/python deploy/helm/schema.py", file=sys.stderr)
            return 1
        return 0
    SCHEMA.write_text(text())
    print(f"wrote {SCHEMA}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
