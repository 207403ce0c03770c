"""The HTTP calls the sidecar makes itself: model cards, health, standard targets, fail-over, and
every call when it forwards (``--forwarding sidecar``).

HTTP/1.1 over keep-alive connections, at most ``connections_per_host`` to each origin, read by
httptools (llhttp, the parser uvicorn uses). Not aiohttp: a loopback POST through aiohttp took
0.19 ms of CPU on this machine and 0.035 ms here (docs/extproc/flow.md), and on the sidecar's
hot path that difference is most of its budget. ``tests/extproc/test_upstream.py`` holds the
replies it reads equal to aiohttp's on generated replies (lengths, chunks, close-delimited
bodies, repeated and non-ASCII headers, interim 1xx replies, split reads).

Every call has a deadline; a call that cannot connect, times out or breaks off raises
``CallFailed`` saying which. A keep-alive connection the member closed while it sat idle is
found out when the request gets no byte back, and the request goes once more on a new one.

While a traced request is current (sr_base/tracing.py), each call is a span of its own and
carries that span's ``traceparent``: the member's span is its child.
"""

from __future__ import annotations

import asyncio
import ssl
from collections import deque
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from functools import lru_cache
from urllib.parse import urlsplit

import httptools

from sr_base.tracing import outgoing

MAX_BODY = 64 * 1024 * 1024  # a reply bigger than this is not an answer
_OWN_HEADERS = frozenset({"host", "content-length", "transfer-encoding", "connection"})


@dataclass(frozen=True, slots=True)
class Reply:
    status: int
    headers: tuple[tuple[str, str], ...]
    body: bytes

    def header(self, name: str) -> str | None:
        """The first value of header ``name`` (lower case), or None."""
        return next((v for k, v in self.headers if k == name), None)


class CallFailed(Exception):
    """No HTTP reply: ``kind`` is ``timeout`` or ``connection``."""

    def __init__(self, kind: str, message: str) -> None:
        super().__init__(message)
        self.kind = kind


class _Stale(Exception):
    """A reused connection closed before any byte of the reply: the member closed it idle."""


@dataclass(frozen=True, slots=True)
class _Target:
    origin: tuple[str, str, int]  # scheme, host, port: one pool each
    host: str  # the Host header
    path: str  # path and query


@lru_cache(maxsize=4096)
def _target(url: str) -> _Target:
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise CallFailed("connection", "not an http(s) URL")
    port = parts.port or (443 if parts.scheme == "https" else 80)
    path = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
    return _Target((parts.scheme, parts.hostname, port), parts.netloc.rsplit("@", 1)[-1], path)


class _Connection(asyncio.Protocol):
    """One keep-alive connection: one request at a time, its reply read as it arrives."""

    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self.parser = httptools.HttpResponseParser(self)
        self.reply: asyncio.Future[Reply] | None = None
        self.closed = False
        self.reused = False
        self.keep_alive = False
        self._start()

    def _start(self) -> None:
        """Ready to read a reply from its first byte."""
        self._begun = self._headers_done = False
        self._headers: list[tuple[str, str]] = []
        self._body: list[bytes] = []
        self._size = 0

    @property
    def usable(self) -> bool:
        return not self.closed and self.transport is not None and not self.transport.is_closing()

    # ------------------------------------------------------------------ asyncio

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]  # a stream transport: create_connection's

    def data_received(self, data: bytes) -> None:
        if self.reply is None or self.reply.done():
            self.close()  # bytes nobody asked for: the connection is not fit to reuse
            return
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserError as exc:
            self._fail(CallFailed("connection", f"the reply is not HTTP/1.1: {exc}"))

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        if self.reply is None or self.reply.done():
            return
        if self._headers_done and self.parser.get_status_code() and not self._framed():
            self._complete()  # a body that runs to the close of the connection
        elif not self._begun and self.reused:
            self.reply.set_exception(_Stale())
        else:
            self._fail(
                CallFailed("connection", f"the connection closed before the reply was whole{f': {exc}' if exc else ''}")
            )

    # ------------------------------------------------------------------ httptools

    def on_message_begin(self) -> None:
        self._begun = True

    def on_header(self, name: bytes, value: bytes) -> None:
        # As aiohttp reads them: UTF-8 (bytes that are not kept as surrogates), the field's
        # trailing whitespace dropped as RFC 9110 says (llhttp drops only the leading).
        self._headers.append(
            (name.decode("utf-8", "surrogateescape").lower(), value.decode("utf-8", "surrogateescape").rstrip(" \t"))
        )

    def on_headers_complete(self) -> None:
        self._headers_done = True

    def on_body(self, body: bytes) -> None:
        self._size += len(body)
        if self._size > MAX_BODY:
            self._fail(CallFailed("connection", f"the reply is larger than {MAX_BODY >> 20} MiB"))
            return
        self._body.append(body)

    def on_message_complete(self) -> None:
        if 100 <= self.parser.get_status_code() < 200:
            self._start()  # an interim reply (100 Continue, 103 Early Hints): the real one follows
            return
        self.keep_alive = self.parser.should_keep_alive()
        self._complete()

    # ------------------------------------------------------------------ one exchange

    async def exchange(self, request: bytes) -> Reply:
        assert self.transport is not None
        self._start()
        self.reply = asyncio.get_running_loop().create_future()
        self.transport.write(request)
        return await self.reply

    def _framed(self) -> bool:
        return any(k in ("content-length", "transfer-encoding") for k, _ in self._headers)

    def _complete(self) -> None:
        if self.reply is not None and not self.reply.done():
            self.reply.set_result(Reply(self.parser.get_status_code(), tuple(self._headers), b"".join(self._body)))

    def _fail(self, exc: Exception) -> None:
        if self.reply is not None and not self.reply.done():
            self.reply.set_exception(exc)
        self.close()

    def close(self) -> None:
        self.closed = True
        if self.transport is not None:
            self.transport.close()


class _Pool:
    """One origin's connections: idle ones reused newest first, at most ``limit`` in use."""

    def __init__(self, limit: int) -> None:
        self.idle: deque[_Connection] = deque()
        self.slots = asyncio.Semaphore(limit)


class Http:
    def __init__(self, connections_per_host: int = 64) -> None:
        self._limit = connections_per_host
        self._pools: dict[tuple[str, str, int], _Pool] = {}
        self._tls: ssl.SSLContext | None = None

    async def request(
        self,
        method: str,
        url: str,
        *,
        body: bytes | None = None,
        headers: Mapping[str, str] | Iterable[tuple[str, str]] = (),
        timeout_s: float,
    ) -> Reply:
        if timeout_s <= 0:
            raise CallFailed("timeout", "no time was left for the call")
        traced = outgoing(method, url)
        if traced is None:
            return await self._exchange(method, url, body, headers, timeout_s)
        try:
            items = headers.items() if isinstance(headers, Mapping) else headers
            reply = await self._exchange(method, url, body, [*items, *traced.headers], timeout_s)
        except BaseException as exc:
            traced.end(exc)
            raise
        traced.answered(reply.status)
        traced.end()
        return reply

    async def _exchange(
        self,
        method: str,
        url: str,
        body: bytes | None,
        headers: Mapping[str, str] | Iterable[tuple[str, str]],
        timeout_s: float,
    ) -> Reply:
        target = _target(url)
        message = _request(method, target, body, headers)
        pool = self._pools.get(target.origin) or self._pools.setdefault(target.origin, _Pool(self._limit))
        conn: _Connection | None = None
        try:
            async with asyncio.timeout(timeout_s), pool.slots:
                for _ in range(2):  # a stale idle connection: once more, on a new one
                    conn = await self._connection(pool, target)
                    try:
                        reply = await conn.exchange(message)
                        break
                    except _Stale:
                        conn = None
                else:
                    raise CallFailed("connection", f"{method} {url}: the member closed two connections without a reply")
        except TimeoutError:
            if conn is not None:
                conn.close()  # mid-reply: never reused
            raise CallFailed("timeout", f"{method} {url} did not answer within {timeout_s * 1000:.0f} ms") from None
        except CallFailed as exc:
            raise CallFailed(exc.kind, f"{method} {url}: {exc}") from None
        except OSError as exc:
            raise CallFailed("connection", f"{method} {url}: {type(exc).__name__}: {exc}") from None
        except BaseException:
            if conn is not None:
                conn.close()  # cancelled mid-reply
            raise
        if conn.keep_alive and not conn.closed:
            conn.reused = True
            pool.idle.append(conn)
        else:
            conn.close()
        return reply

    async def _connection(self, pool: _Pool, target: _Target) -> _Connection:
        while pool.idle:
            conn = pool.idle.pop()
            if conn.usable:
                return conn
        scheme, host, port = target.origin
        tls = self._tls_context() if scheme == "https" else None
        _, conn = await asyncio.get_running_loop().create_connection(
            _Connection, host, port, ssl=tls, server_hostname=host if tls else None
        )
        return conn

    def _tls_context(self) -> ssl.SSLContext:
        if self._tls is None:
            self._tls = ssl.create_default_context()
        return self._tls

    async def close(self) -> None:
        for pool in self._pools.values():
            while pool.idle:
                pool.idle.pop().close()
        self._pools.clear()


def _request(
    method: str, target: _Target, body: bytes | None, headers: Mapping[str, str] | Iterable[tuple[str, str]]
) -> bytes:
    lines = [f"{method} {target.path} HTTP/1.1", f"host: {target.host}"]
    for name, value in headers.items() if isinstance(headers, Mapping) else headers:
        if name.lower() in _OWN_HEADERS:
            continue
        if "\r" in value or "\n" in value or "\r" in name or "\n" in name or ":" in name:
            raise ValueError(f"header {name!r}: a line break or colon has no place in a header")
        lines.append(f"{name}: {value}")
    if body is not None or method in ("POST", "PUT", "PATCH"):
        lines.append(f"content-length: {len(body or b'')}")
    head = ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")
    return head + body if body else head


__all__ = ["CallFailed", "Http", "Reply"]
