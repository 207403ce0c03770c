"""Envoy's own replies, compiled: each listener's ``local_reply_config`` writes the listener
schema's error body for every status Envoy answers with itself, and the route table answers a
wrong method on a System One path with 405 (what a real Envoy does with them:
tests/e2e/test_local_replies.py)."""

from __future__ import annotations

import json
import re
from typing import Any

import pytest

from sr_control.compiler.local_replies import ENVOY_REPLIES, OTHER
from tests.compiler.compiled import compile_text, listener, local_reply, route_for
from tests.conftest import ROOT

CONFIG = """
version: 2
deployments:
  d3: {provider: systemone, endpoint: "http://10.2.0.1:8100/v1/systemone", model: d3, schema: vllm-sr/5.0}
listeners:
  - {name: v40, port: 8801, apis: {systemone: {schema: vllm-sr/4.0}}}
  - {name: v50, port: 8802, apis: {systemone: {schema: vllm-sr/5.0}}}
"""


def mappers(name: str) -> list[dict[str, Any]]:
    hcm = listener(compile_text(CONFIG), name)["filter_chains"][0]["filters"][0]["typed_config"]
    return hcm["local_reply_config"]["mappers"]  # type: ignore[no-any-return]


def body(mapper: dict[str, Any]) -> dict[str, Any]:
    assert mapper["body_format_override"] == {
        "text_format_source": {"inline_string": "%LOCAL_REPLY_BODY%"},
        "content_type": "application/json",
    }
    return json.loads(mapper["body"]["inline_string"])  # type: ignore[no-any-return]


def test_every_envoy_reply_is_mapped_to_the_5_0_error_form_only_when_envoy_made_it() -> None:
    found = mappers("v50")
    assert len(found) == len(ENVOY_REPLIES) + 1  # and a last one for any other status
    for reply, mapper in zip((*ENVOY_REPLIES, OTHER), found):
        expression = mapper["filter"]["extension_filter"]["typed_config"]["expression"]
        # Only a reply with no content-type yet: the sidecar's and the routes' own JSON stay theirs.
        assert "!('content-type' in response.headers)" in expression
        assert (f"response.code == {reply.status}" if reply.status else "response.code >= 400") in expression
        doc = body(mapper)
        assert (
            doc["code"] == reply.code
            and doc["detail"] == {"error_type": reply.error_type, "message": reply.message}
            and "error" not in doc
        )


def test_a_4_0_listener_also_gets_4_0s_error_object() -> None:
    for reply, mapper in zip(ENVOY_REPLIES, mappers("v40")):
        doc = body(mapper)
        assert doc["error"]["code"] == doc["code"] == reply.code and doc["error"]["message"] == reply.message


def test_413_states_the_limit_and_503_the_retry() -> None:
    by_status = {r.status: m for r, m in zip(ENVOY_REPLIES, mappers("v50"))}
    assert body(by_status[413])["limit"] == 32 * 1024 * 1024
    headers = {h["header"]["key"]: h["header"]["value"] for h in by_status[503]["headers_to_add"]}
    assert headers == {"retry-after": "1", "retry-after-ms": "1000"}


@pytest.mark.parametrize("method", ["GET", "PUT", "DELETE"])
def test_a_system_one_path_takes_post_only(method: str) -> None:
    for path in ("/v1/systemone", "/v1/systemone/batch", "/v1/decisions"):
        status, doc = local_reply(route_for(compile_text(CONFIG), "v50", path, method=method))
        assert (
            status == 405 and doc["code"] == "method_not_allowed" and f"{path} takes POST" == doc["detail"]["message"]
        )
        assert "direct_response" not in route_for(compile_text(CONFIG), "v50", path, method="POST")


def test_the_errors_doc_lists_every_status_and_code_envoy_answers_with() -> None:
    text = (ROOT / "docs" / "systemone" / "errors.md").read_text()
    section = text[text.index("## Errors Envoy answers itself") :]
    rows = dict(re.findall(r"^\| (\d{3}) \| `([a-z_]+)`", section, re.M))
    assert rows == {str(r.status): r.code for r in ENVOY_REPLIES}
    assert f"`{OTHER.code}`" in section
