"""The sidecar and the runtime read the SDK's multipart/form-data alike.

Two readers of one form: the sidecar's (``sr_control/extproc/body.py``, the standard library's
MIME parser) and the runtime's (``sr_runtime/server/body.py``, starlette's). Generated bodies
(the JSON ``request`` part and up to three binary asset parts, random boundaries, filenames,
part orders, header spellings and content types) must give the same JSON and the same parts,
byte for byte, or be refused by both with the same status and reason.

The runtime keeps no part's content type (it reads an image's format from its bytes); the
sidecar keeps each, and it must be the one the part declared.

Where the two readers differ today, ``test_where_the_readers_still_differ`` says so, one body
each (strict xfails: fix one, and its case moves up here).
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable
from dataclasses import dataclass
from typing import Any

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st
from starlette.requests import Request as HttpRequest
from typesafe_sdk._core.multipart import Part as SdkPart
from typesafe_sdk._core.multipart import encode_multipart

from sr_control.extproc import body as sidecar
from sr_runtime.server import body as runtime
from systemone import ProtocolError
from systemone.media import REQUEST_PART
from tests.strategies import json_values


@dataclass(frozen=True)
class Part:
    name: str
    content: bytes
    content_type: str | None  # None: no Content-Type header (text/plain, says RFC 7578)
    filename: str | None  # None: no filename (the request part)


def _read_by_sidecar(data: bytes, content_type: str) -> Any:
    try:
        found = sidecar.read(data, content_type)
    except ProtocolError as exc:
        return ("refused", exc.status, exc.reason)
    assert found is not None  # the content type is multipart/form-data
    json_part, parts = found
    return ("read", json_part, {name: content for name, (_, content) in parts.items()})


def _read_by_runtime(data: bytes, content_type: str) -> Any:
    sent = False

    async def receive() -> dict[str, Any]:
        nonlocal sent
        if sent:
            return {"type": "http.disconnect"}
        sent = True
        return {"type": "http.request", "body": data, "more_body": False}

    headers = [(b"content-type", content_type.encode("latin-1")), (b"content-length", str(len(data)).encode())]
    request = HttpRequest({"type": "http", "method": "POST", "path": "/v1/systemone", "headers": headers}, receive)
    try:
        found = _run(runtime.read_body(request))
    except ProtocolError as exc:
        return ("refused", exc.status, exc.reason)
    assert found.multipart
    return ("read", found.json, dict(found.parts))


def _run(awaitable: Awaitable[Any]) -> Any:
    async def wrapped() -> Any:
        return await awaitable

    return asyncio.run(wrapped())


# -- bodies ----------------------------------------------------------------------------------

_TOKEN = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"
# RFC 2046's boundary characters; a space may not end one.
boundaries = st.text(_TOKEN + "'()+_,-./:=? ", min_size=1, max_size=70).filter(lambda b: not b.endswith(" "))
# The SDK's names and filenames: ASCII without quotes (they are written unescaped).
names = st.text(_TOKEN + "-_.", min_size=1, max_size=12)
# An asset part always has one, as the SDK and browsers send files (a part without one is read
# as text by starlette: see test_where_the_readers_still_differ).
filenames = names | st.sampled_from(["image.png", "photo 1.jpg", "a.b.c"])
content_types = st.none() | st.sampled_from(
    ["image/png", "image/jpeg", "application/octet-stream", "video/mp4", "IMAGE/PNG"]
)
# Bytes an image starts with, then anything (CR, LF and dashes included).
contents = st.builds(
    lambda magic, rest: magic + rest,
    st.sampled_from([b"", b"\x89PNG\r\n\x1a\n", b"\xff\xd8\xff", b"GIF8", b"RIFF"]),
    st.binary(max_size=48) | st.sampled_from([b"\r\n", b"--", b"\r\n--", b"\r\n\r\n"]),
)
assets = st.builds(Part, names, contents, content_types, filenames)
requests = st.builds(
    lambda doc, ascii_only, ctype: Part(REQUEST_PART, json.dumps(doc, ensure_ascii=ascii_only).encode(), ctype, None),
    json_values,
    st.booleans(),
    st.sampled_from([None, "application/json", "application/json; charset=utf-8"]),
)


def _disposition(part: Part, header: str) -> str:
    value = f'form-data; name="{part.name}"'
    return f"{header}: {value}" + ("" if part.filename is None else f'; filename="{part.filename}"')


@st.composite
def bodies(draw: st.DrawFn) -> tuple[bytes, str, list[Part]]:
    """(body, its Content-Type, the parts in it), as a client following RFC 7578 writes it."""
    parts = draw(
        st.lists(assets, max_size=3, unique_by=lambda p: p.name).filter(
            lambda ps: all(p.name != REQUEST_PART for p in ps)
        )
    )
    parts.insert(draw(st.integers(0, len(parts))), draw(requests))
    boundary = draw(boundaries)
    assume(all(f"\r\n--{boundary}".encode() not in b"\r\n" + p.content + b"\r\n" for p in parts))
    disposition = draw(st.sampled_from(["Content-Disposition", "content-disposition", "CONTENT-DISPOSITION"]))
    chunks = []
    for part in parts:
        headers = [_disposition(part, disposition)] + (
            [] if part.content_type is None else [f"Content-Type: {part.content_type}"]
        )
        if draw(st.booleans()):
            headers.reverse()
        chunks.append(
            f"--{boundary}\r\n".encode() + "\r\n".join(headers).encode() + b"\r\n\r\n" + part.content + b"\r\n"
        )
    body = b"".join(chunks) + f"--{boundary}--\r\n".encode() + draw(st.sampled_from([b"", b"\r\n", b"an epilogue\r\n"]))
    quoted = draw(st.booleans()) or any(c in boundary for c in "'()+,/:=? ")
    content_type = (
        f'multipart/form-data; boundary="{boundary}"' if quoted else f"multipart/form-data; boundary={boundary}"
    )
    return body, content_type, parts


# -- the readers agree -----------------------------------------------------------------------


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
@given(bodies())
def test_both_readers_read_the_same_parts(drawn: tuple[bytes, str, list[Part]]) -> None:
    data, content_type, parts = drawn
    by_sidecar, by_runtime = _read_by_sidecar(data, content_type), _read_by_runtime(data, content_type)
    assert by_sidecar == by_runtime
    # What was sent, exactly: the JSON, each asset's bytes, and (kept by the sidecar) its type.
    request = next(p for p in parts if p.name == REQUEST_PART)
    sent = {p.name: p for p in parts if p.name != REQUEST_PART}
    assert by_sidecar == ("read", request.content, {name: p.content for name, p in sent.items()})
    _, kept = sidecar.read(data, content_type) or (b"", {})
    assert {name: ctype for name, (ctype, _) in kept.items()} == {
        name: (p.content_type or "text/plain").lower() for name, p in sent.items()
    }


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
@given(bodies(), st.sampled_from(["no request part", "a name twice", "another boundary", "no boundary"]))
def test_both_readers_refuse_a_broken_body_alike(drawn: tuple[bytes, str, list[Part]], broken: str) -> None:
    body, content_type, parts = drawn
    if broken == "no request part":
        body = body.replace(f'name="{REQUEST_PART}"'.encode(), b'name="other"', 1)
    elif broken == "a name twice":
        body = body.replace(f'name="{parts[-1].name}"'.encode(), f'name="{parts[0].name}"'.encode(), 1)
    else:
        content_type = "multipart/form-data" + ("; boundary=another-boundary" if broken == "another boundary" else "")
    by_sidecar = _read_by_sidecar(body, content_type)
    assert by_sidecar == _read_by_runtime(body, content_type)
    if broken != "a name twice" or len(parts) > 1:
        assert by_sidecar[0] == "refused"


# One body, boundary ``b0``: the request part, then a PNG asset with its filename.
WHOLE = (
    b'--b0\r\nContent-Disposition: form-data; name="request"\r\n\r\n{"a": 1}\r\n'
    b'--b0\r\nContent-Disposition: form-data; name="asset-0"; filename="a.png"\r\nContent-Type: image/png\r\n\r\n'
    b"\x89PNG\r\n\x1a\nDATA\r\n--b0--\r\n"
)


@pytest.mark.xfail(strict=True, reason="the two multipart readers differ here (issue 23, item 3)")
@pytest.mark.parametrize(
    "body, what_both_should_give",
    [
        pytest.param(
            WHOLE.replace(b'name="asset-0"', b'nom="asset-0"'),
            ("refused", 400, "invalid_request"),
            id="a part without a name: the sidecar 422, the runtime 400",
        ),
        pytest.param(b"", ("refused", 400, "invalid_request"), id="an empty body: the sidecar 400, the runtime 422"),
        pytest.param(
            b"a preamble\r\n" + WHOLE,
            ("read", b'{"a": 1}', {"asset-0": b"\x89PNG\r\n\x1a\nDATA"}),
            id="a preamble before the first boundary (RFC 2046 allows one): the sidecar reads it, the runtime 400",
        ),
        pytest.param(
            WHOLE.replace(b"\r\n", b"\n"),
            ("refused", 400, "invalid_request"),
            id="LF line ends, not CRLF: the sidecar reads them, the runtime 400",
        ),
        pytest.param(
            WHOLE[: -len(b"--b0--\r\n")],
            ("refused", 400, "invalid_request"),
            id="no closing boundary: the sidecar keeps the last part, the runtime drops it",
        ),
        pytest.param(
            WHOLE[: -len(b"TA\r\n--b0--\r\n")],
            ("refused", 400, "invalid_request"),
            id="cut inside a part: the sidecar keeps the part cut short, the runtime drops it",
        ),
    ],
)
def test_where_the_readers_still_differ(body: bytes, what_both_should_give: Any) -> None:
    content_type = "multipart/form-data; boundary=b0"
    assert _read_by_sidecar(body, content_type) == _read_by_runtime(body, content_type) == what_both_should_give


def test_the_sdks_own_body_reads_alike() -> None:
    request = json.dumps({"state": "⟦img-0⟧ look", "questions": {}}).encode()
    png = b"\x89PNG\r\n\x1a\n" + bytes(range(256))
    content_type, data = encode_multipart(
        [SdkPart(REQUEST_PART, "application/json", request), SdkPart("asset-0", "image/png", png, "asset-0")]
    )
    assert (
        _read_by_sidecar(data, content_type)
        == _read_by_runtime(data, content_type)
        == ("read", request, {"asset-0": png})
    )


def test_a_binary_part_without_a_filename_reads_as_the_bytes_sent() -> None:
    """Starlette decodes a part without a filename as text (latin-1 where it is not UTF-8); the
    runtime keeps the bytes sent, as the sidecar does."""
    body = WHOLE.replace(b'; filename="a.png"', b"").replace(b"DATA", b"\xff\xfe\xc3")
    expected = ("read", b'{"a": 1}', {"asset-0": b"\x89PNG\r\n\x1a\n\xff\xfe\xc3"})
    assert _read_by_sidecar(body, "multipart/form-data; boundary=b0") == expected
    assert _read_by_runtime(body, "multipart/form-data; boundary=b0") == expected
