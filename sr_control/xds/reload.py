"""From the config file to a served snapshot: read, validate, compile, check, publish.

Only a config that passes every step is published, as one new version; a failure at any step
is logged with file, line and field, recorded as the last error, and the version already served
stays served. An error nobody expected (a bug: a template lookup, a type error in conversion) is
handled the same way, as result ``error``, with its traceback in the log.

Endpoints of Service-backed deployments are published beside the config: the reloader tells
discovery which Services the config names, waits briefly for their first listing (so a first
push carries pods, not an empty pool), and republishes the endpoints alone, under the same
config version, whenever discovery reports a change (``endpoints_changed``).
"""

from __future__ import annotations

import hashlib
import threading
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal

from sr_base import log
from sr_control.compiler import CompileError, Settings
from sr_control.compiler.incremental import Recompiler
from sr_control.compiler.protos import ENDPOINT, LISTENER, SIDECAR, TYPE_NAMES
from sr_control.config.errors import ConfigUnreadable, Problem
from sr_control.config.load import read_text, validate_text
from sr_control.config.model import RouterConfig
from sr_control.config.reread import Rereader
from sr_control.pools.discovery import Discovery, NoDiscovery
from sr_control.xds.cache import ALL_NODES, SnapshotCache
from sr_control.xds.endpoints import EndpointBuilder
from sr_control.xds.metrics import Metrics
from sr_control.xds.snapshot import Snapshot

Result = Literal["ok", "unchanged", "invalid", "unreadable", "error"]
_log = log.get_logger("vllm_sr.xds")


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="milliseconds")


@dataclass(frozen=True, slots=True)
class Outcome:
    result: Result
    version: str | None  # the version served after this reload
    problems: tuple[dict[str, Any], ...] = ()


def _listener_versions(snapshot: Snapshot | None) -> dict[str, str]:
    """Each listener's x-vsr-config-version: the version of its part of the config (its sidecar data)."""
    return {r.name.removeprefix("sidecar/"): r.version for r in snapshot.named(SIDECAR).values()} if snapshot else {}


def _problem(p: Problem) -> dict[str, Any]:
    return {"file": p.file, "line": p.line, "column": p.column, "field": p.path if p.loc else "", "message": p.message}


# How long a config that names new Services waits for their first listing before it is served.
SYNC_WAIT_S = 2.0


class Reloader:
    def __init__(
        self,
        path: Path,
        settings: Settings,
        cache: SnapshotCache,
        metrics: Metrics,
        group: str = ALL_NODES,
        discovery: Discovery | None = None,
        served: Callable[[Snapshot, str], None] | None = None,
    ) -> None:
        self.path = path
        self._served = served  # told of each new version with the text it came from (the version store)
        self.settings = settings
        self.cache = cache
        self.metrics = metrics
        self.group = group
        self.snapshot: Snapshot | None = None
        self.last_reload: dict[str, Any] | None = None
        self.last_error: dict[str, Any] | None = None
        self._lock = threading.Lock()  # one reload at a time
        self._publish = threading.Lock()  # one snapshot change at a time: a reload or new endpoints
        self._text_digest: str | None = None
        self.discovery: Discovery = discovery if discovery is not None else NoDiscovery()
        self._config: RouterConfig | None = None  # the config served
        # Builds again only what an edit touched, reusing the rest of the last compile.
        self._recompiler = Recompiler(settings)
        self._reader = Rereader()  # and parses only the entries it changed
        self._endpoints = EndpointBuilder(self.discovery, metrics)
        self.discovery.subscribe(self.endpoints_changed)

    def endpoints_changed(self) -> None:
        """Discovery saw a change: serve the new endpoints under the same config version."""
        with self._publish:
            if self.snapshot is None or self._config is None:
                return
            endpoints = self._endpoints.build(self._config)
            if endpoints.type_version(ENDPOINT) == self.snapshot.type_version(ENDPOINT):
                return
            self.snapshot = self.snapshot.with_endpoints(endpoints)
            self.cache.set_snapshot(self.group, self.snapshot)
        _log.info("endpoints served", version=endpoints.type_version(ENDPOINT), config_version=self.snapshot.version)

    def reload(self) -> Outcome:
        with self._lock:
            try:
                outcome = self._reload()
            except Exception as exc:  # noqa: BLE001 - whatever it is, the version served stays served
                outcome = self._failed(exc)
        self.metrics.reloads.labels(result=outcome.result).inc()
        self.last_reload = {"result": outcome.result, "at": _now(), "version": outcome.version}
        return outcome

    @property
    def config(self) -> RouterConfig | None:
        """The config served (None before the first valid one)."""
        return self._config

    def endpoints_status(self) -> dict[str, Any]:
        return self._endpoints.status()

    def status(self) -> dict[str, Any]:
        s = self.snapshot
        return {
            "config": str(self.path),
            "version": s.version if s else None,
            # What each listener's responses carry as x-vsr-config-version: the version of that
            # listener's part of the config (its sidecar data), which changes only when an edit
            # touches it. ``version`` above is the whole file's.
            "listener_versions": _listener_versions(s),
            "generation": s.generation if s else 0,
            "served_since": s.created_at.isoformat(timespec="milliseconds") if s else None,
            "resources": {name: len(s.named(t)) for t, name in TYPE_NAMES.items()} if s else {},
            "last_reload": self.last_reload,
            "last_error": self.last_error,
        }

    def _reload(self) -> Outcome:
        served = self.snapshot.version if self.snapshot else None
        try:
            text = read_text(self.path)
        except ConfigUnreadable as exc:
            self._text_digest = None
            return self._reject(
                "unreadable",
                [{"file": exc.file, "line": 0, "column": 0, "field": "", "message": f"cannot read: {exc.reason}"}],
            )
        digest = hashlib.sha256(text.encode()).hexdigest()
        if digest == self._text_digest:
            return Outcome("unchanged", served)
        self._text_digest = digest
        report = validate_text(text, str(self.path), reader=self._reader)
        for warning in (p for p in report.problems if p.severity == "warning"):
            _log.warning("config warning", **_problem(warning))
        if report.config is None:
            return self._reject("invalid", [_problem(p) for p in report.errors])
        try:
            snapshot = Snapshot.of(
                self._recompiler.compile(report.config), (self.snapshot.generation if self.snapshot else 0) + 1
            )
        except CompileError as exc:
            return self._reject(
                "invalid",
                [
                    {
                        "file": str(self.path),
                        "line": 0,
                        "column": 0,
                        "field": getattr(exc, "path", ""),
                        "message": str(exc),
                    }
                ],
            )
        if snapshot.version == served:
            _log.info("config unchanged", file=str(self.path), version=served)
            return Outcome("unchanged", served)
        services = self._endpoints.services(report.config)
        self.discovery.watch(services)
        self.discovery.wait_synced(services, SYNC_WAIT_S)
        before = _listener_versions(self.snapshot)
        with self._publish:
            snapshot = snapshot.with_endpoints(self._endpoints.build(report.config))
            self.snapshot, self._config = snapshot, report.config
            self.cache.set_snapshot(self.group, snapshot)
        self.metrics.served(snapshot.version, snapshot.generation)
        if self._served is not None:
            self._served(snapshot, text)
        changed = {name: v for name, v in _listener_versions(snapshot).items() if before.get(name) != v}
        _log.info(
            "config served",
            file=str(self.path),
            version=snapshot.version,
            generation=snapshot.generation,
            listeners=len(snapshot.resources[LISTENER]),
            # The x-vsr-config-version each changed listener's responses carry from now on.
            # (many listeners: only how many; GET /status lists each).
            listener_versions=changed if len(changed) <= 20 else f"{len(changed)} listeners changed",
        )
        return Outcome("ok", snapshot.version)

    def _failed(self, exc: Exception) -> Outcome:
        # Read the same text again on the next change: the fault may lie outside the file.
        self._text_digest = None
        _log.error("config reload failed unexpectedly", file=str(self.path), exception=traceback.format_exc())
        message = f"unexpected error (a bug in vllm-sr; the traceback is in its log): {type(exc).__name__}: {exc}"
        return self._reject(
            "error", [{"file": str(self.path), "line": 0, "column": 0, "field": "", "message": message}]
        )

    def _reject(self, result: Result, problems: list[dict[str, Any]]) -> Outcome:
        served = self.snapshot.version if self.snapshot else None
        for p in problems:
            _log.error("config rejected", **p)
        _log.error(
            "config not served", file=str(self.path), result=result, problems=len(problems), still_serving=served
        )
        self.last_error = {"result": result, "at": _now(), "problems": problems}
        return Outcome(result, served, tuple(problems))
