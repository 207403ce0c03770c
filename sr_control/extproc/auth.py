"""Keys: the listener's (what a client must send) and the upstreams' (what the sidecar sends).

A listener names where its keys are (``auth: {keys_env: VAR}`` or ``{keys_file: /path}``), never
the keys: the router config, its compiled resources and the ADS stream carry only the reference.
The sidecar reads them from its own environment or file system. A keys file is re-read when it
changes (a Kubernetes Secret update swaps it in place), checked at most once a second.

A request with no bearer key or a wrong one gets 401 ``authentication_error``, as the runtime
answers it (jevcompat ``auth.missing`` and ``auth.invalid``); keys are compared in constant time.
"""

from __future__ import annotations

import hmac
import os
import re
import time
from dataclasses import dataclass, field
from pathlib import Path

from sr_control.extproc.data import AuthRef

WRONG_KEY = "Cannot authenticate with the server. Please check your API key and try again."
MISSING_KEY = "missing API key: send the header Authorization: Bearer <key>"
# Refused whichever of the two holds the key, as the runtime refuses them: one rule at every door.
TWO_KEYS = "two Authorization headers: send one, Authorization: Bearer <key>"
_SPLIT = re.compile(r"[\s,]+")
_RECHECK_S = 1.0


class KeysUnavailable(Exception):
    """The sidecar cannot read a listener's keys (unset variable, unreadable file)."""


@dataclass(frozen=True, slots=True)
class Verdict:
    ok: bool
    reason: str = ""  # missing_key | invalid_key
    message: str = ""


@dataclass
class _FileKeys:
    path: Path
    keys: tuple[bytes, ...] = ()
    stamp: tuple[int, int] | None = None  # (mtime_ns, size) when last read
    checked: float = field(default=-1e9)


class KeyRing:
    """Every listener's keys, read where their references point."""

    def __init__(self, environ: dict[str, str] | None = None) -> None:
        self._environ = environ if environ is not None else os.environ
        self._files: dict[str, _FileKeys] = {}

    def keys(self, ref: AuthRef) -> tuple[bytes, ...]:
        if ref.keys_env is not None:
            value = self._environ.get(ref.keys_env, "")
            keys = _parse(value)
            if not keys:
                raise KeysUnavailable(
                    f"the listener's keys variable {ref.keys_env} is unset or empty in the sidecar's environment"
                )
            return keys
        assert ref.keys_file is not None
        return self._file(ref.keys_file)

    def check(self, ref: AuthRef, authorization: str | None) -> Verdict:
        keys = self.keys(ref)
        scheme, _, key = (authorization or "").strip().partition(" ")
        if not authorization or scheme.lower() != "bearer" or not key.strip():
            return Verdict(False, "missing_key", MISSING_KEY)
        given = key.strip().encode()
        # Every key is compared, so the time taken does not tell which one nearly matched.
        matched = False
        for k in keys:
            matched |= hmac.compare_digest(given, k)
        return Verdict(True) if matched else Verdict(False, "invalid_key", WRONG_KEY)

    def _file(self, path: str) -> tuple[bytes, ...]:
        entry = self._files.setdefault(path, _FileKeys(Path(path)))
        now = time.monotonic()
        if now - entry.checked >= _RECHECK_S or not entry.keys:
            entry.checked = now
            try:
                st = entry.path.stat()
                stamp = (st.st_mtime_ns, st.st_size)
                if stamp != entry.stamp:
                    lines = entry.path.read_text(encoding="utf-8").splitlines()
                    entry.keys = _parse("\n".join(line.split("#", 1)[0] for line in lines))
                    entry.stamp = stamp
            except (OSError, UnicodeDecodeError) as exc:
                raise KeysUnavailable(f"the listener's keys file {path} cannot be read: {exc}") from None
        if not entry.keys:
            raise KeysUnavailable(f"the listener's keys file {path} holds no key")
        return entry.keys


def upstream_key(env: str | None, environ: dict[str, str] | None = None) -> str | None:
    """The key a deployment or provider model gets (``api_key_env``), from the sidecar's environment."""
    if env is None:
        return None
    value = (environ if environ is not None else os.environ).get(env, "").strip()
    if not value:
        raise KeysUnavailable(f"{env} is unset or empty in the sidecar's environment (the upstream's api_key_env)")
    return value


def _parse(text: str) -> tuple[bytes, ...]:
    return tuple(k.encode() for k in _SPLIT.split(text.strip()) if k)


__all__ = ["KeyRing", "KeysUnavailable", "MISSING_KEY", "TWO_KEYS", "Verdict", "WRONG_KEY", "upstream_key"]
