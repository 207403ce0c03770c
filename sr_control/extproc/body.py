"""A request body as the listener codec reads it: JSON, or the official SDK's multipart form.

The SDK sends a request with attached images as ``multipart/form-data``: a part named
``request`` holds the JSON, and each other part is an asset that exactly one asset's ``part``
names (system-one-standard.md §1.3). Envoy has already undone ``Content-Encoding: zstd``.

The sidecar reads the JSON part, and writes each part-borne asset inline (``format`` and
``data_base64``) so the internal form it forwards is whole JSON. Parsing is the standard
library's MIME parser.
"""

from __future__ import annotations

import base64
import email.parser
import email.policy
from collections.abc import Mapping
from dataclasses import replace

from systemone import Batch, DetailItem, InvalidRequest, Request, ValidationFailed
from systemone.ir import Asset, frozen_map
from systemone.jsontext import JsonObject
from systemone.media import REQUEST_PART, part_problems

_FORMATS = {b"\x89PNG\r\n\x1a\n": "png", b"\xff\xd8\xff": "jpeg", b"GIF8": "gif", b"RIFF": "webp"}


def read(body: bytes, content_type: str) -> tuple[bytes, Mapping[str, tuple[str, bytes]]] | None:
    """(the JSON, the asset parts) of a multipart body; None when the body is not multipart."""
    if not content_type.lower().startswith("multipart/form-data"):
        return None
    message = email.parser.BytesParser(policy=email.policy.HTTP).parsebytes(
        b"Content-Type: " + content_type.encode("latin-1") + b"\r\n\r\n" + body
    )
    if not message.is_multipart():
        raise InvalidRequest("the multipart body has no parts (is the boundary right?)", reason="multipart")
    parts: dict[str, tuple[str, bytes]] = {}
    for part in message.iter_parts():
        name = part.get_param("name", header="content-disposition")
        if not isinstance(name, str):
            raise ValidationFailed([DetailItem(("body",), "a multipart part has no name", "value_error")])
        if name in parts:
            raise ValidationFailed(
                [DetailItem(("body", name), f"the multipart body has two parts named {name!r}", "value_error")]
            )
        payload = part.get_payload(decode=True)
        parts[name] = (part.get_content_type(), payload if isinstance(payload, bytes) else b"")
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
    return request[1], parts


def inline_parts(ir: Request | Batch, parts: Mapping[str, tuple[str, bytes]]) -> Request | Batch:
    """``ir`` with every asset that names a part carrying that part inline; each part must be
    claimed by exactly one asset (else 422 locating it)."""
    problems = part_problems(ir, parts)
    if problems:
        raise ValidationFailed(problems)

    def inlined(request: Request) -> Request:
        assets = {}
        for placeholder, asset in request.assets.items():
            part = asset.members.get("part")
            if part is None:
                assets[placeholder] = asset
                continue
            ctype, data = parts[part]
            fmt = next((f for magic, f in _FORMATS.items() if data.startswith(magic)), ctype.rpartition("/")[2])
            members = [(k, v) for k, v in asset.members.items() if k != "part"]
            members += [("format", fmt)] if "format" not in asset.members else []
            members.append(("data_base64", base64.b64encode(data).decode("ascii")))
            assets[placeholder] = Asset(asset.type, JsonObject(members))
        return replace(request, assets=frozen_map(assets))

    if isinstance(ir, Batch):
        return replace(ir, items=frozen_map((n, inlined(r)) for n, r in ir.items.items()))
    return inlined(ir)


__all__ = ["REQUEST_PART", "inline_parts", "read"]
