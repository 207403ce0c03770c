"""What a member gets from a multipart request: the internal form with every part inline.

The official SDK sends an attached image as ``multipart/form-data``; a vllm-sr/5.0 member takes
JSON only, so the image must reach it as ``format`` and ``data_base64``, whatever model name the
client gave (the member's own, none, or a pool's that the sidecar rewrites).
"""

from __future__ import annotations

import asyncio
import base64
import json
import time

import pytest

from sr_control.card import Card
from sr_control.extproc.auth import KeyRing
from sr_control.extproc.cards import CardBook, CardState
from sr_control.extproc.envoy import Forward
from sr_control.extproc.incoming import Incoming, Sidecar
from sr_control.extproc.metrics import Metrics
from sr_control.extproc.pool import Pool
from sr_control.extproc.settings import SidecarSettings
from sr_control.extproc.systemone_path import SystemOne
from sr_control.extproc.upstream import Http
from sr_control.extproc.versions import VersionStore
from tests.extproc.test_pieces import data_of

CONFIG = """
version: 2
deployments:
  d3: {provider: systemone, service: {name: d3-gpu, namespace: ml, port: 8100}, model: d3, schema: vllm-sr/5.0}
pools:
  vllm-sr/auto: {members: [d3]}
listeners:
  - {name: edge, port: 8801, apis: {systemone: {models: [vllm-sr/auto, d3]}}}
"""
PNG = b"\x89PNG\r\n\x1a\n" + bytes(range(32))
BOUNDARY = "b0"


def form(model: str | None) -> bytes:
    request = {
        "state": "see ⟦img-1⟧",
        "assets": {"⟦img-1⟧": {"type": "image", "part": "asset-0"}},
        "questions": {"broken": {"type": "noul", "instructions": "Is the screen broken?"}},
    }
    if model is not None:
        request = {"model": model, **request}
    return b"".join(
        [
            f'--{BOUNDARY}\r\nContent-Disposition: form-data; name="request"\r\n'.encode(),
            b"Content-Type: application/json\r\n\r\n",
            json.dumps(request).encode(),
            f'\r\n--{BOUNDARY}\r\nContent-Disposition: form-data; name="asset-0"; filename="a.png"\r\n'.encode(),
            b"Content-Type: image/png\r\n\r\n",
            PNG,
            f"\r\n--{BOUNDARY}--\r\n".encode(),
        ]
    )


def sent_to_member(model: str | None) -> bytes:
    data = data_of(CONFIG, "edge")
    http = Http()
    cards = CardBook(http)
    member = data.members["d3"]
    card = Card(frozenset({"noul"}), frozenset({"text", "image"}), contract="5.0.0")
    cards._states[cards._key(member)] = CardState(card, fetched_at=time.monotonic() + 1e9)  # as if just fetched
    sidecar = Sidecar(
        SidecarSettings(forwarding="envoy"), VersionStore(), cards, Pool(cards), http, KeyRing(), Metrics()
    )
    headers = {"content-type": f"multipart/form-data; boundary={BOUNDARY}"}
    incoming = Incoming("edge", "systemone", data, "POST", "/v1/systemone", headers, "req-1")
    out, _ = asyncio.run(SystemOne(sidecar).request(incoming, form(model)))
    assert isinstance(out, Forward) and out.body is not None, out
    return out.body


@pytest.mark.parametrize("model", ["d3", None, "vllm-sr/auto"])
def test_the_member_gets_each_part_inline_whatever_model_the_client_named(model: str | None) -> None:
    asset = json.loads(sent_to_member(model))["assets"]["⟦img-1⟧"]
    assert asset == {"type": "image", "format": "png", "data_base64": base64.b64encode(PNG).decode()}
