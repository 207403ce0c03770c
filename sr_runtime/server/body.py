"""A request body as the listener codec reads it: size-limited, decompressed, out of multipart.

What the official SDK sends (system-one-standard.md §5): JSON, `Content-Encoding: zstd` bodies,
and `multipart/form-data` with a `request` part and one part per asset. The protocol layer reads
the JSON; undoing the encoding and the multipart framing is this module's job. The 32 MiB limit
holds for the body as sent and again once decoded, so a small zstd bomb is a 413, not a
process out of memory.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator, Mapping
from dataclasses import dataclass, field

import zstandard
from starlette.datastructures import Headers, UploadFile
from starlette.formparsers import MultiPartException, MultiPartParser
from starlette.requests import Request as HttpRequest

from sr_runtime.server.errors import UnsupportedEncoding
from systemone import Batch, DetailItem, InvalidRequest, Request, RequestTooLarge, ValidationFailed
from systemone.errors import MAX_BODY_BYTES
from systemone.media import REQUEST_PART, part_problems

_CHUNK = 1 << 20


@dataclass(frozen=True, slots=True)
class Body:
    json: bytes  # what the codec reads
    parts: Mapping[str, bytes] = field(default_factory=dict)  # multipart asset parts by name
    multipart: bool = False


async def read_body(request: HttpRequest, limit: int = MAX_BODY_BYTES) -> Body:
    declared = request.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > limit:
        raise RequestTooLarge(int(declared), limit)
    raw = bytearray()
    async for chunk in request.stream():
        raw += chunk
        if len(raw) > limit:
            raise RequestTooLarge(len(raw), limit)
    data = decode(bytes(raw), request.headers.get("content-encoding", ""), limit)
    if request.headers.get("content-type", "").lower().startswith("multipart/form-data"):
        return await _multipart(data, request.headers)
    return Body(data)


def decode(data: bytes, encoding: str, limit: int = MAX_BODY_BYTES) -> bytes:
    """Undo ``Content-Encoding`` (zstd, or none), never producing more than ``limit`` bytes."""
    encoding = encoding.strip().lower()
    if encoding in ("", "identity"):
        return data
    if encoding != "zstd":
        raise UnsupportedEncoding(f"unsupported Content-Encoding {encoding!r} (this server reads zstd or none)")
    out = bytearray()
    try:
        with zstandard.ZstdDecompressor().stream_reader(data, read_across_frames=True) as reader:
            while chunk := reader.read(_CHUNK):
                out += chunk
                if len(out) > limit:
                    raise RequestTooLarge(len(out), limit)
    except zstandard.ZstdError as exc:
        raise InvalidRequest(f"the body is not valid zstd: {exc}", reason="content_encoding") from None
    return bytes(out)


class _PartsAsSent(MultiPartParser):
    """Starlette's parser, keeping a part without a filename as the bytes sent. Its own decodes
    such a part as text, falling back to latin-1 for bytes that are not UTF-8, and no re-encoding
    can tell which it used: an asset sent without a filename came back as other bytes."""

    def on_part_end(self) -> None:
        if self._current_part.file is None:
            # bytes where starlette's FormData holds str: read back by _multipart alone
            self.items.append((self._current_part.field_name, bytes(self._current_part.data)))  # type: ignore[arg-type]
        else:
            super().on_part_end()


async def _multipart(data: bytes, headers: Headers) -> Body:
    async def stream() -> AsyncGenerator[bytes, None]:  # what MultiPartParser takes
        yield data

    parser = _PartsAsSent(headers, stream(), max_files=1000, max_fields=1000, max_part_size=MAX_BODY_BYTES)
    try:
        form = await parser.parse()
    except MultiPartException as exc:
        raise InvalidRequest(f"the multipart body cannot be read: {exc.message}", reason="multipart") from None
    parts: dict[str, bytes] = {}
    try:
        for name, value in form.multi_items():
            if name in parts:
                raise ValidationFailed(
                    [DetailItem(("body", name), f"the multipart body has two parts named {name!r}", "value_error")]
                )
            parts[name] = await value.read() if isinstance(value, UploadFile) else bytes(value)  # type: ignore[arg-type]  # _PartsAsSent's bytes
    finally:
        await form.close()
    request = parts.pop(REQUEST_PART, None)
    if request is None:
        raise ValidationFailed(
            [
                DetailItem(
                    ("body", REQUEST_PART),
                    "a multipart body needs a part named 'request' holding the JSON request",
                    "missing",
                )
            ]
        )
    return Body(request, parts, multipart=True)


def check_parts(ir: Request | Batch, body: Body) -> None:
    """Each asset's ``part`` names an uploaded part, and each uploaded part is claimed exactly once."""
    problems = part_problems(ir, body.parts)
    if problems:
        raise ValidationFailed(problems)
