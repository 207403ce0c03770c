"""How each model family turns a state into model input, as the extension set declares it.

Like an LLM's chat template, the rendering is a model detail behind the API; what the protocol
layer pins is the part two schemas must agree on: the state a family reads. ``json_text``
families (Decision) read an object or array state as its json.dumps text; ``parse_text`` families
(Vela) read a text that holds a JSON object or array as that value. Either way an object state
and its ``state_text`` give the family the same input, which the tests check for every family.
"""

from __future__ import annotations

from typing import Any

from systemone.deviations import state_text
from systemone.generated.runtime_fields import FAMILIES
from systemone.jsontext import JsonTextError, loads, plain


def model_state(family: str, state: Any) -> Any:
    """The state as ``family`` reads it: a string, or plain JSON values."""
    reads = FAMILIES[family]["reads_state"]
    if reads == "json_text":
        return state_text(state)
    if reads == "parse_text" and isinstance(state, str) and state[:1] in ("{", "["):
        try:
            parsed = loads(state)
        except JsonTextError:
            return state
        return plain(parsed)
    return plain(state)


def reads_both(family: str) -> bool:
    """Whether the family takes both an object state and a text state."""
    return FAMILIES[family]["reads_state"] in ("json_text", "parse_text")
