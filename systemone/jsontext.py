"""JSON text that keeps what a client wrote: member order and number literals.

    loads(b'{"b": 1.0, "a": -0}')  ->  JsonObject({"b": Number("1.0"), "a": Number("-0")})
    dumps(that)                    ->  '{"b": 1.0, "a": -0}'
    dumps(that, numbers="python")  ->  '{"b": 1.0, "a": 0}'     (what json.dumps(json.loads(...)) gives)

Objects are read-only dicts (insertion order is member order), arrays are tuples, numbers are
``Number`` holding their literal text. ``dumps`` writes exactly what ``json.dumps(value,
ensure_ascii=False)`` writes (same separators, same string escapes), except that a ``Number``
keeps its literal unless ``numbers="python"`` asks for Python's own formatting, which is what a
Python server that parsed the text would send on (the ``state_text`` deviation).

Requests and replies are read and written by msgspec, in C (``read_plain``, ``dumpb_content``);
the standard library's reader and writer remain the reference, and they still read whatever
msgspec cannot read exactly, and write what may hold Python floats. The tests hold each pair
equal on generated JSON.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterator
from typing import Any, Literal, NoReturn, TypeAlias

import msgspec

NumberFormat = Literal["literal", "python"]


class Number:
    """A JSON number as written: ``Number("1e3")`` stays ``1e3`` when written back."""

    __slots__ = ("literal",)

    def __init__(self, literal: str) -> None:
        self.literal = literal

    @property
    def is_integer_literal(self) -> bool:
        return not any(c in self.literal for c in ".eE")

    @property
    def value(self) -> int | float:
        """The number Python's json module would read from the literal."""
        return int(self.literal) if self.is_integer_literal else float(self.literal)

    def python_text(self) -> str:
        """How ``json.dumps`` writes the number ``json.loads`` reads from this literal."""
        value = self.value
        if isinstance(value, int):
            return int.__repr__(value)
        return _float_text(value, allow_nan=True)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Number) and other.literal == self.literal

    def __hash__(self) -> int:
        return hash(self.literal)

    def __repr__(self) -> str:
        return f"Number({self.literal!r})"


class JsonObject(dict[str, Any]):
    """A JSON object: a dict in member order that refuses changes after parsing."""

    __slots__ = ()

    def _readonly(self, *args: object, **kwargs: object) -> NoReturn:
        raise TypeError("JSON content read from a request is immutable")

    __setitem__ = __delitem__ = __ior__ = _readonly
    clear = pop = popitem = setdefault = update = _readonly

    def __repr__(self) -> str:
        return f"JsonObject({dict.__repr__(self)})"


# What ``loads`` returns: every number a Number, every array a tuple, every object a JsonObject.
Json: TypeAlias = "str | bool | None | Number | tuple[Json, ...] | JsonObject"


class JsonTextError(ValueError):
    """Text that is not one JSON value, with the position where reading stopped."""

    def __init__(self, message: str, position: int) -> None:
        self.position = position
        super().__init__(message)


class DuplicateMember(JsonTextError):
    """An object that names one member twice: JSON readers disagree on which one wins."""

    def __init__(self, name: str) -> None:
        self.name = name
        super().__init__(f"member {name!r} appears twice in one object", -1)


# ---------------------------------------------------------------------------- reading


def loads(text: str | bytes) -> Json:
    """Read one JSON value; raise JsonTextError (with a position) for anything else."""
    tree = _read_checked(_MSGSPEC_LOADS, text)
    return stdlib_loads(text) if tree is DECLINED else as_content(tree)


# msgspec reads the text in C, keeping every number but integers as its literal (``float_hook``).
# It does not notice a member named twice, and it reads ``-0`` as 0, so the tree it read is
# written back (also in C) and compared with the text, both without whitespace: equal text means
# no member was lost, every number keeps its literal, and every string is escaped as ``dumps``
# escapes it. Anything else (an error, a duplicate, ``\u00e9`` where ``dumps`` writes the
# character) is read again by the standard library, whose answer and messages are the reference.

DECLINED: Any = object()  # what ``read_plain`` answers for text it leaves to ``loads``
_MSGSPEC_READ = msgspec.json.Decoder(float_hook=msgspec.Raw)
_MSGSPEC_LOADS = msgspec.json.Decoder(float_hook=Number)  # for loads, which wants every Number
_CONVERTED = frozenset({dict, list, int, msgspec.Raw})


def _raw_number(o: Any) -> msgspec.Raw:
    if type(o) is not Number:
        raise TypeError(f"{type(o).__name__} is not JSON content")
    return msgspec.Raw(o.literal)


_MSGSPEC_WRITE = msgspec.json.Encoder(enc_hook=_raw_number)  # a Number is written as its literal


def read_plain(text: str | bytes | bytearray | memoryview) -> Any:
    """The value as msgspec reads it, in C: dicts, lists, strings, ints, ``msgspec.Raw`` (the
    literal) for other numbers, booleans and null. ``as_content`` of it is what ``loads`` returns;
    DECLINED when the text is not JSON, names a member twice, or writes a literal or an escape
    otherwise than ``dumps``. No Python object is made per number, so a reply's shape can be
    looked at cheaply."""
    return _read_checked(_MSGSPEC_READ, text)


def _read_checked(decoder: msgspec.json.Decoder, text: str | bytes | bytearray | memoryview) -> Any:
    try:
        data = text.encode("utf-8") if isinstance(text, str) else text
        tree = decoder.decode(data)
        if _MSGSPEC_WRITE.encode(tree) != msgspec.json.format(data, indent=-1):
            return DECLINED
        return tree
    except (msgspec.MsgspecError, ValueError, TypeError, RecursionError):
        return DECLINED


def read_shape(text: bytes) -> Any:
    """msgspec's reading of JSON text, to look at its shape only: it is exact only where
    ``read_plain`` accepts the text (a member named twice keeps its last value, ``-0`` reads as
    0). DECLINED for text msgspec cannot read."""
    try:
        return _MSGSPEC_READ.decode(text)
    except (msgspec.MsgspecError, ValueError, RecursionError):
        return DECLINED


def as_content(value: Any) -> Any:
    """A value ``read_plain`` read, as the read-only content ``loads`` returns: objects
    JsonObject, arrays tuples, numbers Number (other values, a Number among them, as they are)."""
    kind = type(value)
    if kind is dict:
        obj = JsonObject(value)
        for name, item in value.items():
            if type(item) in _CONVERTED:
                dict.__setitem__(obj, name, as_content(item))
        return obj
    if kind is list:
        return tuple([as_content(item) if type(item) in _CONVERTED else item for item in value])
    if kind is int:
        return Number(int.__repr__(value))
    if kind is msgspec.Raw:
        return Number(str(value, "ascii"))
    return value


def stdlib_loads(text: str | bytes) -> Json:
    """``loads`` by the standard library's reader: the exact error messages, and the reference
    the fast reader is tested against."""
    if isinstance(text, (bytes, bytearray, memoryview)):
        try:
            text = bytes(text).decode("utf-8")
        except UnicodeDecodeError as exc:
            raise JsonTextError(f"the body is not UTF-8 ({exc.reason} at byte {exc.start})", exc.start) from None
    try:
        value = _DECODER.decode(text)
    except json.JSONDecodeError as exc:
        raise JsonTextError(f"{exc.msg} at line {exc.lineno} column {exc.colno}", exc.pos) from None
    except RecursionError:
        # The reader recurses per nesting level; a body nested past Python's limit is the
        # client's error (json_invalid), never a crash of whoever reads it.
        raise JsonTextError("the body nests arrays or objects too deeply", 0) from None
    if "\\ud" in text or "\\uD" in text:
        _refuse_lone_surrogates(value)
    return _tuple(value) if type(value) is list else value


def _object(pairs: list[tuple[str, Any]]) -> JsonObject:
    obj = JsonObject(pairs)
    if len(obj) != len(pairs):
        seen: set[str] = set()
        for name, _ in pairs:
            if name in seen:
                raise DuplicateMember(name)
            seen.add(name)
    for name, value in pairs:
        if type(value) is list:
            dict.__setitem__(obj, name, _tuple(value))
    return obj


def _tuple(items: list[Any]) -> tuple[Any, ...]:
    return tuple(_tuple(v) if type(v) is list else v for v in items)


def _no_constant(name: str) -> NoReturn:
    raise JsonTextError(f"{name} is not a JSON number", -1)


_DECODER = json.JSONDecoder(
    object_pairs_hook=_object, parse_int=Number, parse_float=Number, parse_constant=_no_constant
)


def _refuse_lone_surrogates(value: Any) -> None:
    for text in strings(value):
        try:
            text.encode("utf-8")
        except UnicodeEncodeError:
            raise JsonTextError("a string escapes a lone UTF-16 surrogate, which is not Unicode text", -1) from None


def strings(value: Any) -> Iterator[str]:
    """Every string in a JSON value, member names included, in document order."""
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for name, item in value.items():
            yield name
            yield from strings(item)
    elif isinstance(value, (list, tuple)):
        for item in value:
            yield from strings(item)


# ---------------------------------------------------------------------------- writing


# A Number goes through the C encoder as a placeholder string, then its literal replaces it. The
# placeholder holds lone surrogates, which ``loads`` refuses, so no client text can look like one.
_MARK = "\ud800"
_PLACEHOLDER = re.compile('"' + _MARK + r"(\d+)" + _MARK + '"')
_NON_ASCII = re.compile(r"[^\x00-\x7e]")


def dumps(value: Any, *, ensure_ascii: bool = False, numbers: NumberFormat = "literal") -> str:
    """Write ``value`` the way ``json.dumps(value, ensure_ascii=...)`` does, keeping literals."""
    found: list[str] = []
    python = numbers == "python"

    def number(o: Any) -> str:
        if not isinstance(o, Number):
            raise TypeError(f"{type(o).__name__} is not JSON content")
        found.append(o.python_text() if python else o.literal)
        return f"{_MARK}{len(found) - 1}{_MARK}"

    # Our own numbers (answers, usage) must be finite: NaN is not JSON and SDKs reject it.
    text = json.dumps(value, ensure_ascii=False, allow_nan=False, default=number)
    if found:
        text = _PLACEHOLDER.sub(lambda m: found[int(m.group(1))], text)
    if ensure_ascii:
        # Outside its strings JSON text is printable ASCII, so escaping every other character
        # (DEL included) is exactly what ensure_ascii=True does to the strings.
        text = _NON_ASCII.sub(_escape, text)
    return text


def _escape(m: re.Match[str]) -> str:
    code = ord(m.group(0))
    if code < 0x10000:
        return f"\\u{code:04x}"
    code -= 0x10000
    return f"\\u{0xD800 | (code >> 10):04x}\\u{0xDC00 | (code & 0x3FF):04x}"


def dumpb(value: Any, *, numbers: NumberFormat = "literal") -> bytes:
    """``dumps`` as UTF-8 bytes: the wire form (by msgspec when the value lets it be exact)."""
    try:
        if numbers == "literal" and _content_only(value):
            return dumpb_content(value)
    except RecursionError:  # content nested too deep to look at: dumps says so, or writes it
        pass
    return dumps(value, numbers=numbers).encode("utf-8")


_SCALARS = frozenset({str, int, bool, type(None), Number})
_STRINGS = frozenset({str})


def _content_only(value: Any) -> bool:
    """Whether ``value`` holds JSON content and nothing else (no float, no other type, string
    keys): what msgspec writes exactly as ``json.dumps`` does. A look at each value, cheaper than
    the ``default`` call and placeholder the standard library's encoder needs per Number."""
    kind = type(value)
    if kind in _SCALARS:
        return True
    if kind is JsonObject or kind is dict:
        return set(map(type, value)) <= _STRINGS and all(map(_content_only, value.values()))
    if kind is tuple or kind is list:
        return all(map(_content_only, value))
    return False


def _float_text(value: float, allow_nan: bool) -> str:
    if math.isfinite(value):
        return float.__repr__(value)
    if not allow_nan:
        raise ValueError(f"{value!r} cannot be written as JSON")
    return "NaN" if value != value else ("Infinity" if value > 0 else "-Infinity")


def dumpb_content(value: Any) -> bytes:
    """``dumpb(value)`` for JSON content (what ``loads`` returns) and our own strings, integers,
    booleans and nulls, written in C: msgspec writes it without whitespace, and
    ``msgspec.json.format`` puts back exactly the spaces ``json.dumps`` writes. Not for Python
    floats: msgspec spells some differently (``1e16`` where ``json.dumps`` writes ``1e+16``), and
    NaN as null, so anything that may hold one (a runtime's answers) goes through ``dumpb``.
    """
    return msgspec.json.format(_MSGSPEC_WRITE.encode(value), indent=0)


def dumps_layout(text: bytes) -> bytes:
    """JSON text whose strings and numbers are written as ``dumps`` writes them (text
    ``read_plain`` read), with the spaces ``dumps`` puts between them: ``dumpb`` of its value."""
    return msgspec.json.format(text, indent=0)


# ---------------------------------------------------------------------------- in code


def plain(value: Any) -> Any:
    """The content as plain Python values (dicts, lists, int/float): for people and tests."""
    if isinstance(value, Number):
        return value.value
    if isinstance(value, dict):
        return {name: plain(item) for name, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [plain(item) for item in value]
    return value


def freeze(value: Any) -> Any:
    """Content built in code (dicts, lists) as read-only JSON content."""
    if isinstance(value, dict) and not isinstance(value, JsonObject):
        return JsonObject((name, freeze(item)) for name, item in value.items())
    if isinstance(value, list):
        return tuple(freeze(item) for item in value)
    return value
