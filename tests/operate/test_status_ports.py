"""Where ``vllm-sr status`` reads each sidecar: the status port its node told the control plane."""

from __future__ import annotations

from typing import Any

from sr_control.operate.status import status_ports


def _sidecar(node_id: str, told: str | None, peer: str = "ipv4:10.0.0.7:58912") -> dict[str, Any]:
    return {"id": node_id, "kind": "sidecar", "status_address": told, "peer": peer}


def test_workers_sharing_a_port_are_read_once_and_envoys_not_at_all() -> None:
    nodes = [
        _sidecar("a/1", "10.0.0.7:18081"),
        _sidecar("a/2", "10.0.0.7:18081"),
        {"id": "vllm-sr-envoy", "kind": "envoy", "status_address": None, "peer": "ipv4:10.0.0.7:1"},
    ]
    assert status_ports(nodes) == (["10.0.0.7:18081"], [])


def test_a_wildcard_address_is_read_at_the_nodes_peer() -> None:
    nodes = [_sidecar("a", "0.0.0.0:18081"), _sidecar("b", "[::]:18081", peer="ipv6:[fd00::9]:4242")]
    assert status_ports(nodes) == (["10.0.0.7:18081", "[fd00::9]:18081"], [])


def test_another_hosts_loopback_is_not_read_here_and_an_older_sidecar_is_named() -> None:
    addresses, warnings = status_ports(
        [
            _sidecar("far", "127.0.0.1:18081"),
            _sidecar("old", None),
            _sidecar("near", "127.0.0.1:18091", "ipv4:127.0.0.1:5"),
        ]
    )
    assert addresses == ["127.0.0.1:18091"]
    assert warnings[0].startswith("sidecar far serves its status on 127.0.0.1:18081 of its own host (10.0.0.7)")
    assert warnings[1] == "sidecar old does not tell its status port (an older sidecar): give --sidecar"
