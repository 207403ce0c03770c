"""The runtime's reliability scenarios: ``vllm-srun serve`` under bad input and under overload.

    bad_input   hypothesis bodies, headers, content types and encodings; bodies cut short;
                bodies over 32 MiB as sent, chunked, in a multipart part, or once zstd-decoded
                (bombs of 4 GiB); multipart bodies missing parts. Each is sent as raw bytes on
                its own connection, and its answer read while the body is still going out (a
                server may refuse a body before all of it arrived).
    overload    a burst of more concurrent requests than the scheduler admits (``--max-queue``),
                then one client at a time.

"Documented" statuses are the runtime's own table (docs/runtime/server.md): any 4xx, and of
the 5xx only 503, 504 and 529. Whatever the server answers, it must go on answering.
"""

from __future__ import annotations

import json
import os
import random
import socket
import subprocess
import threading
import time
import urllib.request
from collections import Counter
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import zstandard
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from systemone.errors import MAX_BODY_BYTES
from tests.e2e.envoy_proc import wait_for
from tests.extproc.harness import VLLM_SRUN, Runtime, get_status
from tests.reliability.parts import NOUL, STATE, Figures, peak_rss
from tests.strategies import json_values, near

DOCUMENTED_5XX = frozenset({503, 504, 529})
VALID = {"state": STATE, "questions": {"urgent": NOUL}}
VALID_BYTES = json.dumps(VALID).encode()
OVER = MAX_BODY_BYTES + (1 << 20)  # 33 MiB: over the limit by a whole MiB
# A queue of 2, small rounds and no state reuse: a burst of two dozen requests overflows it.
TUNED_FLAGS = ("--max-queue", "2", "--max-batch-tokens", "1024", "--state-cache-mb", "0")


class Tuned(Runtime):
    """``vllm-srun serve`` with extra flags (``--max-queue 2``, ...)."""

    def __init__(self, folder: Path, log: Path, *flags: str) -> None:
        super().__init__(folder, log)
        self.flags = flags

    def start(self) -> Tuned:
        args = [VLLM_SRUN, "serve", str(self.folder), "--host", "127.0.0.1", "--port", str(self.port), *self.flags]
        self.proc = subprocess.Popen(args, stdout=self.log.open("ab"), stderr=subprocess.STDOUT, env=dict(os.environ))
        return self

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None and get_status(f"{self.url}/health", timeout=5) == 200


# ---------------------------------------------------------------------------- raw HTTP


@dataclass(frozen=True)
class Reply:
    case: str
    status: int  # 0: the connection ended with no answer (``error`` says how)
    headers: dict[str, str]
    body: bytes
    wait_s: float
    error: str = ""


def _complete(data: bytes) -> bool:
    head, sep, rest = data.partition(b"\r\n\r\n")
    if not sep:
        return False
    for line in head.split(b"\r\n")[1:]:
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            return len(rest) >= int(value)
    return False  # no length: read to the end


def _parse(case: str, data: bytes, wait: float, error: str) -> Reply:
    head, sep, rest = data.partition(b"\r\n\r\n")
    if not sep or not head.startswith(b"HTTP/1."):
        return Reply(case, 0, {}, data[:300], wait, error or "no HTTP answer")
    lines = head.decode("latin-1").split("\r\n")
    headers = {k.strip().lower(): v.strip() for k, _, v in (line.partition(":") for line in lines[1:])}
    return Reply(case, int(lines[0].split()[1]), headers, rest, wait, error)


def exchange(
    port: int, case: str, head: bytes, body: Iterable[bytes] = (), *, half_close: bool = False, timeout: float = 30
) -> Reply:
    """One raw HTTP/1.1 request on its own connection; the answer is read while the body goes
    out. ``half_close`` ends the sending side after the body (a client cut off mid-body)."""
    sock = socket.create_connection(("127.0.0.1", port), timeout=timeout)
    started = time.monotonic()

    def send() -> None:
        try:
            sock.sendall(head)
            for chunk in body:
                sock.sendall(chunk)
            if half_close:
                sock.shutdown(socket.SHUT_WR)
        except OSError:
            pass  # the server stopped reading: its answer says why

    sender = threading.Thread(target=send, daemon=True)
    sender.start()
    data, error = b"", ""
    try:
        while not _complete(data):
            chunk = sock.recv(1 << 16)
            if not chunk:
                break
            data += chunk
    except OSError as exc:
        error = f"{type(exc).__name__}: {exc}"
    finally:
        wait = time.monotonic() - started
        sock.close()
        sender.join(timeout)
    return _parse(case, data, wait, error)


def head_of(path: str, headers: Iterable[tuple[str, str]], length: int | None, method: str = "POST") -> bytes:
    lines = [f"{method} {path} HTTP/1.1", "host: 127.0.0.1"]
    lines += [f"{k}: {v}" for k, v in headers]
    if length is not None:
        lines.append(f"content-length: {length}")
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")


def post(
    port: int,
    case: str,
    body: bytes,
    headers: Iterable[tuple[str, str]] = (("content-type", "application/json"),),
    path: str = "/v1/systemone",
) -> Reply:
    return exchange(port, case, head_of(path, headers, len(body)), [body])


def chunked(data: Iterable[bytes]) -> Iterator[bytes]:
    for piece in data:
        yield b"%x\r\n%s\r\n" % (len(piece), piece)
    yield b"0\r\n\r\n"


def repeated(piece: bytes, total: int) -> Iterator[bytes]:
    """``total`` bytes made of ``piece`` repeated, without holding them all."""
    sent = 0
    while sent < total:
        n = min(len(piece), total - sent)
        yield piece[:n]
        sent += n


def multipart(parts: list[tuple[str, bytes]], boundary: str = "b0undary") -> bytes:
    out = b""
    for name, data in parts:
        out += f'--{boundary}\r\ncontent-disposition: form-data; name="{name}"\r\n\r\n'.encode() + data + b"\r\n"
    return out + f"--{boundary}--\r\n".encode()


MULTIPART = ("content-type", "multipart/form-data; boundary=b0undary")


def zstd_bomb(decoded: int = 4 << 30) -> bytes:
    """Frames of 128 MiB of zeros, 4 KiB each compressed, back to back: ``decoded`` bytes once read."""
    frame = zstandard.ZstdCompressor(level=3).compress(b"\0" * (128 << 20))
    return frame * (decoded // (128 << 20))


# ---------------------------------------------------------------------------- bad input


def fixed_cases(port: int) -> Iterator[Reply]:
    """The bad requests a fuzzer would take long to find, each sent once."""
    placeholder = "<image:" + "0" * 32 + ">"
    with_asset = json.dumps(
        {**VALID, "state": f"see {placeholder}", "assets": {placeholder: {"type": "image", "part": "asset-0"}}}
    ).encode()
    yield post(port, "valid", VALID_BYTES)
    # over 32 MiB: declared, chunked, in a multipart part, decoded from zstd
    yield exchange(
        port,
        "over 32 MiB, declared",
        head_of("/v1/systemone", [("content-type", "application/json")], OVER),
        repeated(b" " * (1 << 20), OVER),
    )
    yield exchange(
        port,
        "over 32 MiB, chunked",
        head_of("/v1/systemone", [("content-type", "application/json"), ("transfer-encoding", "chunked")], None),
        chunked(repeated(b" " * (1 << 20), OVER)),
    )
    big_part = multipart([("request", with_asset), ("asset-0", b"\0" * OVER)])
    yield post(port, "over 32 MiB, a multipart part", big_part, [MULTIPART])
    yield post(
        port,
        "zstd over 32 MiB decoded",
        zstandard.compress(b" " * OVER),
        [("content-type", "application/json"), ("content-encoding", "zstd")],
    )
    yield post(
        port,
        "zstd bomb, 4 GiB decoded",
        zstd_bomb(),
        [("content-type", "application/json"), ("content-encoding", "zstd")],
    )
    yield post(
        port,
        "zstd bomb in a multipart body",
        zstandard.compress(b"\0" * OVER),
        [MULTIPART, ("content-encoding", "zstd")],
    )
    yield post(port, "zstd, cut short", zstandard.compress(VALID_BYTES)[:-6], [("content-encoding", "zstd")])
    yield post(port, "zstd, then garbage", zstandard.compress(VALID_BYTES) + b"garbage", [("content-encoding", "zstd")])
    # multipart with missing parts
    yield post(port, "multipart, no request part", multipart([("other", VALID_BYTES)]), [MULTIPART])
    yield post(port, "multipart, the asset's part missing", multipart([("request", with_asset)]), [MULTIPART])
    yield post(
        port, "multipart, a part nobody claims", multipart([("request", VALID_BYTES), ("asset-9", b"x")]), [MULTIPART]
    )
    yield post(
        port, "multipart, no boundary", multipart([("request", VALID_BYTES)]), [("content-type", "multipart/form-data")]
    )
    yield post(port, "multipart, no closing boundary", multipart([("request", VALID_BYTES)])[:-14], [MULTIPART])
    yield post(
        port,
        "multipart, a part with no name",
        b"--b0undary\r\ncontent-disposition: form-data\r\n\r\nx\r\n--b0undary--\r\n",
        [MULTIPART],
    )
    yield post(port, "multipart, empty", b"", [MULTIPART])
    # JSON a reader can choke on
    yield post(port, "arrays 100,000 deep", b"[" * 100_000 + b"]" * 100_000)
    yield post(
        port,
        "a state 490 arrays deep",
        b'{"state": ' + b"[" * 490 + b"]" * 490 + b', "questions": {"q": {"type": "noul", "instructions": "x"}}}',
    )
    yield post(port, "a number of 400 digits", json.dumps({**VALID, "options": {"deadline_ms": 10**400}}).encode())
    yield post(port, "NaN as the state", VALID_BYTES.replace(json.dumps(STATE).encode(), b"NaN"))
    yield post(port, "a lone surrogate", VALID_BYTES.replace(b"Our export", b"\\ud800 export"))
    yield post(port, "UTF-16", json.dumps(VALID).encode("utf-16"))
    # bodies cut short: the client stops sending and closes its side
    yield exchange(
        port,
        "cut short, declared length",
        head_of("/v1/systemone", [("content-type", "application/json")], 1000),
        [VALID_BYTES[:20]],
        half_close=True,
    )
    yield exchange(
        port,
        "cut short, chunked",
        head_of("/v1/systemone", [("transfer-encoding", "chunked")], None),
        [b"100\r\n" + VALID_BYTES[:20]],
        half_close=True,
    )
    yield exchange(
        port,
        "cut short, multipart",
        head_of("/v1/systemone", [MULTIPART], 5000),
        [multipart([("request", VALID_BYTES)])[:40]],
        half_close=True,
    )


CUT_SHORT = "cut short"  # no answer is owed to a request that never arrived whole

mutated = near(VALID)
json_bodies = st.one_of(
    json_values.map(lambda v: json.dumps(v).encode()),
    mutated.map(lambda v: json.dumps(v).encode()),
    st.just(VALID_BYTES),
)
bodies = st.one_of(
    st.binary(max_size=300),
    json_bodies,
    st.text(max_size=200).map(str.encode),
    st.lists(
        st.tuples(st.sampled_from(["request", "asset-0", "x", ""]), json_bodies | st.binary(max_size=50)), max_size=3
    ).map(multipart),
)
# Mostly the System One endpoints, where reading goes deep; now and then any path.
any_path = st.text(alphabet="/abcv1-_.%?=", min_size=1, max_size=20).map(lambda p: "/" + p)
paths = st.integers(0, 9).flatmap(
    lambda i: (
        any_path
        if i == 0
        else st.sampled_from(
            ["/v1/systemone"] * 4 + ["/v1/systemone/batch"] * 2 + ["/v1/decisions"] * 2 + ["/v1/models"]
        )
    )
)
content_types = st.sampled_from(
    [
        "application/json",
        "application/json; charset=utf-8",
        "text/plain",
        "multipart/form-data; boundary=b0undary",
        "multipart/form-data",
        "multipart/form-data; boundary=",
        "application/x-www-form-urlencoded",
        "*/*",
        "",
    ]
)
encodings = st.sampled_from([""] * 6 + ["zstd"] * 4 + ["identity", "gzip", "zstd, zstd", "ZSTD", "br"])
token = st.text(alphabet="abcdefghijklmnopqrstuvwxyz0123456789-", min_size=1, max_size=16)
header_names = st.sampled_from(
    ["authorization", "x-request-id", "typesafe-danger-zone-long-context", "accept", "accept-encoding", "x-vsr-cluster"]
) | token.filter(
    lambda n: (
        n
        not in (
            "host",
            "content-length",
            "transfer-encoding",
            "connection",
            "expect",
            "upgrade",
            "content-type",
            "content-encoding",
        )
    )
)
header_values = st.text(
    alphabet=st.characters(min_codepoint=0x20, max_codepoint=0xFF, blacklist_characters="\x7f"), max_size=40
)


def fuzz_cases(port: int, examples: int, seed: int | None = None) -> list[Reply]:
    """``examples`` requests drawn by hypothesis; every answer kept."""
    out: list[Reply] = []

    @settings(
        max_examples=examples,
        deadline=None,
        database=None,
        derandomize=seed is not None,
        suppress_health_check=list(HealthCheck),
    )
    @given(
        path=paths,
        method=st.sampled_from(["POST"] * 8 + ["GET", "PUT"]),
        body=bodies,
        content_type=content_types,
        encoding=encodings,
        compress=st.booleans(),
        headers=st.lists(st.tuples(header_names, header_values), max_size=4),
    )
    def one(
        path: str,
        method: str,
        body: bytes,
        content_type: str,
        encoding: str,
        compress: bool,
        headers: list[tuple[str, str]],
    ) -> None:
        if encoding == "zstd" and compress:
            body = zstandard.compress(body)
        hs = [
            *headers,
            *((("content-type", content_type),) if content_type else ()),
            *((("content-encoding", encoding),) if encoding else ()),
        ]
        out.append(exchange(port, f"fuzz {method} {path}", head_of(path, hs, len(body), method), [body]))

    one()
    return out


@dataclass
class BadInput:
    figures: Figures  # failed: an undocumented 5xx, or no answer to a request that arrived whole
    statuses: Counter[int]
    failures: list[Reply]
    answers: list[Reply] = field(repr=False)
    alive: bool = False  # still answering /health and a valid request afterwards
    rss_before: int = 0
    rss_peak: int = 0


def bad_input(runtime: Tuned, *, examples: int = 150, seed: int | None = 0) -> BadInput:
    """Send ``fixed_cases`` and ``examples`` hypothesis requests to ``runtime``, one at a time."""
    before = peak_rss(runtime.pid)
    answers = [*fixed_cases(runtime.port), *fuzz_cases(runtime.port, examples, seed)]
    failures = [
        r
        for r in answers
        if (r.status >= 500 and r.status not in DOCUMENTED_5XX) or (r.status == 0 and not r.case.startswith(CUT_SHORT))
    ]
    alive = runtime.alive() and post(runtime.port, "valid, after", VALID_BYTES).status == 200
    return BadInput(
        Figures(len(answers), len(failures), max(r.wait_s for r in answers)),
        Counter(r.status for r in answers),
        failures,
        answers,
        alive,
        before,
        peak_rss(runtime.pid),
    )


def metrics_statuses(runtime: Runtime) -> Counter[str]:
    """``vsr_runtime_requests_total`` summed by status."""
    out: Counter[str] = Counter()
    with urllib.request.urlopen(f"{runtime.url}/metrics", timeout=5) as r:
        for line in r.read().decode().splitlines():
            if line.startswith("vsr_runtime_requests_total{"):
                labels, _, value = line.rpartition(" ")
                status = labels.split('status="', 1)[1].split('"', 1)[0]
                out[status] += float(value)  # type: ignore[assignment]
    return out


# ---------------------------------------------------------------------------- overload


def _long_request(i: int, words: int = 1200) -> bytes:
    """A request of about 1,500 tokens whose state no other request shares (no reuse)."""
    rng = random.Random(i)
    state = f"ticket {i}: " + " ".join(
        rng.choice(["export", "invoice", "refund", "error", "button", "login", "slow", "page"]) for _ in range(words)
    )
    return json.dumps(
        {
            "state": state,
            "questions": {
                "urgent": NOUL,
                "angry": {"type": "score", "instructions": "How angry?", "criteria": ["calm", "annoyed", "furious"]},
            },
        }
    ).encode()


@dataclass
class Overload:
    burst: Figures  # the burst; failed: anything but 200 or 529 with Retry-After
    statuses: Counter[int]
    failures: list[Reply]
    overloaded: list[Reply]  # the 529s
    longest_529_s: float
    longest_200_s: float
    after: Figures  # one client at a time, once the burst is over: all 200


def overload(runtime: Runtime, *, clients: int = 24, bursts: int = 2, after: int = 10, timeout: float = 60) -> Overload:
    """``bursts`` times, ``clients`` requests released at once (each its own connection and
    state); then ``after`` requests one at a time."""
    replies: list[Reply] = []
    for burst in range(bursts):
        gate = threading.Barrier(clients)
        lock = threading.Lock()

        def client(i: int, burst: int, gate: threading.Barrier, lock: threading.Lock) -> None:
            body = _long_request(burst * clients + i)
            gate.wait()
            r = exchange(
                runtime.port,
                "burst",
                head_of("/v1/systemone", [("content-type", "application/json")], len(body)),
                [body],
                timeout=timeout,
            )
            with lock:
                replies.append(r)

        threads = [threading.Thread(target=client, args=(i, burst, gate, lock)) for i in range(clients)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout + 10)
    overloaded = [r for r in replies if r.status == 529]
    failures = [r for r in replies if not (r.status == 200 or (r.status == 529 and "retry-after" in r.headers))]
    later = [post(runtime.port, "after", _long_request(10_000 + i)) for i in range(after)]
    return Overload(
        Figures(len(replies), len(failures), max(r.wait_s for r in replies)),
        Counter(r.status for r in replies),
        failures,
        overloaded,
        max((r.wait_s for r in overloaded), default=0.0),
        max((r.wait_s for r in replies if r.status == 200), default=0.0),
        Figures(len(later), sum(r.status != 200 for r in later), max(r.wait_s for r in later)),
    )


def wait_ready(runtime: Tuned) -> Tuned:
    runtime.wait()
    wait_for(runtime.alive, timeout=30, what="the runtime to answer")
    return runtime


__all__ = [
    "TUNED_FLAGS",
    "BadInput",
    "Overload",
    "Reply",
    "Tuned",
    "bad_input",
    "exchange",
    "metrics_statuses",
    "overload",
    "wait_ready",
    "zstd_bomb",
]
