"""The compiler's data -> proto conversion: as strict as json_format.ParseDict, with equal output."""

from __future__ import annotations

import pytest
from google.protobuf import json_format

from tests.compiler.golden_cases import CASES, golden_config
from sr_control.compiler import Settings, static_bootstrap
from sr_control.compiler.convert import ProtoError, parse
from sr_control.compiler.protos import Bootstrap, Listener, to_dict


@pytest.mark.parametrize("case", CASES)
def test_parse_equals_json_format_on_every_golden_config(case: str) -> None:
    data = to_dict(static_bootstrap(golden_config(case), Settings()))
    reference = json_format.ParseDict(data, Bootstrap())
    assert to_dict(parse(data, Bootstrap, "static")) == to_dict(reference)


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ({"adress": {}}, r"listener/x\.adress: envoy\.config\.listener\.v3\.Listener has no field 'adress'"),
        ({"filter_chains": {}}, r"listener/x\.filter_chains: must be a list"),
        ({"traffic_direction": "SIDEWAYS"}, r"'SIDEWAYS' is not a TrafficDirection"),
        ({"per_connection_buffer_limit_bytes": "lots"}, r"per_connection_buffer_limit_bytes"),
        (
            {"filter_chains": [{"filters": [{"name": "hcm", "typed_config": {"@type": "type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager", "stat_prefx": "a"}}]}]},
            r"listener/x\.filter_chains\[0\]\.filters\[0\]\.typed_config\.stat_prefx: .*HttpConnectionManager has no field",
        ),
        ({"filter_chains": [{"filters": [{"name": "x", "typed_config": {"@type": "type.googleapis.com/no.Such"}}]}]}, r"unknown type 'type.googleapis.com/no.Such'"),
        ({"address": {"socket_address": {"address": "a", "port_value": 1}, "pipe": {"path": "/p"}}}, r"a second value for oneof"),
    ],
)
def test_a_misfit_fails_in_python_naming_where(data: dict, message: str) -> None:  # type: ignore[type-arg]
    with pytest.raises(ProtoError, match=message):
        parse(data, Listener, "listener/x")
