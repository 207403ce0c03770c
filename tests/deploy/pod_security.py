"""The Pod Security Standards' "restricted" profile (which includes "baseline") as a checker of
pod specs, written from the standard's text at
https://kubernetes.io/docs/concepts/security/pod-security-standards/ (policy version "latest",
Kubernetes 1.29 and later). Each rule names its control as the page does; a violation is one
line saying where and what."""

from __future__ import annotations

from typing import Any

# Baseline, "Capabilities": what a container may add.
BASELINE_CAPABILITIES = {
    "AUDIT_WRITE",
    "CHOWN",
    "DAC_OVERRIDE",
    "FOWNER",
    "FSETID",
    "KILL",
    "MKNOD",
    "NET_BIND_SERVICE",
    "SETFCAP",
    "SETGID",
    "SETPCAP",
    "SETUID",
    "SYS_CHROOT",
}
# Baseline, "Sysctls": the safe set.
SAFE_SYSCTLS = {
    "kernel.shm_rmid_forced",
    "net.ipv4.ip_local_port_range",
    "net.ipv4.ip_unprivileged_port_start",
    "net.ipv4.tcp_syncookies",
    "net.ipv4.ping_group_range",
    "net.ipv4.ip_local_reserved_ports",
    "net.ipv4.tcp_keepalive_time",
    "net.ipv4.tcp_fin_timeout",
    "net.ipv4.tcp_keepalive_intvl",
    "net.ipv4.tcp_keepalive_probes",
}
# Baseline, "SELinux": the allowed types.
SELINUX_TYPES = {"", "container_t", "container_init_t", "container_kvm_t", "container_engine_t"}
# Restricted, "Volume Types".
RESTRICTED_VOLUMES = {
    "configMap",
    "csi",
    "downwardAPI",
    "emptyDir",
    "ephemeral",
    "persistentVolumeClaim",
    "projected",
    "secret",
}


def containers(pod: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    return [
        (f"{kind}[{c['name']}]", c)
        for kind in ("initContainers", "containers", "ephemeralContainers")
        for c in pod.get(kind) or []
    ]


def violations(pod: dict[str, Any], annotations: dict[str, str] | None = None) -> list[str]:
    """Every way ``pod`` (a PodSpec) falls short of "restricted"; [] when it meets it."""
    out: list[str] = []
    psc = pod.get("securityContext") or {}
    cs = containers(pod)

    # Baseline.
    if (psc.get("windowsOptions") or {}).get("hostProcess"):
        out.append("HostProcess: spec.securityContext.windowsOptions.hostProcess")
    for field in ("hostNetwork", "hostPID", "hostIPC"):
        if pod.get(field):
            out.append(f"Host Namespaces: spec.{field}")
    for name, c in cs:
        sc = c.get("securityContext") or {}
        if (sc.get("windowsOptions") or {}).get("hostProcess"):
            out.append(f"HostProcess: {name}")
        if sc.get("privileged"):
            out.append(f"Privileged Containers: {name}")
        added = set((sc.get("capabilities") or {}).get("add") or [])
        if added - BASELINE_CAPABILITIES:
            out.append(f"Capabilities: {name} adds {sorted(added - BASELINE_CAPABILITIES)}")
        if any(p.get("hostPort") for p in c.get("ports") or []):
            out.append(f"Host Ports: {name}")
        if sc.get("procMount", "Default") != "Default":
            out.append(f"/proc Mount Type: {name}")
    for v in pod.get("volumes") or []:
        if "hostPath" in v:
            out.append(f"HostPath Volumes: volume {v['name']}")
    for where, sc in [("spec", psc)] + [(n, c.get("securityContext") or {}) for n, c in cs]:
        apparmor = (sc.get("appArmorProfile") or {}).get("type", "RuntimeDefault")
        if apparmor not in ("RuntimeDefault", "Localhost"):
            out.append(f"AppArmor: {where} {apparmor}")
        se = sc.get("seLinuxOptions") or {}
        if se.get("type", "") not in SELINUX_TYPES or se.get("user") or se.get("role"):
            out.append(f"SELinux: {where} {se}")
        if (sc.get("seccompProfile") or {}).get("type") == "Unconfined":
            out.append(f"Seccomp: {where} Unconfined")
    for key, value in (annotations or {}).items():
        if key.startswith("container.apparmor.security.beta.kubernetes.io/") and not (
            value == "runtime/default" or value.startswith("localhost/")
        ):
            out.append(f"AppArmor: annotation {key}={value}")
    for sysctl in psc.get("sysctls") or []:
        if sysctl.get("name") not in SAFE_SYSCTLS:
            out.append(f"Sysctls: {sysctl.get('name')}")

    # Restricted.
    for v in pod.get("volumes") or []:
        kinds = set(v) - {"name"}
        if not kinds <= RESTRICTED_VOLUMES:
            out.append(f"Volume Types: volume {v['name']} is {sorted(kinds - RESTRICTED_VOLUMES)}")
    pod_non_root = psc.get("runAsNonRoot") is True
    pod_seccomp = (psc.get("seccompProfile") or {}).get("type") in ("RuntimeDefault", "Localhost")
    if psc.get("runAsUser") == 0:
        out.append("Running as Non-root user: spec.securityContext.runAsUser 0")
    for name, c in cs:
        sc = c.get("securityContext") or {}
        if sc.get("allowPrivilegeEscalation") is not False:
            out.append(f"Privilege Escalation: {name} does not set allowPrivilegeEscalation: false")
        non_root = sc.get("runAsNonRoot")
        if non_root is False or (non_root is None and not pod_non_root):
            out.append(f"Running as Non-root: {name}")
        if sc.get("runAsUser") == 0:
            out.append(f"Running as Non-root user: {name} runAsUser 0")
        seccomp = (sc.get("seccompProfile") or {}).get("type")
        if not (seccomp in ("RuntimeDefault", "Localhost") or (seccomp is None and pod_seccomp)):
            out.append(f"Seccomp: {name} has no RuntimeDefault or Localhost profile")
        caps = sc.get("capabilities") or {}
        if "ALL" not in (caps.get("drop") or []):
            out.append(f"Capabilities: {name} does not drop ALL")
        if set(caps.get("add") or []) - {"NET_BIND_SERVICE"}:
            out.append(f"Capabilities: {name} adds more than NET_BIND_SERVICE")
    return out


__all__ = ["containers", "violations"]
