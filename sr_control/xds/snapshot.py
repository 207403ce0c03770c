"""An immutable, checked set of resources that every node of a group is served.

A Snapshot is built only by ``Snapshot.of``, which refuses resources that refer to resources
that are not there, so nothing inconsistent can ever be served.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timezone

from sr_control.compiler.consistency import consistent
from sr_control.compiler.resources import Resources


@dataclass(frozen=True, slots=True)
class Snapshot:
    resources: Resources
    generation: int  # 1 for the first version served by this process, then 2, 3, ...
    created_at: datetime = field(default_factory=lambda: datetime.now(timezone.utc))

    @classmethod
    def of(cls, resources: Resources, generation: int) -> Snapshot:
        return cls(consistent(resources), generation)

    @property
    def version(self) -> str:
        return self.resources.version

    def type_version(self, type_url: str) -> str:
        return self.resources.type_version(type_url)
