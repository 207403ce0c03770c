"""The control plane as one object: config file -> snapshots -> ADS, plus the status port.

plane = ControlPlane(Path("config.yaml"), Settings(), host="127.0.0.1", port=18000, status_port=18001)
plane.start()        # first reload, then gRPC, status HTTP and the file watch
...
plane.stop()
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from sr_base import log
from sr_control.compiler import Settings
from sr_control.compiler.protos import ENDPOINT, TYPE_NAMES
from sr_control.config.explain import explain
from sr_control.config.load import read_text
from sr_control.config.model import RouterConfig
from sr_control.decide.cards import members_of
from sr_control.pools.discovery import Discovery
from sr_control.xds.cache import SnapshotCache
from sr_control.xds.hooks import Hooks
from sr_control.xds.http import StatusServer
from sr_control.xds.ledger import Ledger
from sr_control.xds.metrics import Metrics
from sr_control.xds.reload import Reloader
from sr_control.xds.server import MAX_STREAMS, AdsService, make_server
from sr_control.xds.snapshot import Snapshot
from sr_control.xds.tls import ServerTls
from sr_control.xds.versions import KEEP, VersionStore
from sr_control.xds.watch import RECHECK_S, FileWatch

_log = log.get_logger("vllm_sr.xds")


class ControlPlane:
    def __init__(
        self,
        config: Path,
        settings: Settings = Settings(),
        *,
        host: str = "127.0.0.1",
        port: int = 18000,
        status_port: int = 18001,
        poll_interval: float = RECHECK_S,
        settle: float = 0.25,
        max_streams: int = MAX_STREAMS,
        discovery: Discovery | None = None,
        state_dir: Path | None = None,
        keep: int = KEEP,
        tls: ServerTls | None = None,
    ) -> None:
        """``tls``: serve ADS over mTLS (tls.py); None serves plaintext, which the CLI allows on loopback only."""
        self.config = config
        self.tls = tls
        # The versions served, with their text: under the state directory, so they outlive a restart.
        self.versions = VersionStore(state_dir / "versions" if state_dir is not None else None, keep)
        self.cache = SnapshotCache()
        self.ledger = Ledger()
        self.metrics = Metrics()
        self.reloader = Reloader(
            config,
            settings,
            self.cache,
            self.metrics,
            discovery=discovery,
            served=self._served,
        )
        self.service = AdsService(
            self.cache, Hooks.chain(self.ledger.hooks(), self.metrics.hooks()), max_streams=max_streams
        )
        self._host = host
        self._port = port
        self._status_port = status_port
        self._watch = FileWatch(config, self.reloader.reload, poll_interval, settle)
        self._grpc: Any = None
        self._http: StatusServer | None = None

    def start(self) -> None:
        """Serve. Raises ConfigUnreadable when the file is not there at all, OSError when a port is taken."""
        read_text(self.config)  # a wrong path is a usage error, not something to wait out
        # Watch first: an edit landing during the first reload is then reloaded, not missed.
        self._watch.start()
        try:
            self.reloader.reload()
            self._grpc, self.port = make_server(self.service, f"{self._host}:{self._port}", self.tls)
            try:
                self._http = StatusServer(
                    self._host,
                    self._status_port,
                    status=self.status,
                    metrics=self.metrics.text,
                    serving=lambda: self.reloader.snapshot is not None,
                    alive=self._watch.alive,
                    more=self._versions_http,
                    # A version's source text: what the file says beyond the compiled config (a
                    # rewrite's header values, comments), so only this host's callers read it.
                    loopback_only=("/versions/",),
                )
            except OSError as exc:
                raise OSError(f"cannot listen on {self._host}:{self._status_port}: {exc.strerror}") from None
        except BaseException:
            self.stop()
            raise
        self.status_port = self._http.port
        self._grpc.start()
        self._http.start()
        _log.info(
            "xds serving",
            ads=f"{self._host}:{self.port}",
            tls="mTLS" if self.tls is not None else "plaintext",
            status=f"{self._host}:{self.status_port}",
            config=str(self.config),
        )

    def stop(self) -> None:
        self._watch.stop()
        self.reloader.discovery.stop()
        if self._http is not None:
            self._http.stop()
        if self._grpc is not None:
            # ADS streams never end on their own, so waiting for them would only delay the exit.
            self._grpc.stop(grace=0.1).wait()

    def status(self) -> dict[str, Any]:
        streams = {"max": self.service.max_streams, "refused": self.service.refused}
        watch = "running" if self._watch.alive() else "stopped"
        discovery = self.reloader.discovery.status() | {"deployments": self.reloader.endpoints_status()}
        out = self.reloader.status() | {
            "watch": watch,
            "streams": streams,
            "discovery": discovery,
            "nodes": self.ledger.nodes(),
        }
        snapshot = self.reloader.snapshot
        # What each node must have ACKed, per type, to be on this version; and what each
        # listener offers (for ``vllm-sr status``).
        out["type_versions"] = (
            {TYPE_NAMES[t]: snapshot.type_version(t) for t in TYPE_NAMES} if snapshot is not None else {}
        )
        config = self.reloader.config
        out["listeners"] = listener_offers(config) if config is not None else []
        last = self.reloader.last_reload
        refusals = self.ledger.refusals(since=snapshot.created_at) if snapshot is not None else []
        if refusals and last is not None and last["result"] in ("ok", "unchanged"):
            # Valid and published is not live: an Envoy refused it (a port taken, say) and keeps
            # serving what it had. A later version it accepts is published later, and clears this.
            out["last_reload"] = last | {"result": "refused", "refused_by": refusals}
        return out

    def _served(self, snapshot: Snapshot, text: str) -> None:
        types = {TYPE_NAMES[t]: snapshot.type_version(t) for t in TYPE_NAMES if t != ENDPOINT}
        self.versions.record(snapshot.version, text, snapshot.generation, types)

    def _versions_http(self, path: str) -> tuple[int, str, bytes] | None:
        """``GET /versions`` (the list, newest first) and ``GET /versions/VERSION`` (its source text)."""
        if path == "/versions":
            snapshot = self.reloader.snapshot
            doc = {
                "config": str(self.config),
                "live": snapshot.version if snapshot is not None else None,
                "keep": self.versions.keep,
                "versions": self.versions.entries(),
            }
            return 200, "application/json", json.dumps(doc, indent=2).encode() + b"\n"
        if path.startswith("/versions/"):
            text = self.versions.source(path.removeprefix("/versions/"))
            if text is None:
                return 404, "application/json", b'{"detail":"no such version kept; GET /versions lists them"}\n'
            return 200, "application/yaml; charset=utf-8", text.encode()
        return None


def listener_offers(config: RouterConfig) -> list[dict[str, Any]]:
    """Per listener: its APIs, each with its schema and models, each model with its members."""
    out = []
    for entry in explain(config)["listeners"]:
        apis = [
            {
                "api": api["api"],
                "schema": api["schema"],
                "models": {model: list(members_of(config, model)) for model in api["models"]},
            }
            for api in entry["apis"]
        ]
        out.append({"name": entry["name"], "address": entry["address"], "port": entry["port"], "apis": apis})
    return out


__all__ = ["ControlPlane"]
