"""The common request, checked in C: msgspec holds the standard shape, Python builds the IR.

    read(read_plain(body), READINGS["vllm-sr/5.0"], "systemone", source=body) -> (Request, legacy forms) | None

Most requests a listener reads have one form: the request members ``model``, ``state``,
``roles``, ``questions`` and ``options``, and questions with ``type``, ``instructions`` and
``criteria`` only. For each Reading that form is written as msgspec types (``shape``), built
from the same tables as the Reading, and ``msgspec.convert`` checks a parsed body against it in
C, where the general reader (``reading.py``) spends most of a request's time. A body of that form
gets the IR the general reader would build for it (the tests hold the two equal); for anything
else, valid or not (assets, extension fields, 4.0 spellings, batches, any problem) ``read``
returns None and the general reader reads the body, with its exact errors.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import GenericAlias, MappingProxyType
from typing import Annotated, Any, Literal, Union

import msgspec

from systemone import fieldtypes
from systemone.generated import fields as F
from systemone.ir import IMPLICIT, MISSING, NO_ROLES, Endpoint, Request, Roles, read_question
from systemone.jsontext import JsonObject, as_content
from systemone.questions import NEEDS_CRITERIA
from systemone.rules import Reading

_NO_EXTENSIONS = JsonObject()
_NO_ASSETS: Mapping[str, Any] = MappingProxyType({})
_TEXT = str | dict | list  # "text": a string, an object or an array
_CONTAINERS = frozenset({dict, list})
_BOUNDS = {
    "min_items": "min_length",
    "max_items": "max_length",
    "minimum": "ge",
    "maximum": "le",
    "exclusive_minimum": "gt",
}
_NOUL_CRITERIA = msgspec.defstruct(
    "NoulCriteria",
    [(side, _TEXT | None | msgspec.UnsetType, msgspec.UNSET) for side in F.STANDARD_NOUL_CRITERIA],
    forbid_unknown_fields=True,
)


def _type(expr: str, bounds: Mapping[str, Any] | None = None) -> Any:
    """The msgspec type accepting what ``fieldtypes`` accepts for ``expr``, or None when this
    form leaves the field out. Numbers other than integers are left out: their values are
    ``Number`` literals, which msgspec cannot check."""
    t = fieldtypes.parse(expr)
    base: Any
    if t.kind in ("string", "integer", "boolean"):
        base = {"string": str, "integer": int, "boolean": bool}[t.kind]
    elif t.kind == "text":
        base = _TEXT
    elif t.kind == "any":
        base = Any
    elif t.kind == "enum":
        base = Literal[t.choices]
    elif t.kind in ("map", "array") and t.item is not None:
        item = _type(str(t.item))
        if item is None:
            return None
        # dict[str, item] spelled as the value it is: a checker reads subscripts as types.
        base = GenericAlias(dict, (str, item)) if t.kind == "map" else GenericAlias(list, (item,))
    elif t.kind == "object" and t.ref == "noul_criteria":
        base = _NOUL_CRITERIA
    else:
        return None
    if bounds:
        base = Annotated[base, msgspec.Meta(**{_BOUNDS[k]: v for k, v in bounds.items()})]
    return base | None if t.nullable else base


def _struct(name: str, fields: list[tuple[str, Any, bool]], **options: Any) -> Any:
    """A Struct that refuses unknown members; (name, type, required) for each field."""
    spec = [(f, tp) if required else (f, tp | msgspec.UnsetType, msgspec.UNSET) for f, tp, required in fields]
    spec.sort(key=len)  # required fields first, as Python signatures want
    return msgspec.defstruct(name, spec, forbid_unknown_fields=True, **options)


def shape(reading: Reading) -> Any:
    """The common form of a request under ``reading``, as a msgspec type (built once)."""
    built = _SHAPES.get(id(reading))
    if built is None or built[0] is not reading:
        built = _SHAPES[id(reading)] = (reading, _shape(reading))
    return built[1]


_SHAPES: dict[int, tuple[Reading, Any]] = {}  # Readings hold dicts, so they key by identity


def _shape(reading: Reading) -> Any:
    questions = []
    for kind, members in reading.question_members.items():
        fields = [("instructions", _type("text?"), False)] if "instructions" in members else []
        spec = reading.criteria.get(kind)
        if "criteria" in members and spec is not None:
            fields.append(("criteria", _type(*spec), kind in NEEDS_CRITERIA))
        questions.append(_struct(f"{kind}_question", fields, tag_field="type", tag=kind))
    question_id = Annotated[str, msgspec.Meta(min_length=1)]
    request = [
        ("model", _type(F.STANDARD_REQUEST["model"][0]), "model" in reading.required),
        ("state", _TEXT, True),
        # A union built at run time from the question structs; mypy can only read Union[...] as a
        # type written in the source.
        ("questions", Annotated[dict[question_id, Union[tuple(questions)]], msgspec.Meta(min_length=1)], True),  # type: ignore[misc]  # noqa: UP007
    ]
    if "roles" in reading.request_members:
        request.append(("roles", _type(F.EXTENSION_FIELDS["request.roles"]["type"]), False))
    options = [(name, _type(*spec), False) for name, spec in reading.options.items()]
    if "options" in reading.request_members and all(tp is not None for _, tp, _ in options):
        request.append(("options", _struct("options", options), False))
    return _struct("request", request)


def read(
    tree: Any, reading: Reading, endpoint: Endpoint, *, source: bytes | None = None, content: Any = None
) -> tuple[Request, tuple[str, ...]] | None:
    """The IR and legacy forms of a body of the common form; None for any other body.

    ``tree`` is msgspec's reading of the body (``read_plain``, or ``read_shape`` for a body
    ``read_plain`` left to the standard library), which msgspec checks. The IR is built from it,
    or from ``content``, the body as ``loads`` read it, when given. ``source`` is the body when
    ``read_plain`` read it: it writes every string and number as ``dumps`` writes them, so laid
    out as ``dumps`` lays it out it is the request's internal form, which the Request keeps.
    """
    if endpoint == "batch" or type(tree) is not dict:
        return None
    try:
        msgspec.convert(tree, shape(reading))
    except msgspec.ValidationError:
        return None
    if content is not None:
        tree = content
    state = tree["state"]
    forms: list[str] = []
    roles = _roles(tree, reading, state, forms)
    if roles is None:
        return None
    options = tree.get("options")
    long_context = options is not None and options.get("long_context") is True
    if long_context:
        forms.append("long_context")
    questions = {}
    for q_id, raw in tree["questions"].items():
        q = JsonObject(raw)  # its members are strings and null, but for these two (as read_plain read them):
        instructions, criteria = raw.get("instructions", MISSING), raw.get("criteria", MISSING)
        if type(instructions) in _CONTAINERS:
            instructions = as_content(instructions)
            dict.__setitem__(q, "instructions", instructions)
        if type(criteria) in _CONTAINERS:
            criteria = as_content(criteria)
            dict.__setitem__(q, "criteria", criteria)
        # Every member is one the internal form writes, so the object as read is what it writes.
        questions[q_id] = read_question(q["type"], instructions, criteria, "criteria", _NO_EXTENSIONS, tuple(q), q)
    request = Request(
        state=state if type(state) is str else as_content(state),
        questions=MappingProxyType(questions),
        roles=roles,
        model=tree.get("model"),
        assets=_NO_ASSETS,
        options=None if options is None else as_content(options),
        long_context=long_context,
        order=tuple(tree),
    )
    if source is not None:
        object.__setattr__(request, "source", source)
    return request, tuple(forms)


def _roles(tree: dict[str, Any], reading: Reading, state: Any, forms: list[str]) -> Roles | None:
    """As ``reading._roles`` for one state; None where it would find a problem."""
    if "roles" not in reading.request_members:
        return NO_ROLES
    if "roles" not in tree:
        if not reading.legacy:
            return NO_ROLES
        if isinstance(state, dict):
            forms.append("implicit_roles")
        return IMPLICIT
    roles = tree["roles"]
    if roles is None:
        return NO_ROLES
    if isinstance(state, (list, tuple)) or (isinstance(state, dict) and not state.keys() >= roles.keys()):
        return None
    return Roles("explicit", as_content(roles))
