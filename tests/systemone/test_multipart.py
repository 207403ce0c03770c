"""The SDK's multipart/form-data, read by one reader (``systemone/multipart.py``) along both
paths that take it: the sidecar's (``sr_control/extproc/body.py``) and the runtime's
(``sr_runtime/server/body.py``, behind a starlette request). Every test reads through both and
holds them to one answer: the same JSON and parts byte for byte, or the same error.

Generated bodies (the JSON ``request`` part and up to three binary asset parts, random
boundaries, preambles, filenames, part orders, header spellings and content types) read back as
written, by a hand-written RFC 7578 writer and by the SDK's own. The cases RFC 2046 leaves a
reader to decide are decided once below (docs/systemone/decisions.md).

The runtime keeps no part's content type (it reads an image's format from its bytes); the
sidecar keeps each, and it must be the one the part declared.
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
from systemone import ProtocolError, multipart
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
        return ("refused", exc.info)
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
        return ("refused", exc.info)
    assert found.multipart
    return ("read", found.json, dict(found.parts))


def _run(awaitable: Awaitable[Any]) -> Any:
    async def wrapped() -> Any:
        return await awaitable

    return asyncio.run(wrapped())


def read(data: bytes, content_type: str) -> Any:
    """What both paths make of a body: ("read", JSON, {name: bytes}) or ("refused", ErrorInfo)."""
    by_sidecar = _read_by_sidecar(data, content_type)
    assert by_sidecar == _read_by_runtime(data, content_type)
    return by_sidecar


def refusal(data: bytes, content_type: str = "multipart/form-data; boundary=b0") -> tuple[int, str, str | None]:
    found = read(data, content_type)
    assert found[0] == "refused", found
    return found[1].status, found[1].code, found[1].reason


# -- bodies ----------------------------------------------------------------------------------

_TOKEN = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"
# RFC 2046's boundary characters; a space may not end one.
boundaries = st.text(_TOKEN + "'()+_,-./:=? ", min_size=1, max_size=70).filter(lambda b: not b.endswith(" "))
# The SDK's names and filenames: ASCII without quotes (they are written unescaped).
names = st.text(_TOKEN + "-_.", min_size=1, max_size=12)
# An asset part has one, as the SDK and browsers send files (and one without reads alike:
# test_a_binary_part_without_a_filename_reads_as_the_bytes_sent).
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
    preamble = draw(st.sampled_from([b"", b"\r\n", b"a preamble\r\n"]))
    ending = draw(st.sampled_from([b"", b"\r\n", b"an epilogue\r\n"]))
    body = preamble + b"".join(chunks) + f"--{boundary}--\r\n".encode() + ending
    quoted = draw(st.booleans()) or any(c in boundary for c in "'()+,/:=? ")
    content_type = (
        f'multipart/form-data; boundary="{boundary}"' if quoted else f"multipart/form-data; boundary={boundary}"
    )
    return body, content_type, parts


# -- bodies read back as written ----------------------------------------------------------


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
@given(bodies())
def test_a_body_reads_back_as_written(drawn: tuple[bytes, str, list[Part]]) -> None:
    data, content_type, parts = drawn
    # What was sent, exactly: the JSON, each asset's bytes, and (kept by the sidecar) its type.
    request = next(p for p in parts if p.name == REQUEST_PART)
    sent = {p.name: p for p in parts if p.name != REQUEST_PART}
    assert read(data, content_type) == ("read", request.content, {name: p.content for name, p in sent.items()})
    _, kept = sidecar.read(data, content_type) or (b"", {})
    assert {name: ctype for name, (ctype, _) in kept.items()} == {
        name: (p.content_type or "text/plain").lower() for name, p in sent.items()
    }


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
@given(bodies(), st.sampled_from(["no request part", "a name twice", "another boundary", "no boundary"]))
def test_a_broken_body_is_refused_by_both_alike(drawn: tuple[bytes, str, list[Part]], broken: str) -> None:
    body, content_type, parts = drawn
    if broken == "no request part":
        # "; name=" so that a filename equal to a name (filename="request") is not taken for it.
        body = body.replace(f'; name="{REQUEST_PART}"'.encode(), b'; name="other"', 1)
    elif broken == "a name twice":
        body = body.replace(f'; name="{parts[-1].name}"'.encode(), f'; name="{parts[0].name}"'.encode(), 1)
    else:
        content_type = "multipart/form-data" + ("; boundary=another-boundary" if broken == "another boundary" else "")
    found = read(body, content_type)
    if broken != "a name twice" or len(parts) > 1:
        assert found[0] == "refused"
        # A form that cannot be read is 400; one read whole that the standard does not accept, 422.
        assert found[1].status == (400 if "boundary" in broken else 422)


# One body, boundary ``b0``: the request part, then a PNG asset with its filename.
WHOLE = (
    b'--b0\r\nContent-Disposition: form-data; name="request"\r\n\r\n{"a": 1}\r\n'
    b'--b0\r\nContent-Disposition: form-data; name="asset-0"; filename="a.png"\r\nContent-Type: image/png\r\n\r\n'
    b"\x89PNG\r\n\x1a\nDATA\r\n--b0--\r\n"
)


@settings(max_examples=200, deadline=None)
@given(
    st.lists(
        st.tuples(
            names.filter(lambda n: n != REQUEST_PART),
            st.sampled_from(["image/png", "image/jpeg", "application/octet-stream"]),
            contents,
            st.none() | filenames.filter(lambda f: '"' not in f),
        ),
        max_size=3,
        unique_by=lambda p: p[0],
    ),
    json_values,
    st.integers(0, 3),
)
def test_what_the_sdks_writer_writes_reads_back(assets: list[Any], doc: Any, at: int) -> None:
    request = json.dumps(doc).encode()
    parts = [SdkPart(name, ctype, content, filename) for name, ctype, content, filename in assets]
    parts.insert(min(at, len(parts)), SdkPart(REQUEST_PART, "application/json", request))
    content_type, data = encode_multipart(parts)
    assert read(data, content_type) == ("read", request, {name: content for name, _, content, _ in assets})
    _, kept = sidecar.read(data, content_type) or (b"", {})
    assert {name: ctype for name, (ctype, _) in kept.items()} == {name: ctype for name, ctype, _, _ in assets}


# -- the cases decided once (docs/systemone/decisions.md) --------------------------------------

MULTIPART_400 = (400, "invalid_request", "multipart")


def test_a_preamble_before_the_first_boundary_is_skipped() -> None:
    """RFC 2046 §5.1.1 allows one, and readers ignore it."""
    assert read(b"a preamble\r\n" + WHOLE, "multipart/form-data; boundary=b0") == (
        "read",
        b'{"a": 1}',
        {"asset-0": b"\x89PNG\r\n\x1a\nDATA"},
    )


def test_spaces_after_a_boundary_and_a_boundary_that_goes_on_are_read_as_rfc_2046_says() -> None:
    """Transport padding may follow a boundary; ``--b0`` followed by more is content, not one."""
    body = WHOLE.replace(
        b'--b0\r\nContent-Disposition: form-data; name="asset-0"',
        b'--b0 \t\r\nContent-Disposition: form-data; name="asset-0"',
    ).replace(b"DATA", b"DA\r\n--b0X")
    assert read(body, "multipart/form-data; boundary=b0") == (
        "read",
        b'{"a": 1}',
        {"asset-0": b"\x89PNG\r\n\x1a\nDA\r\n--b0X"},
    )


def test_a_part_is_kept_as_sent_whatever_content_transfer_encoding_it_names() -> None:
    """RFC 7578 §4.7: senders do not use it, so it is not applied."""
    body = WHOLE.replace(b"Content-Type: image/png", b"Content-Type: image/png\r\nContent-Transfer-Encoding: base64")
    assert read(body, "multipart/form-data; boundary=b0")[2] == {"asset-0": b"\x89PNG\r\n\x1a\nDATA"}


@pytest.mark.parametrize(
    "body, says",
    [
        pytest.param(b"", "no boundary line --b0 ending in CRLF", id="an empty body"),
        pytest.param(
            WHOLE.replace(b"\r\n", b"\n"), "ending in CRLF", id="LF line ends, not CRLF (RFC 2046 frames with CRLF)"
        ),
        pytest.param(b"--b0--\r\n", "has no part", id="no part at all (RFC 2046 asks for one)"),
        pytest.param(WHOLE[: -len(b"--b0--\r\n")], "ends before its closing boundary --b0--", id="no closing boundary"),
        pytest.param(
            WHOLE[: -len(b"TA\r\n--b0--\r\n")], "ends before its closing boundary --b0--", id="cut inside a part"
        ),
        pytest.param(
            WHOLE[: WHOLE.index(b"image/png")], "ends before its closing boundary", id="cut in a part's headers"
        ),
        pytest.param(WHOLE.replace(b'name="asset-0"', b'nom="asset-0"'), "has no name", id="a part without a name"),
        pytest.param(WHOLE.replace(b'name="asset-0"', b'name=""'), "has no name", id="a part with an empty name"),
        pytest.param(
            WHOLE.replace(b'name="request"\r\n\r\n{"a": 1}\r\n', b'name="request"\r\n'),
            "headers end without the blank line",
            id="headers that run into the next boundary",
        ),
        pytest.param(
            WHOLE.replace(b"Content-Type: image/png", b"Content-Type image/png"),
            "not 'Name: value'",
            id="a header without its colon",
        ),
        pytest.param(
            WHOLE.replace(b'filename="a.png"', b'filename="\xff.png"'), "not UTF-8", id="a header that is not UTF-8"
        ),
    ],
)
def test_a_body_that_is_no_whole_form_is_refused_with_400(body: bytes, says: str) -> None:
    """A body cut short would otherwise pass for a whole one with a part cut short (or none)."""
    found = read(body, "multipart/form-data; boundary=b0")
    assert found[0] == "refused" and (found[1].status, found[1].code, found[1].reason) == MULTIPART_400
    assert says in found[1].message


def test_more_parts_than_the_reader_takes_is_400() -> None:
    part = b'--b0\r\nContent-Disposition: form-data; name="p%d"\r\n\r\nx\r\n'
    many = b"".join(part % i for i in range(multipart.MAX_PARTS + 1)) + b"--b0--\r\n"
    assert refusal(many) == MULTIPART_400
    assert read(many.replace(b'name="p0"', b'name="request"'), "multipart/form-data; boundary=b0")[0] == "refused"
    fewer = many.replace(part % multipart.MAX_PARTS, b"").replace(b'name="p0"', b'name="request"')
    assert read(fewer, "multipart/form-data; boundary=b0")[0] == "read"


def test_the_sdks_own_body_reads_alike() -> None:
    request = json.dumps({"state": "⟦img-0⟧ look", "questions": {}}).encode()
    png = b"\x89PNG\r\n\x1a\n" + bytes(range(256))
    content_type, data = encode_multipart(
        [SdkPart(REQUEST_PART, "application/json", request), SdkPart("asset-0", "image/png", png, "asset-0")]
    )
    assert read(data, content_type) == ("read", request, {"asset-0": png})


def test_a_binary_part_without_a_filename_reads_as_the_bytes_sent() -> None:
    """Starlette decodes a part without a filename as text (latin-1 where it is not UTF-8); the
    runtime keeps the bytes sent, as the sidecar does."""
    body = WHOLE.replace(b'; filename="a.png"', b"").replace(b"DATA", b"\xff\xfe\xc3")
    expected = ("read", b'{"a": 1}', {"asset-0": b"\x89PNG\r\n\x1a\n\xff\xfe\xc3"})
    assert read(body, "multipart/form-data; boundary=b0") == expected
