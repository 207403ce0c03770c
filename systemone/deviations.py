"""Deviations: declared, tested rewriters applied after a client codec (seed 000).

A deviation fixes one known way an upstream departs from its schema; a deployment lists the ones
it needs (``deviations: [state_text]``), and each must apply to the deployment's schema (see
``schemas.DEVIATIONS``). The first is ``state_text``: an enterprise LLM gateway that refuses
object states is declared ``systemone/0.2`` with ``[state_text]``, and gets every object or
array state as its exact ``json.dumps(state, ensure_ascii=False)`` text. Decision 3 renders that
text identically and Vela parses it back (``families.model_state``), so answers do not change.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

from systemone import schemas
from systemone.jsontext import JsonObject, dumps

if TYPE_CHECKING:
    from systemone.client import WireCall, WireReply


def state_text(state: Any) -> Any:
    """An object or array state as the text Python's json.dumps writes for it; text unchanged.

    Numbers are written as Python would after reading them (``1e3`` -> ``1000.0``), which is
    what "the exact json.dumps text" of the state a client sent means.
    """
    if isinstance(state, (dict, tuple, list)):
        return dumps(state, ensure_ascii=False, numbers="python")
    return state


def _state_text_request(call: WireCall) -> tuple[WireCall, list[str]]:
    docs = call.doc["requests"] if call.batch else {"": call.doc}
    changed = [name for name, doc in docs.items() if isinstance(doc.get("state"), (dict, tuple))]
    if not changed:
        return call, []
    if call.batch:
        requests = JsonObject((n, _with_text(d)) for n, d in call.doc["requests"].items())
        doc = JsonObject((k, requests if k == "requests" else v) for k, v in call.doc.items())
    else:
        doc = _with_text(call.doc)
    names = changed if call.batch else [n for n in call.items if n]
    which = f"request{'s' if len(names) > 1 else ''} {', '.join(repr(n) for n in names)}" if names else "the request"
    return replace(call, doc=doc), [f"state_text: sent the state of {which} as JSON text"]


def _with_text(doc: JsonObject) -> JsonObject:
    return JsonObject((k, state_text(v) if k == "state" else v) for k, v in doc.items())


@dataclass(frozen=True, slots=True)
class Deviation:
    id: str
    applies_to: frozenset[str]
    rewrite_request: Callable[[WireCall], tuple[WireCall, list[str]]]
    rewrite_reply: Callable[[WireReply], WireReply] = lambda reply: reply

    def applies(self, schema_id: str) -> bool:
        return schema_id in self.applies_to


DEVIATIONS: Mapping[str, Deviation] = MappingProxyType(
    {"state_text": Deviation("state_text", schemas.DEVIATIONS["state_text"].applies_to, _state_text_request)}
)
