"""Generated router configs and the edits an operator makes to them, as file text.

A config is drawn as entries (providers' models, deployments, pools, listeners), each written
in block or flow style, with comments and blank lines here and there; an edit changes, adds or
removes one entry (which may leave a dangling reference: the checks must then say so). Most
configs drawn are valid, so the compiler sees them; the rest exercise the problems.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from typing import Any

import yaml
from hypothesis import strategies as st

LLM_MODELS = (("llm-a", "chat_completions"), ("llm-b", "responses"), ("llm-c", "messages"), ("so-p", "systemone"))
URLS = ("http://10.0.0.1:8000/v1", "http://llm.local:8000/openai/v1", "https://api.example.com/v1")
DEPLOYMENTS = ("d0", "d1", "d2", "d3")
POOLS = ("pool-0", "pool-1", "vllm-sr/auto")
LISTENERS = tuple(f"l{i}" for i in range(8))


@dataclass
class Doc:
    """A config as entries, each with its style: (flow?, comment line above it?, data)."""

    providers: list[tuple[bool, bool, dict[str, Any]]] = field(default_factory=list)
    deployments: dict[str, tuple[bool, bool, dict[str, Any]]] = field(default_factory=dict)
    pools: dict[str, tuple[bool, bool, dict[str, Any]]] = field(default_factory=dict)
    listeners: list[tuple[bool, bool, dict[str, Any]]] = field(default_factory=list)

    def text(self) -> str:
        out = ["version: 2"]
        if self.providers:
            out += ["providers:", "  models:"]
            out += [_entry(e, "    ", "- ") for e in self.providers]
        if self.deployments:
            out.append("deployments:")
            out += [_entry(e, "  ", f"{name}: ") for name, e in self.deployments.items()]
        if self.pools:
            out.append("pools:")
            out += [_entry(e, "  ", f"{_key(name)}: ") for name, e in self.pools.items()]
        if self.listeners:
            out.append("listeners:")
            out += [_entry(e, "  ", "- ") for e in self.listeners]
        return "\n".join(out) + "\n"


def _key(name: str) -> str:
    return yaml.safe_dump(name).removesuffix("\n...\n").strip()


def _entry(entry: tuple[bool, bool, dict[str, Any]], indent: str, lead: str) -> str:
    flow, comment, data = entry
    lines = [f"{indent}# {data.get('name', 'entry')}"] if comment else []
    if flow:
        lines.append(indent + lead + yaml.safe_dump(data, default_flow_style=True, width=10**6).strip())
    else:
        body = yaml.safe_dump(data, default_flow_style=False, sort_keys=False, width=10**6).rstrip("\n").split("\n")
        if lead == "- ":
            lines.append(indent + "- " + body[0])
            lines += [indent + "  " + b for b in body[1:]]
        else:
            lines.append(indent + lead.rstrip())
            lines += [indent + "  " + b for b in body]
    return "\n".join(lines)


styles = st.tuples(st.booleans(), st.integers(0, 4).map(lambda n: n == 0))


@st.composite
def provider(draw: st.DrawFn, name: str, api_format: str) -> dict[str, Any]:
    data: dict[str, Any] = {"name": name, "api_format": api_format, "endpoints": [draw(st.sampled_from(URLS))]}
    if api_format == "systemone":
        data["endpoints"] = ["http://10.0.0.9:8100/v1/systemone"]
        data["schema"] = "systemone/0.2"
    elif draw(st.integers(0, 3)) == 0:
        data["api_key_env"] = "LLM_KEY"
    return data


@st.composite
def deployment(draw: st.DrawFn, name: str) -> dict[str, Any]:
    data: dict[str, Any] = {"provider": "systemone"}
    if draw(st.integers(0, 3)) == 0:
        data["service"] = {"name": f"svc-{name}", "port": 8100}
    else:
        data["endpoint"] = f"http://10.0.1.{DEPLOYMENTS.index(name) + 1}:8100/v1/systemone"
    data["model"] = draw(st.sampled_from((f"m-{name}", "shared")))
    data["schema"] = draw(st.sampled_from(("vllm-sr/5.0", "systemone/0.2")))
    data["max_concurrency"] = draw(st.integers(1, 64))
    return data


@st.composite
def listener(draw: st.DrawFn, name: str, port: int, decision: list[str], llm: dict[str, str]) -> dict[str, Any]:
    data: dict[str, Any] = {"name": name, "address": "127.0.0.1", "port": port}
    if draw(st.integers(0, 4)) == 0:
        return data  # no apis map: the LLM APIs
    apis: dict[str, Any] = {}
    if decision and draw(st.booleans()):
        settings: dict[str, Any] = {}
        if draw(st.booleans()):
            settings["schema"] = draw(st.sampled_from(("vllm-sr/5.0", "vllm-sr/4.0")))
        if draw(st.booleans()):
            settings["max_deadline_ms"] = draw(st.integers(100, 120_000))
        if draw(st.booleans()):
            settings["models"] = draw(st.lists(st.sampled_from(decision), min_size=1, max_size=2, unique=True))
        apis["systemone"] = settings
    for api in ("chat_completions", "responses", "messages"):
        if draw(st.booleans()):
            mine = [m for m, f in llm.items() if f == api]
            apis[api] = {"models": mine[:1]} if mine and draw(st.booleans()) else {}
    data["apis"] = apis
    return data


def _decision_models(doc: Doc) -> list[str]:
    names = [d["model"] for _, _, d in doc.deployments.values()] + list(doc.pools)
    return sorted(set(names))


def _llm_models(doc: Doc) -> dict[str, str]:
    return {d["name"]: d["api_format"] for _, _, d in doc.providers if d["api_format"] != "systemone"}


@st.composite
def docs(draw: st.DrawFn) -> Doc:
    doc = Doc()
    for name, api_format in draw(st.lists(st.sampled_from(LLM_MODELS), unique=True, max_size=4)):
        doc.providers.append((*draw(styles), draw(provider(name, api_format))))
    for name in draw(st.lists(st.sampled_from(DEPLOYMENTS), unique=True, min_size=1, max_size=4)):
        doc.deployments[name] = (*draw(styles), draw(deployment(name)))
    for name in draw(st.lists(st.sampled_from(POOLS), unique=True, max_size=2)):
        members = draw(st.lists(st.sampled_from(sorted(doc.deployments)), unique=True, min_size=1, max_size=3))
        doc.pools[name] = (*draw(styles), {"members": members})
    for i, name in enumerate(draw(st.lists(st.sampled_from(LISTENERS), unique=True, min_size=1, max_size=5))):
        doc.listeners.append((*draw(styles), draw(listener(name, 10000 + i, _decision_models(doc), _llm_models(doc)))))
    return doc


@st.composite
def edited(draw: st.DrawFn, doc: Doc) -> Doc:
    """``doc`` with one entry changed, added or removed (a copy)."""
    doc = copy.deepcopy(doc)
    kind = draw(
        st.sampled_from(
            (
                "listener",
                "listener",
                "listener",
                "add listener",
                "remove listener",
                "deployment",
                "add deployment",
                "remove deployment",
                "pool",
                "provider",
            )
        )
    )
    if kind == "listener" and doc.listeners:
        i = draw(st.integers(0, len(doc.listeners) - 1))
        flow, comment, data = doc.listeners[i]
        port = data["port"] if draw(st.booleans()) else draw(st.integers(20000, 20100))
        doc.listeners[i] = (flow, comment, draw(listener(data["name"], port, _decision_models(doc), _llm_models(doc))))
    elif kind == "add listener":
        free = [n for n in LISTENERS if n not in {d["name"] for _, _, d in doc.listeners}]
        if free:
            at = draw(st.integers(0, len(doc.listeners)))
            new = draw(listener(free[0], 11000 + len(free), _decision_models(doc), _llm_models(doc)))
            doc.listeners.insert(at, (*draw(styles), new))
    elif kind == "remove listener" and len(doc.listeners) > 1:
        del doc.listeners[draw(st.integers(0, len(doc.listeners) - 1))]
    elif kind == "deployment":
        name = draw(st.sampled_from(sorted(doc.deployments)))
        flow, comment, _ = doc.deployments[name]
        doc.deployments[name] = (flow, comment, draw(deployment(name)))
    elif kind == "add deployment":
        free = [n for n in DEPLOYMENTS if n not in doc.deployments]
        if free:
            items = list(doc.deployments.items())
            items.insert(draw(st.integers(0, len(items))), (free[0], (*draw(styles), draw(deployment(free[0])))))
            doc.deployments = dict(items)
    elif kind == "remove deployment" and len(doc.deployments) > 1:
        del doc.deployments[draw(st.sampled_from(sorted(doc.deployments)))]  # a pool may now name it
    elif kind == "pool" and doc.pools:
        name = draw(st.sampled_from(sorted(doc.pools)))
        flow, comment, _ = doc.pools[name]
        members = draw(st.lists(st.sampled_from(DEPLOYMENTS), unique=True, min_size=1, max_size=3))  # perhaps dangling
        doc.pools[name] = (flow, comment, {"members": members})
    elif kind == "provider" and doc.providers:
        i = draw(st.integers(0, len(doc.providers) - 1))
        flow, comment, data = doc.providers[i]
        doc.providers[i] = (flow, comment, draw(provider(data["name"], data["api_format"])))
    return doc


@st.composite
def edit_series(draw: st.DrawFn) -> list[str]:
    """A config's text, then the texts of 1 to 4 edits made one after the other."""
    doc = draw(docs())
    texts = [doc.text()]
    for _ in range(draw(st.integers(1, 4))):
        doc = draw(edited(doc))
        texts.append(doc.text())
    return texts


_LINES = (
    "",
    "# a comment",
    "  - {name: lx, port: 1}",
    "  - name: ly",
    "    port: 2",
    "  dx: {provider: systemone}",
    "listeners:",
    "pools:",
    "  - {name: broken",
    "    - nested",
    "  key: [1, 2",
    "\tport: 3",
    "  &a {x: 1}",
    "  - *a",
)


@st.composite
def text_edits(draw: st.DrawFn, text: str) -> str:
    """``text`` with a few lines inserted, removed or replaced, valid YAML or not."""
    lines = text.split("\n")
    for _ in range(draw(st.integers(1, 3))):
        at = draw(st.integers(0, len(lines)))
        op = draw(st.sampled_from(("insert", "remove", "replace")))
        if op == "insert":
            lines.insert(at, draw(st.sampled_from(_LINES)))
        elif at < len(lines):
            if op == "remove":
                del lines[at]
            else:
                lines[at] = draw(st.sampled_from(_LINES))
    return "\n".join(lines)
