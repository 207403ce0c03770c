"""The sidecar's own HTTP client reads every reply as aiohttp reads it.

``upstream.Http`` is hand-written for speed on a hot path (httptools parses; docs/extproc/flow.md
has the figures). aiohttp, a well-kept client, is the reference: on generated replies (status,
repeated headers, bodies sent with a length, in chunks or up to the close of the connection,
written in pieces, now and then after an interim 1xx reply) both clients must give the same
status, headers and body. The other tests
are what a member can do to a call: refuse it, be slow, close a keep-alive connection.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

import aiohttp
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sr_control.extproc.upstream import CallFailed, Http, Reply

STATUSES = [200, 201, 400, 401, 404, 413, 422, 429, 500, 502, 503, 504, 529]
NAMES = ["x-a", "X-Request-Id", "retry-after", "content-type", "x-vsr-reply", "Set-Cookie"]
# Header values as bytes: ASCII, inner and outer blanks, UTF-8 and bytes that are not UTF-8.
values = st.lists(
    st.sampled_from([b"a", b"Z", b"0", b"-", b";", b"=", b" ", b"\t", "é".encode(), b"\xe9", b"\xff"]), max_size=12
).map(b"".join)
values = values | st.sampled_from([b"whole", b"1", b"application/json"])


@st.composite
def replies(draw: st.DrawFn) -> tuple[list[bytes], bool]:
    """The bytes of one reply, in the pieces the member writes them, and whether it closes after."""
    status = draw(st.sampled_from(STATUSES))
    headers = draw(st.lists(st.tuples(st.sampled_from(NAMES), values), max_size=6))
    body = draw(st.binary(max_size=3000))
    framing = draw(st.sampled_from(["length", "chunked", "close"]))
    head = [f"HTTP/1.1 {status} Whatever".encode(), *(k.encode() + b": " + v for k, v in headers)]
    if framing == "length":
        head.append(b"Content-Length: %d" % len(body))
        data = body
    elif framing == "chunked":
        head.append(b"Transfer-Encoding: chunked")
        cuts = sorted(draw(st.lists(st.integers(0, len(body)), max_size=4)))
        pieces = [body[a:b] for a, b in zip([0, *cuts], [*cuts, len(body)]) if b > a]
        data = b"".join(b"%x\r\n%s\r\n" % (len(p), p) for p in pieces) + b"0\r\n\r\n"
    else:
        head.append(b"Connection: close")
        data = body
    wire = b"\r\n".join(head) + b"\r\n\r\n" + data
    if draw(st.integers(0, 5)) == 5:  # an interim reply first, which both clients pass over
        wire = (
            draw(st.sampled_from([b"HTTP/1.1 100 Continue\r\n\r\n", b"HTTP/1.1 103 Early Hints\r\nlink: </a>\r\n\r\n"]))
            + wire
        )
    cuts = sorted(draw(st.lists(st.integers(1, max(1, len(wire) - 1)), max_size=3)))
    return [wire[a:b] for a, b in zip([0, *cuts], [*cuts, len(wire)]) if b > a], framing == "close" or draw(
        st.booleans()
    )


async def serving(pieces: list[bytes], close: bool, call: Callable[[str], Awaitable[Reply]]) -> Reply:
    """``call`` made against a member that reads a request and answers with ``pieces``."""

    async def member(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        head = await reader.readuntil(b"\r\n\r\n")
        length = next(
            (int(line.split(b":")[1]) for line in head.split(b"\r\n") if line.lower().startswith(b"content-length:")), 0
        )
        await reader.readexactly(length)
        for piece in pieces:
            writer.write(piece)
            await writer.drain()
            await asyncio.sleep(0)
        if close:
            writer.close()
        else:
            await reader.read()  # until the client closes

    server = await asyncio.start_server(member, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    try:
        return await call(f"http://127.0.0.1:{port}/v1/decisions?x=1")
    finally:
        server.close()


async def by_aiohttp(url: str) -> Reply:
    async with aiohttp.ClientSession(auto_decompress=False) as session:
        async with session.post(url, data=b'{"q": 1}', headers={"content-type": "application/json"}) as r:
            return Reply(r.status, tuple((k.lower(), v) for k, v in r.headers.items()), await r.read())


async def by_ours(url: str) -> Reply:
    http = Http()
    try:
        return await http.request(
            "POST", url, body=b'{"q": 1}', headers=[("content-type", "application/json")], timeout_s=5
        )
    finally:
        await http.close()


@settings(max_examples=150, deadline=None)
@given(replies())
def test_fuzz_replies_read_as_aiohttp_reads_them(reply: tuple[list[bytes], bool]) -> None:
    pieces, close = reply
    ours = asyncio.run(serving(pieces, close, by_ours))
    reference = asyncio.run(serving(pieces, close, by_aiohttp))
    assert ours == reference


def test_keep_alive_reuses_the_connection_and_survives_the_member_closing_it() -> None:
    """Three calls: the first two on one connection; the member then closes it while idle, and
    the third call still gets its answer (on a new connection)."""
    connections = 0
    answer = b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok"

    async def member(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        nonlocal connections
        connections += 1
        for _ in range(2):
            await reader.readuntil(b"\r\n\r\n")
            writer.write(answer)
            await writer.drain()
        writer.close()  # after two answers, closed as an idle keep-alive connection

    async def main() -> list[Reply]:
        server = await asyncio.start_server(member, "127.0.0.1", 0)
        url = f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}/health"
        http = Http()
        try:
            got = [await http.request("GET", url, timeout_s=5) for _ in range(2)]
            await asyncio.sleep(0.05)
            got.append(await http.request("GET", url, timeout_s=5))
            return got
        finally:
            await http.close()
            server.close()

    got = asyncio.run(main())
    assert [r.body for r in got] == [b"ok"] * 3 and connections == 2


def test_concurrent_calls_share_at_most_the_connections_allowed() -> None:
    """Fifty calls at once to one member through a client allowed four connections: every call
    is answered, with its own reply, over at most four connections."""
    connections = 0

    async def member(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        nonlocal connections
        connections += 1
        while True:
            try:
                head = await reader.readuntil(b"\r\n\r\n")
            except asyncio.IncompleteReadError:
                return
            path = head.split(b" ")[1]
            await asyncio.sleep(0.002)
            writer.write(b"HTTP/1.1 200 OK\r\ncontent-length: %d\r\n\r\n%s" % (len(path), path))

    async def main() -> list[bytes]:
        server = await asyncio.start_server(member, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        http = Http(connections_per_host=4)
        try:
            replies = await asyncio.gather(
                *(http.request("GET", f"http://127.0.0.1:{port}/call/{i}", timeout_s=10) for i in range(50))
            )
            return [r.body for r in replies]
        finally:
            await http.close()
            server.close()

    assert asyncio.run(main()) == [f"/call/{i}".encode() for i in range(50)]
    assert connections <= 4


def test_a_refused_call_a_slow_member_and_a_broken_reply_fail_as_such() -> None:
    async def slow(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readuntil(b"\r\n\r\n")
        await asyncio.sleep(5)

    async def broken(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readuntil(b"\r\n\r\n")
        writer.write(b"HTTP/1.1 200 OK\r\ncontent-length: 100\r\n\r\nhalf")
        await writer.drain()
        writer.close()

    async def failure(handler: object | None, timeout_s: float = 5) -> CallFailed:
        if handler is None:
            url = "http://127.0.0.1:1/v1/decisions"
        else:
            server = await asyncio.start_server(handler, "127.0.0.1", 0)  # type: ignore[arg-type]
            url = f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}/v1/decisions"
        http = Http()
        try:
            with pytest.raises(CallFailed) as failed:
                await http.request("POST", url, body=b"{}", timeout_s=timeout_s)
            return failed.value
        finally:
            await http.close()
            if handler is not None:
                server.close()

    refused = asyncio.run(failure(None))
    assert refused.kind == "connection" and "refused" in str(refused).lower()
    late = asyncio.run(failure(slow, timeout_s=0.2))
    assert late.kind == "timeout" and "200 ms" in str(late)
    cut = asyncio.run(failure(broken))
    assert cut.kind == "connection" and "before the reply was whole" in str(cut)
