"""``vllm-sr config rollback --configmap`` on a real stack whose config is a ConfigMap's: the
ConfigMap is patched through the Kubernetes API (a stand-in: tests/operate/configmaps.py) and the
version goes live once the "kubelet" writes the mounted file; without RBAC, the kubectl command."""

from __future__ import annotations

import json
import shlex
from pathlib import Path

import pytest

from tests.conftest import run_cli
from tests.operate.configmaps import FakeConfigMaps
from tests.operate.stack import Live

pytestmark = [pytest.mark.envoy, pytest.mark.slow]
NAME = "vllm-sr-config"


def test_rollback_patches_the_configmap_and_follows_every_node(live: Live, tmp_path: Path) -> None:
    base, kept = live.text(), live.status()["version"]
    edited = base.replace("max_deadline_ms: 20000}", "max_deadline_ms: 15000}", 1)
    live.write(edited)
    live.wait_synced(edited)
    # The kubelet: a patched ConfigMap's key becomes the mounted file the control plane watches.
    api = FakeConfigMaps(on_patch=lambda data: live.write(data["config.yaml"]))
    api.put("ops", NAME, {"config.yaml": edited, "notes.txt": "not ours"})
    kubeconfig = api.kubeconfig(tmp_path, "ops")
    where = ("--xds", live.plane.status_address, "--configmap", NAME, "--kubeconfig", str(kubeconfig))
    rollback = ("config", "rollback", kept, *where)
    try:
        done = run_cli(*rollback, cwd=tmp_path, timeout=120)
        assert done.returncode == 0, done.stdout + done.stderr
        assert f"patched ConfigMap ops/{NAME} key config.yaml with version {kept}" in done.stdout
        assert "ACK  envoy   vllm-sr-envoy" in done.stdout and f"live: {kept} on 2 node(s)" in done.stdout
        assert live.status()["version"] == kept
        # One read, one merge patch guarded by the resourceVersion read; the other key kept.
        assert api.requests == [f"GET ops/{NAME}", f"PATCH ops/{NAME} application/merge-patch+json"]
        assert api.data("ops", NAME) == {"config.yaml": live.config.read_text(), "notes.txt": "not ours"}
        assert live.config.read_text() == base
        # Again: the ConfigMap holds it already and it is live; nothing is patched or waited for.
        again = run_cli(*rollback, cwd=tmp_path)
        assert again.returncode == 0 and f"holds version {kept} already, and it is live" in again.stdout
        assert api.requests[2:] == [f"GET ops/{NAME}"]

        # Without the right to patch it (RBAC): nothing changes; the patch is saved, the command printed.
        live.write(edited)
        live.wait_synced(edited)
        api.forbidden.add("ops")
        refused = run_cli(*rollback, cwd=tmp_path)
        assert refused.returncode == 0, refused.stdout + refused.stderr
        assert "not patched: the Kubernetes API refused: 403 configmaps" in refused.stdout
        patch = tmp_path / f"vllm-sr-{kept}.patch.json"
        command = f"kubectl -n ops patch configmap {NAME} --type merge --patch-file {shlex.quote(str(patch))}"
        assert refused.stdout.rstrip().endswith(command)
        assert json.loads(patch.read_text()) == {"data": {"config.yaml": base}}
        assert live.config.read_text() == edited and api.data("ops", NAME)["config.yaml"] == base

        # A config mounted from a ConfigMap (the kubelet's ..data link beside it) whose name is
        # not given: the file is left alone (the kubelet would undo a write), the command printed.
        mount = live.config.parent / "..data"
        mount.symlink_to(tmp_path)
        unnamed = run_cli("config", "rollback", kept, "--xds", live.plane.status_address, cwd=tmp_path)
        assert unnamed.returncode == 0, unnamed.stdout + unnamed.stderr
        assert "the config is mounted from a ConfigMap whose name this host cannot see" in unnamed.stdout
        assert "patch configmap '<configmap>' --type merge" in unnamed.stdout
        assert live.config.read_text() == edited
    finally:
        (live.config.parent / "..data").unlink(missing_ok=True)
        api.stop()
        live.write(base)  # as the other tests expect it
        live.wait_synced(base)
