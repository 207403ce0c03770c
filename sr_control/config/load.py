"""Loading a router config: every problem at once, each with its file, line, column and field.

    load(path) -> RouterConfig            raises ConfigError (all problems) or ConfigUnreadable
    validate_text(text, file) -> Report   never raises for a bad file

One pipeline, in ``validate_text``, top to bottom: source text -> marked document
(``marked.py``) -> the current format (an older one migrated in memory by ``source.py``'s
steps, with a warning that says how to migrate the file; a newer one refused) -> the validated
model. Each top-level section, and each listener, deployment and provider model, is validated
on its own so that one broken entry does not hide the others.
"""

from __future__ import annotations

import datetime
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

from cachetools import LRUCache
from pydantic import BaseModel, ValidationError
from pydantic_core import ErrorDetails

from sr_control.config import checks, source
from sr_control.config.errors import ConfigError, ConfigUnreadable, Loc, Problem
from sr_control.config.marked import Marked, YamlSyntaxError, from_round_trip, read
from sr_control.config.model import (
    CURRENT_VERSION,
    Deployment,
    Judge,
    Listener,
    Pool,
    ProviderModel,
    Providers,
    RouterConfig,
    Signal,
    Tracing,
    VirtualModel,
)
from sr_control.config.reread import Rereader

_SECTIONS = (
    "version",
    "providers",
    "deployments",
    "pools",
    "listeners",
    "signals",
    "virtual_models",
    "judges",
    "tracing",
)


_DECIDE_SECTIONS: tuple[tuple[str, type[BaseModel]], ...] = (
    ("signals", Signal),
    ("virtual_models", VirtualModel),
    ("judges", Judge),
)


@dataclass
class Report:
    """What validating one file found. ``config`` is set only when there are no errors."""

    file: str
    config: RouterConfig | None = None
    problems: list[Problem] = field(default_factory=list)

    @property
    def errors(self) -> list[Problem]:
        return [p for p in self.problems if p.severity == "error"]

    @property
    def valid(self) -> bool:
        return not self.errors


def read_text(path: str | Path) -> str:
    p = Path(path)
    try:
        return p.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ConfigUnreadable(str(path), "no such file") from None
    except IsADirectoryError:
        raise ConfigUnreadable(str(path), "is a directory") from None
    except PermissionError:
        raise ConfigUnreadable(str(path), "permission denied") from None
    except UnicodeDecodeError as exc:
        raise ConfigUnreadable(str(path), f"not UTF-8 text ({exc.reason} at byte {exc.start})") from None
    except OSError as exc:
        raise ConfigUnreadable(str(path), exc.strerror or str(exc)) from None


def load(path: str | Path) -> RouterConfig:
    report = validate_text(read_text(path), str(path))
    if report.config is None:
        raise ConfigError(report.errors)
    return report.config


def load_text(text: str, file: str = "<config>") -> RouterConfig:
    report = validate_text(text, file)
    if report.config is None:
        raise ConfigError(report.errors)
    return report.config


def validate_text(text: str, file: str, *, reader: Rereader | None = None) -> Report:
    """The reading pipeline, one stage after the other; never raises for a bad file.

    ``reader``: the file's Rereader, which parses only the entries an edit changed since the
    text it read last (``xds serve`` keeps one per file); the report is the same either way."""
    report = Report(file)
    # 1. Source text -> marked document: plain data, and where each value was written.
    try:
        marked = reader.read(text, file) if reader is not None else read(text, file)
    except YamlSyntaxError as exc:
        report.problems.append(exc.problem)
        return report
    # 2. -> the current format: an older one is migrated in memory, its marks kept.
    current = _current_format(marked, text, file, _Problems(report, marked))
    if current is None:
        return report
    # 3. -> the validated model, every problem placed by the marks of the migrated document.
    config = _validate(current.data, _Problems(report, current))
    _tidy(report)
    if report.valid:
        # Every part was validated on its own above; the whole is those parts, the same model
        # objects (validating the whole again would cost as much as the parts did).
        report.config = config
    return report


@dataclass
class _Problems:
    """Adds problems to a report, each placed at its line and column in one marked document."""

    report: Report
    marked: Marked

    def __call__(self, loc: Loc, message: str, *, at_key: bool = False, severity: str = "error") -> None:
        line, col = self.marked.position(loc, at_key=at_key)
        self.report.problems.append(Problem(self.report.file, line, col, loc, message, severity))  # type: ignore[arg-type]  # severity is 'error' or 'warning', Problem's literals


def _current_format(marked: Marked, text: str, file: str, problem: _Problems) -> Marked | None:
    """The document in the current format, or None (with a problem) when it cannot be."""
    if not isinstance(marked.data, dict):
        problem(
            (), f"a router config is a mapping of sections ({', '.join(_SECTIONS)}), not a {type(marked.data).__name__}"
        )
        return None
    version = marked.data.get("version", 1)
    if isinstance(version, bool) or not isinstance(version, int) or version < 1:
        problem(("version",), f"version must be a whole number from 1 to {CURRENT_VERSION}, not {version!r}")
        return None
    if version > CURRENT_VERSION:
        problem(
            ("version",),
            f"config format {version} is newer than this vllm-sr understands "
            f"(formats 1 to {CURRENT_VERSION}); upgrade vllm-sr",
        )
        return None
    if version == CURRENT_VERSION:
        return marked
    problem(
        ("version",) if "version" in marked.data else (),
        f"config format {version} is out of date; read as format {CURRENT_VERSION}. "
        f"Run `vllm-sr config migrate --in-place {file}` to update the file",
        severity="warning",
    )
    # Migration steps edit ruamel.yaml's round-trip tree, which keeps each moved value's mark.
    return from_round_trip(source.upgrade(source.parse(text, file), version))


def _validate(data: dict[str, Any], problem: _Problems) -> RouterConfig:
    """Each section, and each entry in it, on its own (one broken entry must not hide the
    others), then the rules that span the whole file."""
    for key in data:
        if key not in _SECTIONS:
            problem((key,), f"unknown section {key!r} (sections: {', '.join(_SECTIONS)})", at_key=True)

    parts: dict[str, Any] = {}
    ignored: set[str] = set()
    parts["providers"], provider_index = _validate_items(
        data.get("providers"), ("providers",), problem, ignored, "models", ProviderModel
    )
    parts["deployments"] = _validate_map(data.get("deployments"), ("deployments",), Deployment, problem, ignored)
    parts["pools"] = _validate_map(data.get("pools"), ("pools",), Pool, problem, ignored)
    parts["listeners"], listener_index = _validate_list(
        data.get("listeners"), ("listeners",), Listener, problem, ignored
    )
    # The Decide path's sections (docs/decide/config.md), entry by entry like the others.
    decide = {key: _validate_map(data.get(key), (key,), model, problem, ignored) for key, model in _DECIDE_SECTIONS}
    tracing = None
    if data.get("tracing") is not None:
        tracing = _validate_model(data["tracing"], ("tracing",), Tracing, problem)

    partial = RouterConfig.model_construct(
        version=CURRENT_VERSION,
        providers=parts["providers"],
        deployments=parts["deployments"],
        pools=parts["pools"],
        listeners=parts["listeners"],
        signals=decide["signals"],
        virtual_models=decide["virtual_models"],
        judges=decide["judges"],
        tracing=cast(Tracing | None, tracing),
    )
    ctx = checks.Context(partial, frozenset(ignored), tuple(listener_index), tuple(provider_index))
    for loc, message in checks.run_checks(ctx):
        problem(loc, message)
    return partial


def _tidy(report: Report) -> None:
    report.problems.sort(key=lambda p: (p.line, p.column, p.severity != "error"))
    # A field moved by an in-memory migration can fail once per copy (one listener ``models``
    # becomes four APIs' lists): say it once, where the user wrote it.
    seen: set[tuple[int, int, str]] = set()
    unique = []
    for p in report.problems:
        if (p.line, p.column, p.message) not in seen:
            seen.add((p.line, p.column, p.message))
            unique.append(p)
    report.problems = unique


def _describe(err: ErrorDetails) -> tuple[Loc, str, bool]:
    """A pydantic error as (loc, message, point-at-key), in the config's own words."""
    loc = tuple(p for p in err["loc"] if not (isinstance(p, str) and ("[" in p or p in ("function-after",))))
    kind = err["type"]
    if kind == "extra_forbidden":
        return loc, f"unknown field {loc[-1]!r}", True
    if kind == "missing":
        return loc, f"missing required field {loc[-1]!r}", True
    msg = err["msg"]
    if kind == "value_error":
        msg = msg.removeprefix("Value error, ")
    elif kind == "too_short":
        n = err.get("ctx", {}).get("min_length", 1)
        msg = "must not be empty" if n == 1 else f"must have at least {n} items"
    elif kind == "too_long":
        msg = f"must have at most {err.get('ctx', {}).get('max_length')} items"
    elif kind == "literal_error":
        msg = msg.replace("Input should be", "must be")
    elif kind == "string_pattern_mismatch" and loc and loc[-1] == "name":
        msg = "must be lowercase letters, digits, '-' or '_', starting and ending with a letter or digit (at most 63)"
    else:
        msg = msg.replace("Input should be", "must be").replace("Input should have", "must have")
    if (
        "input" in err
        and kind not in ("missing", "value_error", "too_short", "too_long")
        and not isinstance(err["input"], (dict, list))
    ):
        got = err["input"]
        if isinstance(got, datetime.date):
            # YAML reads an unquoted 2001-12-14 as a date: say so, and how to keep the text.
            what = "timestamp" if isinstance(got, datetime.datetime) else "date"
            msg += f" (got {got.isoformat()}, which YAML reads as a {what}; quote it to make it a string)"
        else:
            msg += f" (got {got!r})"
    return loc, msg, False


def _validate_model(value: Any, loc: Loc, model: type[BaseModel], problem: Any) -> BaseModel | None:
    """The entry. A broken entry is reported, then read again without its broken fields, so
    the whole-file rules still see the rest of it (a bad ``max_concurrency`` must not hide a bad
    ``schema``). Only an entry that cannot be read even so comes back as None."""
    parsed, findings = _ENTRIES.validated(model, value)
    for where, message, at_key in findings:
        problem(loc + where, message, at_key=at_key)
    return parsed


def _validate_entry(model: type[BaseModel], value: Any) -> tuple[BaseModel | None, tuple[tuple[Loc, str, bool], ...]]:
    """``_validate_model``'s answer, with each problem's place relative to the entry."""
    try:
        return model.model_validate(value), ()
    except ValidationError as exc:
        findings = tuple(_describe(err) for err in exc.errors(include_url=False))
        broken = {err["loc"][0] for err in exc.errors() if err["loc"]}
    if not isinstance(value, dict) or not broken:
        return None, findings
    try:
        return model.model_validate({k: v for k, v in value.items() if k not in broken}), findings
    except ValidationError:
        return None, findings


class _Entries:
    """Validated entries by model and content, least recently used first out.

    ``xds serve`` validates the whole file on every edit, and an edit touches a few entries of
    maybe thousands: the others come back from here, as the same model objects, which is also
    how the compiler tells an unchanged listener at a glance (``compiler/incremental.py``). The
    key is the entry's repr: plain YAML data, so equal reprs are equal data (``1``, ``1.0``,
    ``True`` and ``'1'`` all differ), and the answer is what validating it again would give."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self._entries: LRUCache[tuple[type[BaseModel], str], Any] = LRUCache(limit)
        # The key of each value object seen lately: a Rereader hands back the very objects of
        # the entries an edit left alone, whose repr need not be taken again. The value is
        # held, so its id cannot be reused while it is here.
        self._keys: dict[int, tuple[Any, str]] = {}
        self._lock = threading.Lock()  # the control plane validates on its watch thread

    def _key(self, value: Any) -> str:
        seen = self._keys.get(id(value))
        if seen is not None and seen[0] is value:
            return seen[1]
        key = repr(value)
        if len(self._keys) >= self.limit:
            self._keys = {}
        self._keys[id(value)] = (value, key)
        return key

    def validated(
        self, model: type[BaseModel], value: Any
    ) -> tuple[BaseModel | None, tuple[tuple[Loc, str, bool], ...]]:
        key = (model, self._key(value))
        with self._lock:
            found = self._entries.get(key)
        if found is not None:
            return found
        found = _validate_entry(model, value)
        with self._lock:
            self._entries[key] = found
        return found


# Two versions of a 10,000-entry config.
_ENTRIES = _Entries(20_000)


def _validate_map(value: Any, loc: Loc, model: type[BaseModel], problem: Any, ignored: set[str]) -> dict[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, dict):
        problem(loc, f"must be a mapping of names to entries, not a {type(value).__name__}")
        return {}
    out = {}
    for name, entry in value.items():
        if not isinstance(name, str) or not name:
            problem(loc + (name,), "names must be non-empty strings", at_key=True)
            continue
        if len(name) > 253:
            problem(loc + (name,), f"names must be at most 253 characters (this one has {len(name)})", at_key=True)
            continue
        parsed = _validate_model(entry, loc + (name,), model, problem)
        if parsed is None:
            ignored.add(name)
            if isinstance(entry, dict) and isinstance(entry.get("model"), str):
                ignored.add(entry["model"])
        else:
            out[name] = parsed
    return out


def _validate_list(
    value: Any, loc: Loc, model: type[BaseModel], problem: Any, ignored: set[str]
) -> tuple[list[Any], list[int]]:
    if value is None:
        return [], []
    if not isinstance(value, list):
        problem(loc, f"must be a list, not a {type(value).__name__}")
        return [], []
    out, index = [], []
    for i, entry in enumerate(value):
        parsed = _validate_model(entry, loc + (i,), model, problem)
        if parsed is None:
            if isinstance(entry, dict) and isinstance(entry.get("name"), str):
                ignored.add(entry["name"])
        else:
            out.append(parsed)
            index.append(i)
    return out, index


def _validate_items(
    value: Any, loc: Loc, problem: Any, ignored: set[str], key: str, model: type[BaseModel]
) -> tuple[Providers, list[int]]:
    """``providers``: a mapping holding one list, validated entry by entry."""
    if value is None:
        return Providers(), []
    if not isinstance(value, dict):
        problem(loc, f"must be a mapping, not a {type(value).__name__}")
        return Providers(), []
    for extra in value:
        if extra != key:
            problem(loc + (extra,), f"unknown field {extra!r}", at_key=True)
    items, index = _validate_list(value.get(key), loc + (key,), model, problem, ignored)
    return Providers.model_construct(models=items), index


__all__ = ["Report", "load", "load_text", "read_text", "validate_text"]
