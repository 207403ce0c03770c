"""The SDK's ``multipart/form-data`` body, read: the JSON ``request`` part and the asset parts.

One reader for the sidecar (``sr_control/extproc/body.py``) and the runtime
(``sr_runtime/server/body.py``), so both take and refuse the same bodies with the same error.
It reads RFC 7578 as RFC 2046 frames it, the way the SDK writes it (``typesafe_sdk``'s
``encode_multipart``: CRLF line ends, a random boundary, ``--boundary--`` to close):

    preamble (ignored)
    --boundary[spaces]CRLF
    Content-Disposition: form-data; name="request"CRLF
    Content-Type: application/jsonCRLF
    CRLF
    {...}CRLF
    --boundary[spaces]CRLF
    ... one part per asset ...
    --boundary--
    epilogue (ignored)

Refused with 400 (``reason: multipart``), the body being no form one can trust whole: no
boundary in the Content-Type, no boundary line (LF line ends included: RFC 2046 frames with
CRLF), a body that ends before its closing boundary (cut short anywhere: a part cut short
would otherwise pass for a whole one), a part header that is not ``Name: value`` or not UTF-8,
a part without a name, more than ``MAX_PARTS`` parts. Refused with 422, the form being read but
not the one the standard asks for (system-one-standard.md §1.3): no part named ``request``, or
two parts of one name. docs/systemone/decisions.md lists each case.

A part's bytes are kept as sent: ``Content-Transfer-Encoding`` is not applied (RFC 7578 §4.7:
senders do not use it). Pure bytes in, parts out: no I/O.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType

from systemone.errors import DetailItem, InvalidRequest, ValidationFailed
from systemone.media import REQUEST_PART

MEDIA_TYPE = "multipart/form-data"
MAX_PARTS = 1000
# `; name=value` or `; name="quoted \" value"` of a header's parameters (RFC 9110 §5.6.6).
_PARAM = re.compile(r';\s*([!#$%&\'*+.^_`|~0-9A-Za-z-]+)\s*=\s*("(?:[^"\\]|\\.)*"|[^;]*)')
_QUOTED_PAIR = re.compile(r"\\(.)")


@dataclass(frozen=True, slots=True)
class Part:
    content_type: str  # as declared, lower case, without parameters; text/plain when none (RFC 7578 §4.4)
    content: bytes


@dataclass(frozen=True, slots=True)
class Form:
    request: bytes  # the JSON request, as sent
    parts: Mapping[str, Part]  # every other part by name, in the order sent


def is_form(content_type: str) -> bool:
    return content_type.strip().lower().startswith(MEDIA_TYPE)


def read(body: bytes, content_type: str) -> Form:
    """The form in ``body``, sent as ``content_type`` (multipart/form-data; boundary=...);
    InvalidRequest (400) or ValidationFailed (422) when it cannot be read as one."""
    boundary = params(content_type).get("boundary", "")
    if not boundary or not boundary.isascii():
        raise _framing("the multipart Content-Type names no boundary (multipart/form-data; boundary=...)")
    dash = b"--" + boundary.encode("ascii")
    start, closed = _first_boundary(body, dash, boundary)
    if closed:
        raise _framing("the multipart body has no part")
    parts: dict[str, Part] = {}
    while not closed:
        if len(parts) == MAX_PARTS:
            raise _framing(f"the multipart body has more than {MAX_PARTS} parts")
        headers, content_start = _headers(body, start, dash, boundary)
        found = _next_boundary(body, content_start, dash)
        if found is None:
            raise _cut_short(boundary)
        content_end, start, closed = found
        name, part = _part(headers, body[content_start:content_end])
        if name in parts:
            raise ValidationFailed(
                [DetailItem(("body", name), f"the multipart body has two parts named {name!r}", "value_error")]
            )
        parts[name] = part
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
    return Form(request.content, MappingProxyType(parts))


def params(value: str) -> dict[str, str]:
    """A header value's parameters, names in lower case, quoted values unquoted."""
    out: dict[str, str] = {}
    for match in _PARAM.finditer(value):
        raw = match.group(2).strip()
        if len(raw) >= 2 and raw[0] == raw[-1] == '"':
            raw = _QUOTED_PAIR.sub(r"\1", raw[1:-1])
        out.setdefault(match.group(1).lower(), raw)
    return out


def _framing(message: str) -> InvalidRequest:
    return InvalidRequest(message, reason="multipart")


def _cut_short(boundary: str) -> InvalidRequest:
    return _framing(f"the multipart body ends before its closing boundary --{boundary}--")


def _boundary_line(body: bytes, at: int, dash: bytes) -> tuple[int, bool] | None:
    """If ``body[at:]`` opens with a boundary line: (where what follows it starts, whether it is
    the closing one); else None (``--boundary`` that goes on is no boundary, RFC 2046 §5.1.1)."""
    end = at + len(dash)
    if body[end : end + 2] == b"--":
        return end + 2, True
    while body[end : end + 1] in (b" ", b"\t"):  # transport padding
        end += 1
    if body[end : end + 2] == b"\r\n":
        return end + 2, False
    return None


def _first_boundary(body: bytes, dash: bytes, boundary: str) -> tuple[int, bool]:
    line = _boundary_line(body, 0, dash) if body.startswith(dash) else None
    if line is not None:
        return line
    found = _next_boundary(body, 0, dash)  # after a preamble
    if found is None:
        raise _framing(f"the multipart body has no boundary line --{boundary} ending in CRLF (is the boundary right?)")
    return found[1], found[2]


def _next_boundary(body: bytes, at: int, dash: bytes) -> tuple[int, int, bool] | None:
    """(where the content before it ends, where what follows it starts, whether it closes)."""
    delimiter = b"\r\n" + dash
    while (found := body.find(delimiter, at)) >= 0:
        line = _boundary_line(body, found + 2, dash)
        if line is not None:
            return found, line[0], line[1]
        at = found + 2
    return None


def _headers(body: bytes, at: int, dash: bytes, boundary: str) -> tuple[dict[str, str], int]:
    """A part's headers (names in lower case) and where its content starts."""
    headers: dict[str, str] = {}
    while (end := body.find(b"\r\n", at)) != at:
        if end < 0:
            raise _cut_short(boundary)
        line = body[at:end]
        if line.startswith(dash):
            raise _framing("a multipart part's headers end without the blank line before its content")
        name, colon, value = line.partition(b":")
        if not colon or not name.strip():
            raise _framing(f"a multipart part header is not 'Name: value': {line[:60]!r}")
        try:
            headers[name.strip().lower().decode("ascii")] = value.strip().decode("utf-8")
        except UnicodeDecodeError:
            raise _framing(f"a multipart part header is not UTF-8: {line[:60]!r}") from None
        at = end + 2
    return headers, end + 2


def _part(headers: Mapping[str, str], content: bytes) -> tuple[str, Part]:
    name = params(headers.get("content-disposition", "")).get("name", "")
    if not name:
        raise _framing('a multipart part has no name (Content-Disposition: form-data; name="...")')
    media_type = headers.get("content-type", "").partition(";")[0].strip().lower()
    return name, Part(media_type if "/" in media_type else "text/plain", content)


__all__ = ["MAX_PARTS", "MEDIA_TYPE", "Form", "Part", "is_form", "params", "read"]
