"""``vllm-sr route``: what the Decide path would do with an LLM request, against live decision models.

It reads the request as the sidecar will, builds the System One request(s) of
``sr_control.decide.request``, sends each to a member of its decision model over HTTP with the
deployment's client codec, evaluates the routes, and prints the whole way: the requests sent,
the answers (or why each is unknown), every route's outcome and the model chosen. It never calls
the LLM.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Annotated, Any
from urllib.parse import urlsplit

import httpx
import typer

from sr_control.apis import REGISTRY as APIS
from sr_control.card import Card, card_of, listing_entry
from sr_control.cli.config import Format
from sr_control.cli.errors import EXIT_INVALID, EXIT_OK, EXIT_UNREADABLE, fail
from sr_control.config import load as loader
from sr_control.config.catalog import catalog
from sr_control.config.errors import field_path
from sr_control.config.explain import offered_apis
from sr_control.config.model import RouterConfig
from sr_control.decide.cards import card_problems, declared_cards, members_of
from sr_control.decide.request import EMPTY, DecideCall, NotAConversation, build_calls, parts_of, read_answers
from sr_control.decide.rewrite import response_headers
from sr_control.decide.rules import Answer, Decision, compile_plan, decide, keyword_answers
from systemone import REGISTRY, Policy, ProtocolError, Target, WireReply
from systemone.ir import ItemResult
from systemone.jsontext import loads, plain


def route(
    request: Annotated[Path, typer.Argument(help="The LLM request body (JSON); - reads standard input.")],
    config: Annotated[Path, typer.Option("--config", "-c", help="The router config.", show_default=False)],
    listener: Annotated[
        str | None, typer.Option("--listener", "-l", help="Check that this listener offers the request's model.")
    ] = None,
    format: Annotated[Format, typer.Option("--format", "-f", help="text for people, json for programs.")] = Format.text,
) -> None:
    """Show what the Decide path would do with an LLM request.

    Prints the System One request it sends, the answers, the route that fires and the model,
    asking the live decision models (never the LLM).

    Exit 0 with a model chosen; 1 when the Decide path refuses the request (not a virtual
    model, not a conversation, no route fired and no default); 2 when a file cannot be used.
    """
    cfg = loader.load(config)
    body = _body(request)
    model = body.get("model")
    if not isinstance(model, str) or model not in cfg.virtual_models:
        known = ", ".join(cfg.virtual_models) or "none defined"
        raise fail(f"{request}: model {model!r} is not a virtual model of {config} (virtual models: {known})")
    api = catalog(cfg).formats.get(model)
    if api is None:
        raise fail(f"{config}: virtual model {model!r} routes to no LLM model", EXIT_INVALID)
    if listener is not None:
        _check_listener(cfg, listener, model, api)
    plan = compile_plan(cfg).virtual_models[model]
    try:
        parts = parts_of(api, body)
    except NotAConversation as exc:
        raise fail(f"{request}: not a {api} request: {exc}") from None
    answers: dict[str, Answer] = keyword_answers(plan, parts.text)
    planned = build_calls(plan, parts)
    _check_cards(cfg, config, {m for call in planned for m in members_of(cfg, call.model)})
    calls = []
    for call in planned:
        report, result, failure = _ask(cfg, call)
        answers |= read_answers(call, result, failure)
        calls.append(report)
    decision = decide(plan, answers)
    shown = {
        "virtual_model": model,
        "api": api,
        "listener": listener,
        "parts": dict(parts.text) | ({"media": [m.kind for m in parts.media]} if parts.media else {}),
        "calls": calls,
        "signals": {name: _answer_doc(plan.signals[name].on_unknown, a) for name, a in answers.items()},
        "routes": [{"route": t.route, "outcome": t.outcome, "unknown": list(t.unknown)} for t in decision.trace],
        "decision": _decision_doc(decision),
    }
    if format is Format.json:
        typer.echo(json.dumps(shown, indent=2, ensure_ascii=False))
    else:
        typer.echo(_text(shown), nl=False)
    raise typer.Exit(EXIT_OK if decision.models else EXIT_INVALID)


def _body(path: Path) -> dict[str, Any]:
    try:
        text = sys.stdin.read() if str(path) == "-" else path.read_text(encoding="utf-8")
    except OSError as exc:
        raise fail(f"{path}: error: cannot read: {exc.strerror or exc}", EXIT_UNREADABLE) from None
    try:
        doc = json.loads(text)
    except ValueError as exc:
        raise fail(f"{path}: error: not JSON: {exc}", EXIT_UNREADABLE) from None
    if not isinstance(doc, dict):
        raise fail(f"{path}: error: an LLM request is a JSON object", EXIT_UNREADABLE)
    return doc


def _check_listener(cfg: RouterConfig, name: str, model: str, api: str) -> None:
    found = next((lst for lst in cfg.listeners if lst.name == name), None)
    if found is None:
        known = ", ".join(lst.name for lst in cfg.listeners) or "none defined"
        raise fail(f"no listener {name!r} (listeners: {known})", EXIT_UNREADABLE)
    models = catalog(cfg)
    for api_name, settings in offered_apis(found):
        if api_name != api:
            continue
        served = settings.models if settings.models is not None else models.serving(APIS.get(api_name))
        if model in served:
            return
    raise fail(f"listener {name!r} does not offer {model!r} on {api}")


def _check_cards(cfg: RouterConfig, path: Path, members: set[str]) -> None:
    """Every signal against the cards the file declares and those the members publish now, as
    the sidecar will check them when it reads a card: a signal no member can answer is refused
    here, one line each, before anything is asked."""
    cards: dict[str, Card | None] = dict(declared_cards(cfg))
    for name in sorted(members - set(cards)):
        dep = cfg.deployments[name]
        if dep.schema_ != "vllm-sr/5.0" or dep.endpoint is None:
            continue
        url = urlsplit(dep.endpoint)
        key = os.environ.get(dep.api_key_env) if dep.api_key_env else None
        headers = {"authorization": f"Bearer {key}"} if key else {}
        try:
            listing = httpx.get(f"{url.scheme}://{url.netloc}/v1/models", headers=headers, timeout=2.0).json()
        except (httpx.HTTPError, ValueError):
            continue  # not known: not judged (the call itself will say what is wrong)
        entry = listing_entry(listing, dep.model)
        cards[name] = card_of(entry.get("card")) if entry is not None else None
    problems = card_problems(cfg, cards)
    if problems:
        for loc, line in problems:
            typer.echo(f"{path}: error: {field_path(loc)}: {line}", err=True)
        raise typer.Exit(EXIT_INVALID)


def _ask(cfg: RouterConfig, call: DecideCall) -> tuple[dict[str, Any], ItemResult | None, str | None]:
    """The call sent to the first member of its model that answers (as the sidecar fails over)."""
    report: dict[str, Any] = {"model": call.model, "signals": list(call.signals), "deadline_ms": call.deadline_ms}
    if call.empty:
        report["error"] = EMPTY
        return report, None, EMPTY
    members = members_of(cfg, call.model)
    if not members:
        report["error"] = f"no deployment answers for {call.model!r}"
        return report, None, report["error"]
    failure = "not called"
    for member in members:
        dep = cfg.deployments[member]
        assert dep.endpoint is not None
        url = urlsplit(dep.endpoint)
        codec = REGISTRY.client(dep.schema_)
        target = Target(dep.schema_, dep.model, tuple(dep.deviations), dep.max_concurrency, url.path or "/v1/systemone")
        try:
            wire_plan = codec.plan(call.request, target, Policy(call.deadline_ms))
        except ProtocolError as exc:
            failure = f"{member}: {exc.info.message}"
            continue
        wire = wire_plan.calls[0]
        headers = dict(wire.headers)
        key = os.environ.get(dep.api_key_env) if dep.api_key_env else None
        if key:
            headers["authorization"] = f"Bearer {key}"
        address = f"{url.scheme}://{url.netloc}{wire.path}"
        report |= {"deployment": member, "url": address, "request": plain(loads(wire.body))}
        try:
            got = httpx.post(address, content=wire.body, headers=headers, timeout=call.deadline_ms / 1000)
        except httpx.TimeoutException:
            failure = f"{member}: no answer within {call.deadline_ms} ms"
            report["error"] = failure
            return report, None, failure  # the deadline is spent: no other member is tried
        except httpx.HTTPError as exc:
            failure = f"{member}: {type(exc).__name__}: {exc}"
            report["error"] = failure
            continue
        report["status"] = got.status_code
        try:
            results = codec.decode_reply(
                wire_plan, wire, WireReply(got.status_code, got.content, tuple(got.headers.items()))
            )
            result = codec.assemble(wire_plan, results).items[""]
        except ProtocolError as exc:
            report["error"] = f"{member}: {exc.info.message}"
            return report, None, report["error"]
        report.pop("error", None)
        if result.error is not None:
            report["error"] = f"{result.error.code}: {result.error.message}"
        return report, result, None
    report["error"] = failure
    return report, None, failure


def _answer_doc(policy: bool | str, answer: Answer) -> dict[str, Any]:
    value: Any = sorted(answer.value) if isinstance(answer.value, frozenset) else answer.value
    out: dict[str, Any] = {"type": answer.kind, "answer": value}
    if answer.unknown is not None:
        out |= {"unknown": answer.unknown, "on_unknown": policy}
    return out


def _decision_doc(decision: Decision) -> dict[str, Any]:
    rewrite = decision.rewrite.model_dump(exclude_none=True, exclude_defaults=True) if decision.rewrite else None
    model = decision.model
    return {
        "route": decision.route,
        "models": list(decision.models),
        "model": model,
        "rewrite": rewrite or None,
        "judge": decision.judge,
        "headers": dict(response_headers(decision, model)) if model else {},
    }


def _text(shown: Mapping[str, Any]) -> str:
    lines = [f"{shown['virtual_model']} ({shown['api']})"]
    for call in shown["calls"]:
        where = f" via {call['deployment']} ({call['url']})" if "deployment" in call else ""
        status = f": {call['status']}" if "status" in call else ""
        lines.append(f"call {call['model']}{where}{status}: {', '.join(call['signals'])}")
        if call.get("error"):
            lines.append(f"  error: {call['error']}")
    for name, doc in shown["signals"].items():
        if "unknown" in doc:
            lines.append(f"  {name} ({doc['type']}): unknown ({doc['unknown']}); on_unknown {doc['on_unknown']}")
        else:
            lines.append(f"  {name} ({doc['type']}): {doc['answer']}")
    for t in shown["routes"]:
        unknown = f" (unknown: {', '.join(t['unknown'])})" if t["unknown"] else ""
        lines.append(f"route {t['route']}: {t['outcome']}{unknown}")
    d = shown["decision"]
    if d["model"] is None:
        lines.append("decision: no route fired and there is no default: the API's error")
    else:
        lines.append(f"decision: {d['route'] or '(default)'} -> {' then '.join(d['models'])}")
    return "\n".join(lines) + "\n"
