"""Pool members found at run time: Kubernetes Services' ready pods, from their EndpointSlices.

``slices`` reads EndpointSlice objects (pure), ``kubernetes`` lists and watches them with the
``kubernetes`` client, ``discovery`` keeps one watch per Service a config names.
"""

from sr_control.pools.discovery import Discovery, KubernetesDiscovery, NoDiscovery, ServiceKey, discovery_from
from sr_control.pools.slices import Hosts, ready_hosts

__all__ = ["Discovery", "Hosts", "KubernetesDiscovery", "NoDiscovery", "ServiceKey", "discovery_from", "ready_hosts"]
