"""The value sets every chart test renders: the default values and three that exercise the
chart's options (a pool on a PVC, GPU and CPU groups with every optional part on, a 4.0 listener
with keys from files and a namespace of its own)."""

from __future__ import annotations

from typing import Any

ONE_POOL: dict[str, Any] = {
    "runtimes": {
        "runtime": None,
        "d3": {
            "replicas": 3,
            "model": "/models/d3-turbo",
            "weights": {"source": "pvc", "pvc": {"claimName": "d3-weights"}},
        },
    },
    "config": {
        "version": 2,
        "deployments": {
            "d3": {
                "provider": "systemone",
                "service": {"name": "d3", "port": 8100},
                "model": "d3-turbo",
                "schema": "vllm-sr/5.0",
            }
        },
        "pools": {"vllm-sr/auto": {"members": ["d3"]}},
        "listeners": [
            {"name": "public", "port": 8801, "apis": {"systemone": {"models": ["vllm-sr/auto", "d3-turbo"]}}}
        ],
    },
    # ADS over mTLS, certificates by cert-manager.
    "controlPlane": {"tls": {"enabled": True, "certManager": {"enabled": True, "issuerRef": {"name": "vllm-sr-ca"}}}},
}

GPU_AND_CPU: dict[str, Any] = {
    "runtimes": {
        "runtime": None,
        "gpu": {
            "device": "cuda",
            "gpus": 1,
            "runtimeClassName": "nvidia",
            "model": "/models/d3-ultra",
            "apiKey": {"secretName": "runtime-keys", "key": "gpu"},
            "weights": {
                "source": "initContainer",
                "initContainer": {
                    "image": "registry.example/d3-ultra-weights:1@sha256:" + "d" * 64,
                    "command": ["cp", "-r", "/weights/.", "/models/"],
                },
            },
            "nodeSelector": {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"},
            "resources": {"requests": {"cpu": "4", "memory": "32Gi"}, "limits": {"memory": "64Gi"}},
        },
        "cpu": {"replicas": 2, "model": "default", "port": 8200},
    },
    "config": {
        "version": 2,
        "providers": {
            "models": [
                {"name": "gpt-oss-120b", "endpoints": ["http://llm.internal:8000/v1"], "api_key_env": "VSR_LLM_KEY"}
            ]
        },
        "deployments": {
            "gpu": {
                "provider": "systemone",
                "service": {"name": "gpu", "port": 8100},
                "model": "d3-ultra",
                "schema": "vllm-sr/5.0",
                "api_key_env": "VSR_GPU_KEY",
            },
            "cpu": {
                "provider": "systemone",
                "service": {"name": "cpu", "port": 8200},
                "model": "default",
                "schema": "vllm-sr/5.0",
            },
        },
        "pools": {"vllm-sr/auto": {"members": ["gpu", "cpu"]}, "fast": {"members": ["cpu"]}},
        "listeners": [
            {
                "name": "public",
                "port": 8801,
                "apis": {
                    "systemone": {"models": ["vllm-sr/auto", "fast"]},
                    "chat_completions": {"models": ["gpt-oss-120b"]},
                },
            }
        ],
    },
    "sidecar": {
        "secretEnv": {"VSR_LLM_KEY": {"secretName": "llm-keys", "key": "token"}},
        "workers": 2,
        "exposeMetrics": True,
    },
    "envoy": {"autoscaling": {"enabled": True}, "service": {"type": "LoadBalancer"}},
    # Pulled by digest, as production should (docs/deploy/images.md).
    "images": {
        "controlPlane": {"digest": "sha256:" + "c" * 64},
        "runtimeCpu": {"digest": "sha256:" + "a" * 64},
        "runtimeCuda": {"digest": "sha256:" + "b" * 64},
    },
    "serviceMonitor": {"enabled": True, "labels": {"release": "prometheus"}},
    "networkPolicy": {
        "enabled": True,
        "metricsFrom": [{"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "monitoring"}}}],
    },
}

PUBLIC_40: dict[str, Any] = {
    "config": {
        "version": 2,
        "deployments": {
            "local": {
                "provider": "systemone",
                "service": {"name": "runtime", "port": 8100},
                "model": "default",
                "schema": "vllm-sr/5.0",
            },
            "shared": {
                "provider": "systemone",
                "service": {"name": "d3", "namespace": "models", "port": 80},
                "model": "d3",
                "schema": "vllm-sr/5.0",
            },
            "gateway": {
                "provider": "systemone",
                "endpoint": "https://gateway.example.com/v1/systemone",
                "model": "d3-gw",
                "deviations": ["state_text"],
                "capabilities": {"question_types": ["noul", "choice", "score"]},
                "api_key_env": "VSR_GATEWAY_KEY",
            },
        },
        "pools": {"vllm-sr/auto": {"members": ["local", "shared", "gateway"]}},
        "listeners": [
            {
                "name": "public",
                "port": 8801,
                "auth": {"keys_file": "/etc/vllm-sr/keys/public.txt"},
                "apis": {"systemone": {"schema": "vllm-sr/4.0", "models": ["vllm-sr/auto"], "max_deadline_ms": 3000}},
            },
            {
                "name": "internal",
                "address": "127.0.0.1",
                "port": 8802,
                "auth": {"keys_env": "VSR_INTERNAL_KEYS"},
                "apis": {"systemone": {"models": ["vllm-sr/auto", "d3"]}},
            },
        ],
    },
    "sidecar": {
        "secretEnv": {
            "VSR_GATEWAY_KEY": {"secretName": "gateway", "key": "key"},
            "VSR_INTERNAL_KEYS": {"secretName": "listener-keys", "key": "internal"},
        },
        "secretFiles": [{"secretName": "listener-keys-public", "mountPath": "/etc/vllm-sr/keys"}],
    },
    # ADS over mTLS, certificates from Secrets made beforehand.
    "controlPlane": {"tls": {"enabled": True, "secretName": "xds-server", "clientSecretName": "xds-client"}},
}

VALUE_SETS = {"default": {}, "one-pool": ONE_POOL, "gpu-and-cpu": GPU_AND_CPU, "public-4.0": PUBLIC_40}

__all__ = ["GPU_AND_CPU", "ONE_POOL", "PUBLIC_40", "VALUE_SETS"]
