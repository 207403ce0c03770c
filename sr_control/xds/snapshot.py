"""An immutable, checked set of resources that every node of a group is served.

A Snapshot is built only by ``Snapshot.of``, which refuses resources that refer to resources
that are not there, so nothing inconsistent can ever be served.

It holds two parts: the resources compiled from the config, whose version is the config
version (what ``/status`` and the metrics show), and the endpoints of Service-backed
deployments (EDS), which discovery changes on its own, without a new config version.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime

from sr_control.compiler.consistency import consistent
from sr_control.compiler.protos import ENDPOINT
from sr_control.compiler.resources import Resource, Resources

NO_ENDPOINTS = Resources({ENDPOINT: ()})


@dataclass(frozen=True, slots=True)
class Snapshot:
    resources: Resources  # compiled from the config
    generation: int  # 1 for the first version served by this process, then 2, 3, ...
    created_at: datetime = field(default_factory=lambda: datetime.now(UTC))
    endpoints: Resources = field(default_factory=lambda: NO_ENDPOINTS)  # EDS: discovered hosts, one per cluster

    @classmethod
    def of(cls, resources: Resources, generation: int, endpoints: Resources = NO_ENDPOINTS) -> Snapshot:
        return cls(consistent(resources), generation, endpoints=endpoints)

    def with_endpoints(self, endpoints: Resources) -> Snapshot:
        """The same config version with other endpoints: pod churn never makes a new config version."""
        return dataclasses.replace(self, endpoints=endpoints)

    @property
    def version(self) -> str:
        return self.resources.version

    def type_version(self, type_url: str) -> str:
        return self._part(type_url).type_version(type_url)

    def named(self, type_url: str) -> Mapping[str, Resource]:
        return self._part(type_url).named(type_url)

    def _part(self, type_url: str) -> Resources:
        return self.endpoints if type_url == ENDPOINT else self.resources
