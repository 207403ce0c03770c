"""The compiler's data -> proto conversion against ``json_format.ParseDict``, protobuf's own reader
of the proto3 JSON form: on the very dicts the templates produce, on the forms known to be
tricky, and on generated inputs. Wherever ParseDict refuses, ``parse`` refuses; wherever it
accepts, ``parse`` gives the same message (or, for the few forms in REFUSED_ON_PURPOSE, refuses
with a clear error).
"""

from __future__ import annotations

import copy
import string
from typing import Any

import pytest
from envoy.config.core.v3 import address_pb2, base_pb2, health_check_pb2
from envoy.type.v3 import percent_pb2
from google.protobuf import descriptor_pool, field_mask_pb2, json_format, text_format, timestamp_pb2  # noqa: F401 - WKTs an Any may name
from google.protobuf.descriptor import Descriptor, FieldDescriptor
from google.protobuf.message import Message
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sr_control.compiler import Settings, bootstrap, build, compile, incremental, static_bootstrap
from sr_control.compiler.convert import ProtoError, parse
from sr_control.compiler.protos import Bootstrap, Cluster, Listener, RouteConfiguration
from tests.compiler.golden_cases import CASES, golden_config


def reference(data: Any, message_type: type[Message]) -> Message | Exception:
    """What ParseDict makes of ``data``: the message, or what it raised."""
    try:
        return json_format.ParseDict(copy.deepcopy(data), message_type())
    except Exception as exc:  # noqa: BLE001 - ParseDict refuses some forms with KeyError, TypeError, OverflowError
        return exc


def ours(data: Any, message_type: type[Message]) -> Message | ProtoError:
    try:
        return parse(copy.deepcopy(data), message_type, "x")
    except ProtoError as exc:
        return exc  # any other exception fails the test: a refusal must be a clear ProtoError


def canonical(message: Message) -> str:
    # The text form: an Any is printed by content (ParseDict packs its bytes in no fixed order),
    # maps sorted by key, and NaN as nan, which compares equal to itself as text.
    return text_format.MessageToString(message)


def assert_agrees(data: Any, message_type: type[Message]) -> None:
    want, got = reference(data, message_type), ours(data, message_type)
    if isinstance(want, Exception):
        assert isinstance(got, ProtoError), f"ParseDict refuses {data!r} ({want}), parse accepted it"
    else:
        assert not isinstance(got, Exception), f"ParseDict accepts {data!r}, parse refused: {got}"
        assert canonical(got) == canonical(want)


# -- the dicts the templates really produce


def _recorded_parses(monkeypatch: pytest.MonkeyPatch, case: str) -> list[tuple[Any, type[Message]]]:
    seen: list[tuple[Any, type[Message]]] = []
    real = build.parse

    def recording(data: Any, message_type: type[Message], what: str) -> Message:
        seen.append((copy.deepcopy(data), message_type))
        return real(data, message_type, what)

    monkeypatch.setattr(build, "parse", recording)
    monkeypatch.setattr(incremental, "parse", recording)
    config = golden_config(case)
    compile(config, Settings())
    static_bootstrap(config, Settings())
    bootstrap(Settings())
    return seen


@pytest.mark.parametrize("case", CASES)
def test_parse_equals_parse_dict_on_the_raw_template_dicts(case: str, monkeypatch: pytest.MonkeyPatch) -> None:
    seen = _recorded_parses(monkeypatch, case)
    assert {t for _, t in seen} >= {Cluster, Listener, RouteConfiguration, Bootstrap}
    for data, message_type in seen:
        want = json_format.ParseDict(copy.deepcopy(data), message_type())
        assert canonical(parse(data, message_type, "x")) == canonical(want)


# -- the forms where a hand-written converter goes wrong

TIMESTAMP_URL = "type.googleapis.com/google.protobuf.Timestamp"


@pytest.mark.parametrize(
    ("data", "message_type"),
    [
        ({"respect_dns_ttl": 1}, Cluster),  # a bool is true or false, never 1
        ({"respect_dns_ttl": "true"}, Cluster),
        ({"inline_bytes": "aGVsbG8="}, base_pb2.DataSource),  # bytes are base64
        ({"inline_bytes": "aGVsbG8"}, base_pb2.DataSource),  # unpadded
        ({"inline_bytes": "-_-_"}, base_pb2.DataSource),  # URL-safe alphabet
        ({"inline_bytes": "%%%"}, base_pb2.DataSource),
        ({"name": None, "load_assignment": None, "health_checks": None}, Cluster),  # null: not set
        ({"health_checks": [None]}, Cluster),
        ({"value": "NaN"}, percent_pb2.Percent),
        ({"value": "Infinity"}, percent_pb2.Percent),
        ({"value": "-Infinity"}, percent_pb2.Percent),
        ({"value": "nan"}, percent_pb2.Percent),
        ({"value": float("nan")}, percent_pb2.Percent),
        ({"value": True}, percent_pb2.Percent),
        ({"value": "2.5"}, percent_pb2.Percent),
        ({"address": "a", "port_value": 8080.0}, address_pb2.SocketAddress),  # an integral float is an integer
        ({"address": "a", "port_value": 8080.5}, address_pb2.SocketAddress),
        ({"address": "a", "port_value": "8080"}, address_pb2.SocketAddress),
        ({"address": "a", "port_value": "8e3"}, address_pb2.SocketAddress),
        ({"address": "a", "port_value": " 8080"}, address_pb2.SocketAddress),
        ({"address": "a", "port_value": True}, address_pb2.SocketAddress),
        ({"address": "a", "port_value": 2**40}, address_pb2.SocketAddress),
        ({"per_connection_buffer_limit_bytes": 2.0}, Cluster),  # a wrapper takes its scalar's forms
        ({"per_connection_buffer_limit_bytes": "7"}, Cluster),
        ({"lb_policy": 1}, Cluster),  # an enum by number
        ({"lb_policy": "1"}, Cluster),
        ({"lb_policy": 99}, Cluster),  # open enums keep unknown numbers
        ({"lb_policy": "NOPE"}, Cluster),
        ({"timeout": "1.5s", "interval": 5}, health_check_pb2.HealthCheck),  # a Duration is a string
        (
            {"metadata": {"filter_metadata": {"a": {"x": [1, "b", None, {"c": True}]}}}},
            Cluster,
        ),  # Struct, Value, ListValue
        (
            {"typed_extension_protocol_options": {"t": {"@type": TIMESTAMP_URL, "value": "2026-01-01T00:00:00Z"}}},
            Cluster,
        ),
        ({"typed_extension_protocol_options": {"t": {"@type": TIMESTAMP_URL, "value": "yesterday"}}}, Cluster),
        (
            {
                "typed_extension_protocol_options": {
                    "t": {"@type": "type.googleapis.com/google.protobuf.FieldMask", "value": "a.b,cD"}
                }
            },
            Cluster,
        ),
        (
            {
                "typed_extension_protocol_options": {
                    "t": {"@type": "type.googleapis.com/google.protobuf.ListValue", "value": [1, "x"]}
                }
            },
            Cluster,
        ),
        (
            {
                "typed_extension_protocol_options": {
                    "t": {"@type": "type.googleapis.com/google.protobuf.Value", "value": None}
                }
            },
            Cluster,
        ),
        ({"typed_extension_protocol_options": {"t": {}}}, Cluster),  # an empty Any
        ({"typed_extension_protocol_options": {"t": {"@type": TIMESTAMP_URL}}}, Cluster),
        ({"typed_extension_protocol_options": {"t": {"@type": 5}}}, Cluster),
        ({"name": "a", "alt_stat_name": "b", "altStatName": "c"}, Cluster),  # both spellings: the last wins
        ({"health_checks": [{"timeout": "1s"}], "healthChecks": [{"timeout": "2s"}]}, Cluster),
        ({"name": "\ud800"}, Cluster),  # an unpaired surrogate is not text
        ({"name": 5}, Cluster),
    ],
)
def test_a_tricky_form_is_read_as_parse_dict_reads_it_or_refused(
    data: dict[str, Any], message_type: type[Message]
) -> None:
    assert_agrees(data, message_type)


# Forms ParseDict accepts by accident (it iterates whatever it is given as a message's fields),
# which parse refuses: a template that writes one of them has a bug.
REFUSED_ON_PURPOSE = [({"load_assignment": ""}, Cluster), ({"load_assignment": []}, Cluster)]


@pytest.mark.parametrize(("data", "message_type"), REFUSED_ON_PURPOSE)
def test_a_message_that_is_not_a_mapping_is_refused(data: dict[str, Any], message_type: type[Message]) -> None:
    assert not isinstance(reference(data, message_type), Exception)
    with pytest.raises(
        ProtoError, match=r"x\.load_assignment: a envoy\.config\.endpoint\.v3\.ClusterLoadAssignment is a mapping"
    ):
        parse(data, message_type, "x")


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ({"adress": {}}, r"listener/x\.adress: envoy\.config\.listener\.v3\.Listener has no field 'adress'"),
        ({"filter_chains": {}}, r"listener/x\.filter_chains: must be a list"),
        ({"traffic_direction": "SIDEWAYS"}, r"'SIDEWAYS' is not a TrafficDirection"),
        ({"per_connection_buffer_limit_bytes": "lots"}, r"per_connection_buffer_limit_bytes"),
        ({"enable_reuse_port": 1}, r"listener/x\.enable_reuse_port: must be true or false, not 1"),
        (
            {
                "filter_chains": [
                    {
                        "filters": [
                            {
                                "name": "hcm",
                                "typed_config": {
                                    "@type": (
                                        "type.googleapis.com/envoy.extensions.filters.network.http_connection_manager"
                                        ".v3.HttpConnectionManager"
                                    ),
                                    "stat_prefx": "a",
                                },
                            }
                        ]
                    }
                ]
            },
            (
                r"listener/x\.filter_chains\[0\]\.filters\[0\]\.typed_config\.stat_prefx: "
                r".*HttpConnectionManager has no field"
            ),
        ),
        (
            {"filter_chains": [{"filters": [{"name": "x", "typed_config": {"@type": "type.googleapis.com/no.Such"}}]}]},
            r"unknown type 'type.googleapis.com/no.Such'",
        ),
        (
            {"address": {"socket_address": {"address": "a", "port_value": 1}, "pipe": {"path": "/p"}}},
            r"a second value for oneof",
        ),
    ],
)
def test_a_misfit_fails_in_python_naming_where(data: dict, message: str) -> None:  # type: ignore[type-arg]
    with pytest.raises(ProtoError, match=message):
        parse(data, Listener, "listener/x")


# -- generated inputs

_INTS = frozenset(
    {
        FieldDescriptor.CPPTYPE_INT32,
        FieldDescriptor.CPPTYPE_INT64,
        FieldDescriptor.CPPTYPE_UINT32,
        FieldDescriptor.CPPTYPE_UINT64,
    }
)
_FLOATS = frozenset({FieldDescriptor.CPPTYPE_FLOAT, FieldDescriptor.CPPTYPE_DOUBLE})

# Values of every JSON kind, including the ones proto3 JSON treats specially.
_ODD = st.sampled_from(
    [
        None,
        True,
        False,
        0,
        1,
        -1,
        2**31,
        2**64,
        1.0,
        2.5,
        -0.0,
        1e39,
        float("inf"),
        float("nan"),
        "",
        "1",
        " 1",
        "1e3",
        "1.5",
        "NaN",
        "Infinity",
        "-Infinity",
        "nan",
        "true",
        "aGk=",
        "a-_b",
        "\ud7ff",
        [],
        {},
    ]
)
_TEXT = st.text(string.ascii_letters + string.digits + "_-./+=", max_size=8)


def _scalar(f: FieldDescriptor) -> st.SearchStrategy[Any]:
    if f.cpp_type in _INTS:
        typed: st.SearchStrategy[Any] = st.one_of(
            st.integers(-(2**65), 2**65), st.integers(-5, 5).map(str), st.floats(allow_nan=True)
        )
    elif f.cpp_type in _FLOATS:
        typed = st.one_of(
            st.floats(allow_nan=True, allow_infinity=True), st.integers(), st.floats(allow_nan=False).map(repr)
        )
    elif f.cpp_type == FieldDescriptor.CPPTYPE_BOOL:
        typed = st.booleans()
    elif f.cpp_type == FieldDescriptor.CPPTYPE_ENUM:
        names = [v.name for v in f.enum_type.values]
        typed = st.one_of(st.sampled_from(names), st.integers(-2, 200), st.sampled_from(names).map(str.lower))
    else:
        typed = _TEXT
    return st.one_of(typed, typed, _ODD)


_WKT: dict[str, st.SearchStrategy[Any]] = {
    "google.protobuf.Duration": st.one_of(st.sampled_from(["1s", "1.5s", "-2s", "0.000000001s", "1", "s", "1m"]), _ODD),
    "google.protobuf.Timestamp": st.one_of(
        st.sampled_from(["2026-01-01T00:00:00Z", "2026-01-01T00:00:00.5+01:00", "yesterday"]), _ODD
    ),
    "google.protobuf.FieldMask": st.one_of(st.sampled_from(["a.b,cD", "", "a_b"]), _ODD),
    "google.protobuf.Struct": st.dictionaries(
        _TEXT,
        st.recursive(
            _ODD, lambda inner: st.lists(inner, max_size=2) | st.dictionaries(_TEXT, inner, max_size=2), max_leaves=4
        ),
        max_size=3,
    ),
}
_JSON = st.recursive(
    _ODD, lambda inner: st.lists(inner, max_size=2) | st.dictionaries(_TEXT, inner, max_size=2), max_leaves=4
)
_WKT["google.protobuf.Value"] = _JSON
_WKT["google.protobuf.ListValue"] = st.one_of(st.lists(_JSON, max_size=3), _ODD)
_ANY_TYPES = [
    "google.protobuf.Duration",
    "google.protobuf.Timestamp",
    "google.protobuf.Struct",
    "google.protobuf.UInt32Value",
    "envoy.config.core.v3.SocketAddress",
]


@st.composite
def _message(draw: st.DrawFn, d: Descriptor, depth: int) -> Any:
    name = d.full_name
    if name in _WKT:
        return draw(_WKT[name])
    if d.file.name == "google/protobuf/wrappers.proto":
        return draw(_scalar(d.fields_by_name["value"]))
    if name == "google.protobuf.Any":
        kind = draw(st.sampled_from(_ANY_TYPES + ["{}", "no @type"]))
        if kind == "{}":
            return {}
        if kind == "no @type":
            return {"value": "x"}
        inner = descriptor_pool.Default().FindMessageTypeByName(kind)
        body = draw(_message(inner, depth + 1))
        if kind.startswith("google.protobuf.") or not isinstance(body, dict):
            return {"@type": f"type.googleapis.com/{kind}", "value": body}
        return {"@type": f"type.googleapis.com/{kind}"} | body
    fields = sorted(d.fields, key=lambda f: f.number)
    chosen = (
        draw(st.lists(st.sampled_from(fields), max_size=4 if depth < 3 else 1, unique_by=lambda f: f.number))
        if fields
        else []
    )
    out: dict[Any, Any] = {}
    for f in chosen:
        key = draw(st.sampled_from([f.name, f.json_name]))
        out[key] = draw(_field(f, depth))
    if draw(st.integers(0, 20)) == 0:
        out[draw(st.sampled_from(["bogus", "typed_config", "@type"]))] = 1
    return out


@st.composite
def _field(draw: st.DrawFn, f: FieldDescriptor, depth: int) -> Any:
    if draw(st.integers(0, 12)) == 0:
        return None
    if f.message_type is not None and f.message_type.GetOptions().map_entry:
        key_f, value_f = f.message_type.fields_by_name["key"], f.message_type.fields_by_name["value"]
        keys = (
            st.sampled_from(["true", "false", "7", "-1", "x"])
            if key_f.cpp_type != FieldDescriptor.CPPTYPE_STRING
            else _TEXT
        )
        values = _message(value_f.message_type, depth + 1) if value_f.message_type is not None else _scalar(value_f)
        return draw(st.dictionaries(keys, values, max_size=2))
    one = (lambda: _message(f.message_type, depth + 1)) if f.message_type is not None else (lambda: _scalar(f))
    if f.is_repeated:
        return draw(st.one_of(st.lists(one(), max_size=2), one()))
    if depth >= 4 and f.message_type is not None:
        return {}
    return draw(one())


_TARGETS = [
    Cluster,
    RouteConfiguration,
    Listener,
    base_pb2.DataSource,
    health_check_pb2.HealthCheck,
    base_pb2.Metadata,
    percent_pb2.Percent,
]


@pytest.mark.parametrize("message_type", _TARGETS, ids=lambda t: t.DESCRIPTOR.name)
@settings(
    max_examples=150,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(data=st.data())
def test_parse_agrees_with_parse_dict_on_generated_inputs(message_type: type[Message], data: st.DataObject) -> None:
    value = data.draw(_message(message_type.DESCRIPTOR, 0))
    assert_agrees(value, message_type)


# -- the cache of packed Any values


def test_the_any_cache_is_bounded_by_bytes_and_never_changes_a_result(monkeypatch: pytest.MonkeyPatch) -> None:
    from sr_control.compiler import convert

    small = convert._Packed(64 * 1024)
    monkeypatch.setattr(convert, "_PACKED", small)
    router = "type.googleapis.com/envoy.config.core.v3.SocketAddress"
    for i in range(2_000):  # ~200 KB of distinct values through a 64 KiB cache
        data = {
            "typed_extension_protocol_options": {
                "a": {"@type": router, "address": f"host-{i}-" + "x" * 40, "port_value": i}
            }
        }
        assert canonical(parse(data, Cluster, "x")) == canonical(json_format.ParseDict(copy.deepcopy(data), Cluster()))
        assert small.size <= small.limit
    assert 0 < len(small) < 2_000
    again = {
        "typed_extension_protocol_options": {
            "a": {"@type": router, "address": "host-1999-" + "x" * 40, "port_value": 1999}
        }
    }
    assert canonical(parse(again, Cluster, "x")) == canonical(json_format.ParseDict(copy.deepcopy(again), Cluster()))
