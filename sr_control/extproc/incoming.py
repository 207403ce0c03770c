"""One HTTP request as the sidecar sees it, and what every handler needs beside it."""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from sr_control.extproc.auth import KeyRing
from sr_control.extproc.cards import CardBook
from sr_control.extproc.data import ListenerData
from sr_control.extproc.metrics import Metrics
from sr_control.extproc.pool import Pool
from sr_control.extproc.settings import SidecarSettings
from sr_control.extproc.upstream import Http
from sr_control.extproc.versions import VersionStore


@dataclass(frozen=True, slots=True)
class Incoming:
    listener: str
    api: str  # x-vsr-api: systemone, models, chat_completions, ...
    data: ListenerData
    method: str
    path: str
    headers: dict[str, str]  # lower-cased names
    request_id: str
    started: float = field(default_factory=time.monotonic)

    def remaining_s(self, deadline_ms: int) -> float:
        return deadline_ms / 1000 - (time.monotonic() - self.started)


@dataclass
class Sidecar:
    """Everything one worker shares between its requests."""

    settings: SidecarSettings
    store: VersionStore
    cards: CardBook
    pool: Pool
    http: Http
    keys: KeyRing
    metrics: Metrics


__all__ = ["Incoming", "Sidecar"]
