"""The local stack behind ``vllm-sr serve``: a runtime, the control plane, the ext_proc sidecar
and Envoy, supervised.

    stack = Stack(StackOptions(state_dir=Path(".vllm-sr")))
    stack.start()          # each part started in order and waited on until it is ready
    stack.wait()           # until Ctrl-C / SIGTERM, or until a part dies
    stack.stop()           # drain, then stop in reverse order

The runtime (``vllm-srun serve``), the sidecar (``vllm-sr extproc serve``) and Envoy are child
processes in sessions of their own, so a Ctrl-C reaches this supervisor only, which then stops
them in order. The control plane runs in this process. Each child writes its log to the state
directory, and a part that fails to start or dies is reported with the end of its log.

Secrets stay where they belong (docs/extproc/auth.md): the runtime requires a key the stack
makes at each start; the sidecar and Envoy's admin listen on Unix sockets of mode 0600 in a
folder of mode 0700; each child gets only the key variables it reads; every child's output
reaches its log (mode 0600, in a 0700 folder) through a redactor that removes keys.

Stopping drains: Envoy stops accepting connections, the requests it holds finish (through the
sidecar and the runtime, both still up), then Envoy, the sidecar, the control plane and the
runtime stop, each within a bound.
"""

from __future__ import annotations

import hashlib
import json
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, fields
from importlib import resources
from pathlib import Path
from typing import IO

from sr_base import log
from sr_control.compiler import Address, Settings, bootstrap
from sr_control.compiler.output import to_yaml
from sr_control.compiler.protos import to_dict
from sr_control.config import load as loader
from sr_control.config.model import RouterConfig
from sr_control.config.source import dump, parse
from sr_control.drain import admin_request, drain
from sr_control.redact import Redactor
from sr_control.xds import ControlPlane

_log = log.get_logger("vllm_sr.stack")
BIN = Path(sys.executable).parent
# The variable under which the runtime and its callers (the sidecar, Envoy) get the key the stack
# makes at each start; the embedded config's deployment names it (api_key_env).
RUNTIME_KEY_ENV = "VLLM_SR_RUNTIME_KEY"
# After the drain bound, how long the parts have to exit before they are killed.
STOP_GRACE = 1.5


class StackError(Exception):
    """A part of the stack could not start, or died; the message says which and why."""


@dataclass(frozen=True)
class Ports:
    runtime: int = 8100
    listener: int = 8801  # the embedded config's listener; a given config keeps its own
    xds: int = 18000
    xds_status: int = 18001
    sidecar: int = 18080
    sidecar_status: int = 18081
    admin: int = 9901

    def shifted(self, offset: int) -> Ports:
        return Ports(*(getattr(self, f.name) + offset for f in fields(self)))


@dataclass(frozen=True)
class StackOptions:
    state_dir: Path
    config: Path | None = None  # None: the embedded default (sr_control/defaults/local.yaml)
    model: str = "default"
    device: str = "cpu"
    ports: Ports = Ports()
    start_timeout: float = 180.0  # a cold model load on 2 cores takes a while
    drain_timeout: float = 10.0  # how long requests in flight may take to finish on stop
    reset_config: bool = False  # write the embedded default over an edited served copy


def default_config(ports: Ports) -> str:
    """The embedded default config with its runtime and listener ports set."""
    text = resources.files("sr_control.defaults").joinpath("local.yaml").read_text(encoding="utf-8")
    doc = parse(text, "local.yaml")
    doc["deployments"]["local"]["endpoint"] = f"http://127.0.0.1:{ports.runtime}/v1/systemone"
    doc["listeners"][0]["port"] = ports.listener
    return dump(doc)


@dataclass
class _Child:
    name: str
    process: subprocess.Popen[bytes]
    log: Path

    def tail(self, lines: int = 15) -> str:
        try:
            return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""


@dataclass
class Stack:
    options: StackOptions
    _children: list[_Child] = field(default_factory=list)
    _plane: ControlPlane | None = None
    _config: RouterConfig | None = None
    _stop: threading.Event = field(default_factory=threading.Event)
    # The sidecar's and Envoy admin's Unix sockets, in a folder of mode 0700 made at start.
    _run_dir: Path | None = None
    _redactor: Redactor = field(default_factory=Redactor)

    @property
    def sidecar_socket(self) -> Path:
        assert self._run_dir is not None, "a started stack"
        return self._run_dir / "extproc.sock"

    @property
    def admin_socket(self) -> Path:
        assert self._run_dir is not None, "a started stack"
        return self._run_dir / "envoy-admin.sock"

    @property
    def config_path(self) -> Path:
        return self.options.state_dir / "config.yaml"

    def start(self) -> None:
        opts = self.options
        ports = opts.ports
        # The state holds the logs and the served config: this user's alone.
        for folder in (opts.state_dir, opts.state_dir / "logs"):
            folder.mkdir(mode=0o700, parents=True, exist_ok=True)
            folder.chmod(0o700)
        # The sidecar and Envoy's admin listen on Unix sockets (no port): only their ports for
        # plain HTTP and the listeners are checked.
        for name, port in (
            ("runtime", ports.runtime),
            ("control plane", ports.xds),
            ("control plane status", ports.xds_status),
            ("ext_proc sidecar status", ports.sidecar_status),
        ):
            _free(name, port)
        self._place_config()
        config = self._config = loader.load(self.config_path)  # refuse a bad config before starting anything
        for listener in config.listeners:
            _free(f"listener {listener.name}", listener.port, listener.address)
        _check_runtime_key(config, ports.runtime, opts.config or self.config_path)

        # The runtime answers only callers holding this key, made anew at each start.
        runtime_key = secrets.token_urlsafe(32)
        env = Environments.of(config, os.environ, runtime_key)
        self._redactor = Redactor([*env.key_values(), *_file_keys(config)])
        for name in env.missing:
            # Said now, not at the first request: a listener would answer 503 keys_unavailable, an
            # upstream would get "Bearer -" from Envoy and answer 401.
            _log.warning(
                "key variable unset",
                variable=name,
                hint=f"the config names {name} (keys_env or api_key_env); export it before vllm-sr serve",
            )
        self._run_dir = _run_dir(opts.state_dir)

        self._spawn(
            "runtime",
            [
                str(BIN / "vllm-srun"),
                "serve",
                opts.model,
                "--device",
                opts.device,
                "--host",
                "127.0.0.1",
                "--port",
                str(ports.runtime),
                "--api-key-env",
                RUNTIME_KEY_ENV,
                # The config's tracing as the stack starts: the runtime is no xDS client, so an
                # edit of it reaches Envoy and the sidecar only (docs/operate.md, Tracing).
                *(
                    [
                        "--otlp-endpoint",
                        config.tracing.otlp_endpoint,
                        "--trace-service-name",
                        config.tracing.service_name,
                    ]
                    if config.tracing is not None
                    else []
                ),
            ],
            env.runtime,
        )
        self._wait("runtime", lambda: _health(f"http://127.0.0.1:{ports.runtime}/health"))

        settings = Settings(
            xds=Address("127.0.0.1", ports.xds),
            sidecar=Address(path=str(self.sidecar_socket)),
            admin=Address(path=str(self.admin_socket)),
        )
        self._plane = ControlPlane(
            self.config_path,
            settings,
            host="127.0.0.1",
            port=ports.xds,
            status_port=ports.xds_status,
            state_dir=opts.state_dir,  # the versions served outlive a restart (vllm-sr config versions)
        )
        self._plane.start()

        self._spawn(
            "extproc",
            [
                str(BIN / "vllm-sr"),
                "--log-format",
                "json",
                "extproc",
                "serve",
                "--xds",
                f"127.0.0.1:{ports.xds}",
                "--socket",
                str(self.sidecar_socket),
                "--status-port",
                str(ports.sidecar_status),
                "--drain-s",
                str(opts.drain_timeout),
            ],
            env.sidecar,
        )
        self._wait("extproc", lambda: _get(f"http://127.0.0.1:{ports.sidecar_status}/healthz") == 200)

        boot = opts.state_dir / "bootstrap.yaml"
        boot.write_text(to_yaml(to_dict(bootstrap(settings))), encoding="utf-8")
        envoy = shutil.which("envoy", path=str(BIN)) or "envoy"
        self._spawn("envoy", [envoy, "-c", str(boot), "--base-id", str(ports.admin), "--log-level", "warn"], env.envoy)
        admin = self.admin_socket
        self._wait("envoy", lambda: admin_get(admin, "/ready")[0] == 200)
        self._wait("envoy listeners", lambda: _listeners_live(admin, len(config.listeners)))

    def _place_config(self) -> None:
        """Put the config to serve at ``config_path``.

        A given ``--config`` is copied there. Otherwise the served copy the user may have edited
        (the README says to) is kept across restarts; the embedded default is written only when
        there is none, with ``--reset-config``, or over a default this stack wrote and nobody
        edited since (its digest is kept beside it), so a new ``--port-offset`` still takes."""
        opts = self.options
        if opts.config is not None:
            if opts.config.resolve() != self.config_path.resolve():
                shutil.copyfile(opts.config, self.config_path)
            return
        written = opts.state_dir / ".default-config.sha256"
        try:
            current = hashlib.sha256(self.config_path.read_bytes()).hexdigest()
        except FileNotFoundError:
            current = None
        untouched = current is not None and written.is_file() and written.read_text().strip() == current
        if current is not None and not untouched and not opts.reset_config:
            _log.info(
                "keeping the served config",
                file=str(self.config_path),
                hint="--reset-config writes the embedded default over it",
            )
            return
        text = default_config(opts.ports)
        self.config_path.write_text(text, encoding="utf-8")
        written.write_text(hashlib.sha256(text.encode()).hexdigest() + "\n", encoding="utf-8")

    def _spawn(self, name: str, argv: list[str], env: dict[str, str]) -> None:
        """Start a child with ``env`` as its whole environment; its output reaches its log file
        (mode 0600) through the redactor, never straight from the child."""
        path = self.options.state_dir / "logs" / f"{name}.log"
        out = os.fdopen(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600), "wb")
        os.chmod(path, 0o600)  # a log left by an older stack may be wider
        _log.info("starting", part=name, log=str(path))
        process = subprocess.Popen(
            _dying_with_parent(argv),
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
            env=env,
        )
        assert process.stdout is not None
        threading.Thread(
            target=_copy_redacted, args=(process.stdout, out, self._redactor), name=f"log-{name}", daemon=True
        ).start()
        self._children.append(_Child(name, process, path))

    def _wait(self, name: str, ready: Callable[[], bool]) -> None:
        deadline = time.monotonic() + self.options.start_timeout
        while time.monotonic() < deadline and not self._stop.is_set():
            for child in self._children:
                if child.process.poll() is not None:
                    raise StackError(
                        f"{child.name} exited with code {child.process.returncode} while starting; its log "
                        f"({child.log}) ends:\n{child.tail()}"
                    )
            if ready():
                _log.info("ready", part=name)
                return
            time.sleep(0.1)
        if self._stop.is_set():
            raise StackError("stopped while starting")
        raise StackError(f"{name} was not ready after {self.options.start_timeout:.0f} s")

    def wait(self) -> int:
        """Block until asked to stop (0) or until a child dies (1)."""
        while not self._stop.wait(0.2):
            for child in self._children:
                if child.process.poll() is not None:
                    _log.error("part died", part=child.name, code=child.process.returncode, log=str(child.log))
                    sys.stderr.write(child.tail() + "\n")
                    return 1
        return 0

    def request_stop(self, *_: object) -> None:
        self._stop.set()

    def stop(self) -> None:
        """Drain Envoy, then stop every part, all within ``drain_timeout`` plus STOP_GRACE.

        Envoy stops first (no request reaches the others after it), then the rest are asked to
        stop together: a runtime still computing an abandoned request would otherwise hold the
        exit for as long as the request takes. What is still running at the bound is killed."""
        bound = time.monotonic() + self.options.drain_timeout + STOP_GRACE
        envoy = self._child("envoy")
        if envoy is not None and envoy.process.poll() is None:
            self._drain_envoy()
            self._terminate([envoy], min(bound, time.monotonic() + STOP_GRACE / 2))
        if self._plane is not None:
            self._plane.stop()  # nothing pushes config to a stopping stack
            self._plane = None
        self._terminate([c for c in reversed(self._children) if c is not envoy], bound)
        self._children.clear()
        if self._run_dir is not None:
            shutil.rmtree(self._run_dir, ignore_errors=True)
            self._run_dir = None

    def _child(self, name: str) -> _Child | None:
        return next((c for c in self._children if c.name == name), None)

    def _terminate(self, children: list[_Child], deadline: float) -> None:
        """SIGTERM each of ``children``, wait for them until ``deadline``, then kill the rest."""
        for child in children:
            if child.process.poll() is None:
                child.process.send_signal(signal.SIGTERM)
        for child in children:
            try:
                child.process.wait(timeout=max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                _log.warning("killing", part=child.name, hint="it did not stop within the drain bound")
                child.process.kill()
                child.process.wait()

    def _drain_envoy(self) -> None:
        """Envoy stops accepting; the requests it holds finish (bounded) before it is stopped."""
        drain(f"unix:{self.admin_socket}", timeout_s=self.options.drain_timeout, graceful=False)

    def summary(self) -> list[tuple[str, str]]:
        ports = self.options.ports
        assert self._config is not None, "summary() describes a started stack"
        config = self._config
        rows = []
        for listener in config.listeners:
            host = "127.0.0.1" if listener.address in ("0.0.0.0", "::") else listener.address
            rows.append((f"listener {listener.name}", f"http://{host}:{listener.port}"))
        rows += [
            (
                "runtime",
                f"http://127.0.0.1:{ports.runtime}  (model {self.options.model}; POST /v1/systemone, GET /v1/models)",
            ),
            ("control plane", f"127.0.0.1:{ports.xds} (ADS), http://127.0.0.1:{ports.xds_status}/status"),
            (
                "ext_proc sidecar",
                f"unix:{self.sidecar_socket} (gRPC, this user only), http://127.0.0.1:{ports.sidecar_status}/status",
            ),
            ("envoy admin", f"unix:{self.admin_socket} (this user only: curl --unix-socket PATH http://envoy/stats)"),
            ("config", f"{self.config_path}  (edits go live)"),
            ("logs", f"{self.options.state_dir / 'logs'}"),
        ]
        return rows


# A child in a session of its own gets no Ctrl-C, and would outlive a supervisor that is killed:
# util-linux's setpriv asks the kernel to SIGTERM it when the supervisor dies, however it dies.
# (Not a preexec_fn: Python code between fork and exec in this threaded process can crash the
# child, which was seen once as an Envoy "exiting" with SIGSEGV before it ran.)
_SETPRIV = shutil.which("setpriv") if sys.platform == "linux" else None


def _dying_with_parent(argv: list[str]) -> list[str]:
    return [_SETPRIV, "--pdeathsig", "TERM", "--", *argv] if _SETPRIV else argv


def _free(name: str, port: int, host: str = "127.0.0.1") -> None:
    """Refuse a port something listens on; a port held only by connections in TIME-WAIT (a stack
    stopped a moment ago) is free to the servers, which bind with SO_REUSEADDR as this does."""
    with socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((host, port))
        except OSError as exc:
            owner = listening_owner(port)
            who = f" by {owner}" if owner else ""
            raise StackError(
                f"port {port} for the {name} is taken{who}: {exc.strerror} (another vllm-sr serve? use --port-offset)"
            ) from None


def listening_owner(port: int) -> str | None:
    """The process listening on TCP ``port`` as ``pid N (command)``, where /proc says (Linux, and
    only for processes this user may inspect); None when unknown."""
    inodes = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            lines = Path(table).read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            cols = line.split()
            # local address "ADDR:PORT" in hex; state 0A is LISTEN; column 9 is the socket's inode
            if len(cols) > 9 and cols[3] == "0A" and int(cols[1].rsplit(":", 1)[1], 16) == port:
                inodes.add(f"socket:[{cols[9]}]")
    if not inodes:
        return None
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            if any(os.readlink(fd) in inodes for fd in (proc / "fd").iterdir()):
                command = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace").strip()
                return f"pid {proc.name} ({command[:120]})"
        except OSError:
            continue
    return "another process (its owner is not visible to this user)"


def _get(url: str) -> int:
    try:
        with urllib.request.urlopen(url, timeout=1) as reply:
            return int(reply.status)
    except urllib.error.HTTPError as exc:
        return int(exc.code)
    except OSError:
        return 0


def _health(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=1) as reply:
            body = json.loads(reply.read() or b"{}")
    except (OSError, ValueError):
        return False
    return bool(body.get("ready", body.get("status") == "ready"))


def admin_get(admin: Path, path: str, method: str = "GET", timeout: float = 2) -> tuple[int, bytes]:
    """Envoy's admin on its Unix socket: (status, body), or (0, b"") when it does not answer."""
    return admin_request(f"unix:{admin}", path, method, timeout)


def _listeners_live(admin: Path, expected: int) -> bool:
    status, body = admin_get(admin, "/listeners?format=json", timeout=1)
    try:
        live = json.loads(body).get("listener_statuses", []) if status == 200 else []
    except ValueError:
        return False
    return len(live) >= expected


def _copy_redacted(source: IO[bytes], out: IO[bytes], redactor: Redactor) -> None:
    """A child's output, line by line, into its log file without any key (until it exits)."""
    with source, out:
        for raw in source:
            out.write(redactor.line(raw))
            out.flush()


@dataclass(frozen=True)
class Environments:
    """Each child's whole environment: the supervisor's, less every key variable the config names
    and the runtime's key, plus the ones that child reads.

        runtime   the stack's runtime key
        sidecar   listener keys; keys of the members it calls itself (deployments, System One
                  providers); never an LLM provider's
        envoy     every upstream's key (it adds them as requests leave, compiler/credentials.py);
                  never a listener's

    A variable a live edit names later reaches no child until the stack restarts."""

    runtime: dict[str, str]
    sidecar: dict[str, str]
    envoy: dict[str, str]
    keys: dict[str, str]  # every key variable the stack knows, for the redactor
    missing: tuple[str, ...] = ()  # variables the config names that this environment lacks

    @classmethod
    def of(cls, config: RouterConfig, environ: Mapping[str, str], runtime_key: str) -> Environments:
        from sr_control.apis import REGISTRY

        listener_vars = {
            listener.auth.keys_env
            for listener in config.listeners
            if listener.auth is not None and listener.auth.keys_env
        }
        deployment_vars = {d.api_key_env for d in config.deployments.values() if d.api_key_env}
        member_vars = {
            m.api_key_env
            for m in config.providers.models
            if m.api_key_env and REGISTRY.canonical(m.api_format) == "systemone"
        }
        provider_vars = {m.api_key_env for m in config.providers.models if m.api_key_env}
        named = listener_vars | deployment_vars | provider_vars
        keys = {name: environ[name] for name in named if environ.get(name)}
        keys[RUNTIME_KEY_ENV] = runtime_key
        base = {k: v for k, v in environ.items() if k not in keys and k != RUNTIME_KEY_ENV}

        def given(names: set[str]) -> dict[str, str]:
            return base | {n: keys[n] for n in names if n in keys}

        return cls(
            runtime=given({RUNTIME_KEY_ENV}),
            sidecar=given(listener_vars | deployment_vars | member_vars),
            envoy=given(deployment_vars | provider_vars),
            keys=keys,
            missing=tuple(sorted(n for n in named if n not in keys and n != RUNTIME_KEY_ENV)),
        )

    def key_values(self) -> list[str]:
        """Every key, each listener variable's split into its keys, as the sidecar splits them."""
        return [k for value in self.keys.values() for k in value.replace(",", " ").split()]


def _run_dir(state_dir: Path) -> Path:
    """STATE_DIR/run (mode 0700), made afresh: a stack killed outright leaves its sockets there,
    and the next start replaces them. A socket's path may not exceed 107 bytes, so a deep state
    directory gets a folder of its own under the temporary directory instead."""
    run = (state_dir / "run").resolve()
    if len(str(run / "envoy-admin.sock").encode()) > 100:
        return Path(tempfile.mkdtemp(prefix="vllm-sr-"))  # mode 0700
    shutil.rmtree(run, ignore_errors=True)
    run.mkdir(mode=0o700)
    run.chmod(0o700)
    return run


def _file_keys(config: RouterConfig) -> list[str]:
    """The keys in the listeners' ``keys_file``s as they are now (a key rotated in later is still
    caught by the header and query patterns); an unreadable file is the sidecar's to report."""
    keys: list[str] = []
    for listener in config.listeners:
        if listener.auth is not None and listener.auth.keys_file:
            try:
                text = Path(listener.auth.keys_file).read_text(encoding="utf-8")
            except (OSError, UnicodeDecodeError):
                continue
            keys += [k for line in text.splitlines() for k in line.split("#", 1)[0].replace(",", " ").split()]
    return keys


def _check_runtime_key(config: RouterConfig, runtime_port: int, path: Path) -> None:
    """A deployment that reaches the stack's runtime must name the stack's key, which the runtime
    requires: without it every call would be 401, found out only at the first request."""
    for name, dep in config.deployments.items():
        target = urllib.parse.urlsplit(dep.endpoint or "")
        if (
            target.hostname in ("127.0.0.1", "localhost", "::1")
            and target.port == runtime_port
            and dep.api_key_env != RUNTIME_KEY_ENV
        ):
            raise StackError(
                f"{path}: deployments.{name} reaches the stack's runtime ({dep.endpoint}), which answers "
                "only callers holding the key the stack makes at each start: give it `api_key_env: "
                f"{RUNTIME_KEY_ENV}` (or start with --reset-config)"
            )


__all__ = [
    "RUNTIME_KEY_ENV",
    "Environments",
    "Ports",
    "Stack",
    "StackError",
    "StackOptions",
    "admin_get",
    "default_config",
    "listening_owner",
]
