"""A request body as the listener codec reads it: JSON, or the official SDK's multipart form.

The SDK sends a request with attached images as ``multipart/form-data``: a part named
``request`` holds the JSON, and each other part is an asset that exactly one asset's ``part``
names (system-one-standard.md §1.3). Envoy has already undone ``Content-Encoding: zstd``.

The sidecar reads the JSON part, and writes each part-borne asset inline (``format`` and
``data_base64``) so the internal form it forwards is whole JSON. The form is read by
``systemone.multipart``, the reader the runtime uses too.
"""

from __future__ import annotations

import base64
from collections.abc import Mapping
from dataclasses import replace

from systemone import Batch, Request, ValidationFailed, multipart
from systemone.ir import Asset, frozen_map
from systemone.jsontext import JsonObject
from systemone.media import REQUEST_PART, part_problems

_FORMATS = {b"\x89PNG\r\n\x1a\n": "png", b"\xff\xd8\xff": "jpeg", b"GIF8": "gif", b"RIFF": "webp"}


def read(body: bytes, content_type: str) -> tuple[bytes, Mapping[str, tuple[str, bytes]]] | None:
    """(the JSON, the asset parts: content type and bytes) of a multipart body; None when the
    body is not multipart."""
    if not multipart.is_form(content_type):
        return None
    form = multipart.read(body, content_type)
    return form.request, {name: (part.content_type, part.content) for name, part in form.parts.items()}


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
