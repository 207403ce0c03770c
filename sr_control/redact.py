"""Keys out of log lines, on their way to a file: ``Redactor(keys).line(raw) -> raw``.

The local stack writes every child's output through one (``stack.py``). What it removes:

- each key it was given, wherever it appears (the stack's runtime key, the listener and upstream
  keys its config names), however the line is laid out;
- the value of a credential header in Envoy's debug and trace dumps (``'authorization', '...'``),
  which an operator turns on through Envoy's admin and which hold what clients sent;
- credential query parameters (``?key=``, ``&api_key=``, ``access_token=``, ...) in any path.

A key shorter than 8 characters is not searched for by value (it would blot out ordinary words);
the patterns still catch it in a header or a query string.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from sr_control.compiler.credentials import CLIENT_KEY_HEADERS, CLIENT_KEY_PARAMS

MASK = b"[redacted]"
_MIN_VALUE = 8
_HEADERS = b"|".join(re.escape(h.encode()) for h in (*CLIENT_KEY_HEADERS, "cookie", "set-cookie"))
# Envoy's header dumps: one "'name', 'value'" per line.
_HEADER_DUMP = re.compile(rb"(?i)('(?:" + _HEADERS + rb")', ')[^']*(')")
# "name: value" and "name=value" forms (HTTP/1 text, structured logs).
_HEADER_TEXT = re.compile(rb"(?i)(\b(?:" + _HEADERS + rb")\b\"?\s*[:=]\s*\"?)(?:Bearer\s+|Basic\s+)?[^\s\",']+")
_PARAMS = re.compile(
    rb"(?i)([?&](?:" + b"|".join(re.escape(p.encode()) for p in CLIENT_KEY_PARAMS) + rb")=)[^&\s\"'#]*"
)


class Redactor:
    def __init__(self, keys: Iterable[str] = ()) -> None:
        values = sorted({k.encode() for k in keys if len(k) >= _MIN_VALUE}, key=len, reverse=True)
        self._values = re.compile(b"|".join(re.escape(v) for v in values)) if values else None

    def line(self, raw: bytes) -> bytes:
        if self._values is not None:
            raw = self._values.sub(MASK, raw)
        raw = _HEADER_DUMP.sub(rb"\1" + MASK + rb"\2", raw)
        raw = _HEADER_TEXT.sub(rb"\1" + MASK, raw)
        return _PARAMS.sub(rb"\1" + MASK, raw)


__all__ = ["MASK", "Redactor"]
