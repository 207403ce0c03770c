"""Format 1 -> 2: listener-level ``models`` and ``systemone`` move into the ``apis`` map.

Format 1 listeners offered the four LLM APIs (chat_completions, responses, messages, images) for
the LLM models in ``models`` (every LLM model when ``models`` was absent) and, when
``systemone`` was set (``true`` or ``{max_deadline_ms: N}``), the System One API in the 4.0
contract for the decision models in ``models`` (every decision model when absent). The router
forwards an LLM request as it is, so a model was only ever answerable on the API of its own
``api_format``: the migrated listener lists each model under that API alone (an API none of
the listed models speaks is left out), and keeps ``schema: vllm-sr/4.0`` so its System One
clients see no change. A listener with neither field is left as it is: no ``apis`` map still
means the four LLM APIs, each for the LLM models of its format.
"""

from __future__ import annotations

from typing import Any

from ruamel.yaml.comments import CommentedMap, CommentedSeq

FROM_VERSION = 1
TO_VERSION = 2
SUMMARY = "move listener-level models and systemone into apis"

LLM_APIS = ("chat_completions", "responses", "messages", "images")
_ALIASES = {"openai": "chat_completions", "anthropic": "messages"}


def apply(doc: Any) -> list[str]:
    notes = []
    decision = _decision_models(doc)
    formats = _llm_formats(doc)
    for i, listener in enumerate(doc.get("listeners") or []):
        if not isinstance(listener, CommentedMap):
            continue
        if "models" not in listener and "systemone" not in listener:
            continue
        if "apis" in listener:
            raise ValueError(f"listeners[{i}] has both format-1 fields and an apis map")
        notes.append(_migrate_listener(listener, decision, formats, i))
    return notes


def _llm_formats(doc: Any) -> dict[str, str]:
    """Each provider model's API, aliases resolved (``api_format`` defaults to chat_completions)."""
    providers = doc.get("providers") or {}
    out: dict[str, str] = {}
    for model in providers.get("models") or [] if isinstance(providers, dict) else []:
        if isinstance(model, dict) and "name" in model:
            fmt = str(model.get("api_format", "chat_completions"))
            out[str(model["name"])] = _ALIASES.get(fmt, fmt)
    return out


def _decision_models(doc: Any) -> set[str]:
    names = set((doc.get("pools") or {}).keys())
    for dep in (doc.get("deployments") or {}).values():
        if isinstance(dep, dict) and "model" in dep:
            names.add(str(dep["model"]))
    providers = doc.get("providers") or {}
    for model in providers.get("models") or [] if isinstance(providers, dict) else []:
        if isinstance(model, dict) and str(model.get("api_format", "")) == "systemone":
            names.add(str(model.get("name")))
    return names


def _flow_map(items: list[tuple[str, Any]]) -> CommentedMap:
    m = CommentedMap(items)
    m.fa.set_flow_style()
    return m


def _flow_seq(items: list[Any]) -> CommentedSeq:
    s = CommentedSeq(items)
    s.fa.set_flow_style()
    return s


def _subseq(models: Any, picks: list[int]) -> CommentedSeq:
    """The picked items of ``models`` as a new flow list that remembers where each item was,
    so a problem found while reading a format-1 file points at the user's own line."""
    seq = _flow_seq([models[i] for i in picks])
    for j, i in enumerate(picks):
        try:
            seq.lc.add_kv_line_col(j, list(models.lc.item(i)))
        except (AttributeError, KeyError, TypeError):
            pass
    return seq


def _place(listener: CommentedMap, key: str, at_key: str) -> None:
    """Give the new ``apis`` map (and its entries) the position of the field it replaces."""
    try:
        line, col = listener.lc.key(at_key)
    except (KeyError, TypeError):
        return
    listener.lc.add_kv_line_col(key, [line, col, line, col])
    apis = listener[key]
    apis.lc.line, apis.lc.col = line, col
    for api, settings in apis.items():
        apis.lc.add_kv_line_col(api, [line, col, line, col])
        settings.lc.line, settings.lc.col = line, col
        for name in settings:
            settings.lc.add_kv_line_col(name, [line, col, line, col])


def _migrate_listener(listener: CommentedMap, decision: set[str], formats: dict[str, str], index: int) -> str:
    keys = list(listener.keys())
    at = min(keys.index(k) for k in ("models", "systemone") if k in listener)
    models = listener.get("models")
    systemone = listener.get("systemone")

    apis = CommentedMap()
    for api in LLM_APIS:
        if models is None:
            apis[api] = _flow_map([])
            continue
        # A name of no known format is kept under every API, so validation reports it where it is.
        picks = [i for i, m in enumerate(models) if str(m) not in decision and formats.get(str(m), api) == api]
        if picks:
            apis[api] = _flow_map([("models", _subseq(models, picks))])
    served_systemone = (
        systemone is not None
        and systemone is not False
        and not (isinstance(systemone, dict) and systemone.get("enabled") is False)
    )
    if served_systemone:
        settings: list[tuple[str, Any]] = [("schema", "vllm-sr/4.0")]
        if models is not None:
            settings.append(("models", _subseq(models, [i for i, m in enumerate(models) if str(m) in decision])))
        if isinstance(systemone, dict):
            for key, value in systemone.items():
                if key != "enabled":
                    settings.append((key, value))
        apis["systemone"] = _flow_map(settings)

    eol, lines = _comments(listener, ("models", "systemone"))
    for key in ("models", "systemone"):
        listener.pop(key, None)
    listener.insert(at, "apis", apis)
    _place(listener, "apis", at_key=keys[at])
    # Comments written on or under the removed fields stay with the listener, above apis.
    if lines:
        listener.yaml_set_comment_before_after_key("apis", before="\n".join(lines), indent=listener.lc.col or 0)
    if eol:
        listener.yaml_add_eol_comment(eol, "apis")
    what = "LLM APIs" + (" and systemone (vllm-sr/4.0)" if served_systemone else "")
    return f"listeners[{index}] ({listener.get('name')}): models/systemone moved into apis ({what})"


def _comments(listener: CommentedMap, keys: tuple[str, ...]) -> tuple[str | None, list[str]]:
    """The end-of-line comment of the first removed key, and every other comment line under them."""
    eol: str | None = None
    lines: list[str] = []
    for key in keys:
        if key not in listener:
            continue
        texts = _token_texts(listener.ca.items.pop(key, None)) + _subtree_texts(listener[key])
        for text in texts:
            same_line = not text.startswith("\n") and eol is None and not lines
            for n, line in enumerate(text.split("\n")):
                line = line.strip()
                if not line.startswith("#"):
                    continue
                body = line[1:].strip()
                if body == eol or body in lines:
                    continue  # ruamel can hold one comment on both a key and its flow value
                if same_line and n == 0:
                    eol = body
                else:
                    lines.append(body)
    return eol, lines


def _token_texts(entry: Any) -> list[str]:
    if entry is None:
        return []
    if isinstance(entry, list):
        return [t for item in entry for t in _token_texts(item)]
    value = getattr(entry, "value", None)
    return [value] if isinstance(value, str) else []


def _subtree_texts(node: Any) -> list[str]:
    texts: list[str] = []
    ca = getattr(node, "ca", None)
    if ca is not None:
        texts += _token_texts(ca.comment) + _token_texts(list(ca.items.values())) + _token_texts(ca.end)
    if isinstance(node, dict):
        for value in node.values():
            texts += _subtree_texts(value)
    elif isinstance(node, list):
        for value in node:
            texts += _subtree_texts(value)
    return texts
