"""A request body as the listener codec reads it: size-limited, decompressed, out of multipart.

What the official SDK sends (system-one-standard.md §5): JSON, `Content-Encoding: zstd` bodies,
and `multipart/form-data` with a `request` part and one part per asset. The protocol layer reads
the JSON; undoing the encoding is this module's job, and the multipart framing is read by
`systemone.multipart`, the sidecar's reader too. The 32 MiB limit
holds for the body as sent and again once decoded, so a small zstd bomb is a 413, not a
process out of memory.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

import zstandard
from starlette.requests import Request as HttpRequest

from sr_runtime.server.errors import UnsupportedEncoding
from systemone import Batch, InvalidRequest, Request, RequestTooLarge, ValidationFailed, multipart
from systemone.errors import MAX_BODY_BYTES
from systemone.media import part_problems

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
    content_type = request.headers.get("content-type", "")
    if multipart.is_form(content_type):  # read as the sidecar reads it (systemone/multipart.py)
        form = multipart.read(data, content_type)
        return Body(form.request, {name: part.content for name, part in form.parts.items()}, multipart=True)
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


def check_parts(ir: Request | Batch, body: Body) -> None:
    """Each asset's ``part`` names an uploaded part, and each uploaded part is claimed exactly once."""
    problems = part_problems(ir, body.parts)
    if problems:
        raise ValidationFailed(problems)
