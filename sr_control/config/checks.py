"""Rules that need the whole file: names, aliases, schemas and cross-references.

Each check yields ``(loc, message)`` pairs and never stops at the first problem. Checks run on
the parts of the file that parsed; ``ignored`` holds the names of parts that did not, so a
reference to a broken deployment is not reported a second time as unknown.
"""

from __future__ import annotations

import ipaddress
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from sr_control.apis import REGISTRY, UnknownApiError
from sr_control.config.catalog import ModelCatalog, api_kind, catalog
from sr_control.config.errors import Loc
from sr_control.config.model import ApiSettings, RouterConfig
from sr_control.decide import checks as decide_checks
from systemone import schemas
from systemone.generated.fields import PRESETS
from systemone.generated.strip import REFUSE

Finding = tuple[Loc, str]


@dataclass(frozen=True)
class Context:
    config: RouterConfig
    ignored: frozenset[str] = field(default_factory=frozenset)
    # Positions of parts that parsed, in the file's own indexing (broken items are skipped).
    listener_index: tuple[int, ...] = ()
    provider_index: tuple[int, ...] = ()


Check = Callable[[Context], Iterator[Finding]]


def _supported(ids: tuple[str, ...]) -> str:
    return ", ".join(sorted(ids))


def check_provider_models(ctx: Context) -> Iterator[Finding]:
    seen: set[str] = set()
    for i, model in zip(ctx.provider_index, ctx.config.providers.models):
        loc: Loc = ("providers", "models", i)
        if model.name in seen:
            yield loc + ("name",), f"model {model.name!r} is defined more than once"
        seen.add(model.name)
        try:
            api = REGISTRY.get(model.api_format)
        except UnknownApiError as exc:
            yield loc + ("api_format",), str(exc)
            continue
        if model.schema_ is None:
            continue
        if not api.versioned:
            yield loc + ("schema",), f"{api.name} is unversioned; only systemone models take a schema"
        elif model.schema_ not in schemas.SCHEMAS:
            yield (
                loc + ("schema",),
                f"unknown schema {model.schema_!r} (supported: {_supported(schemas.UPSTREAM_SCHEMAS)})",
            )
        elif model.schema_ not in schemas.UPSTREAM_SCHEMAS:
            yield (
                loc + ("schema",),
                (
                    f"{model.schema_} is served to clients, not spoken to upstreams (upstream schemas: "
                    f"{_supported(schemas.UPSTREAM_SCHEMAS)})"
                ),
            )


def check_deployments(ctx: Context) -> Iterator[Finding]:
    for name, dep in ctx.config.deployments.items():
        loc: Loc = ("deployments", name)
        if dep.schema_ not in schemas.SCHEMAS:
            yield (
                loc + ("schema",),
                f"unknown schema {dep.schema_!r} (supported: {_supported(schemas.UPSTREAM_SCHEMAS)})",
            )
            continue
        if dep.schema_ not in schemas.UPSTREAM_SCHEMAS:
            yield (
                loc + ("schema",),
                (
                    f"{dep.schema_} is served to clients, not spoken to upstreams (upstream schemas: "
                    f"{_supported(schemas.UPSTREAM_SCHEMAS)})"
                ),
            )
        seen: set[str] = set()
        for j, dev in enumerate(dep.deviations):
            if dev in seen:
                yield loc + ("deviations", j), f"deviation {dev!r} is listed twice"
            seen.add(dev)
            if dev not in schemas.DEVIATIONS:
                yield (
                    loc + ("deviations", j),
                    f"unknown deviation {dev!r} (supported: {_supported(tuple(schemas.DEVIATIONS))})",
                )
            elif dep.schema_ not in schemas.DEVIATIONS[dev].applies_to:
                fits = _supported(tuple(schemas.DEVIATIONS[dev].applies_to))
                yield (
                    loc + ("deviations", j),
                    f"deviation {dev!r} does not apply to {dep.schema_} (it applies to {fits})",
                )


def check_systemone_02_capabilities(ctx: Context) -> Iterator[Finding]:
    """What systemone/0.2 cannot carry (span, set and track questions, video, span presets) is
    refused at load, one line per need, naming the rule and the deployment."""
    for name, dep in ctx.config.deployments.items():
        if dep.schema_ != "systemone/0.2" or dep.capabilities is None:
            continue
        loc: Loc = ("deployments", name, "capabilities")
        rule = f"deployment {name!r} speaks systemone/0.2, which"
        for j, kind in enumerate(dep.capabilities.question_types):
            if kind in REFUSE["question_type"]:
                yield (
                    loc + ("question_types", j),
                    f"{rule} cannot carry {kind} questions (0.2 asks noul, choice, score and box questions)",
                )
        for j, modality in enumerate(dep.capabilities.modalities):
            if modality in REFUSE["asset_type"]:
                yield loc + ("modalities", j), f"{rule} cannot carry {modality} assets (0.2 takes text and images)"
        for j, preset in enumerate(dep.capabilities.presets):
            preset_kind = PRESETS.get(preset, {}).get("type")
            if preset_kind in REFUSE["question_type"]:
                yield (
                    loc + ("presets", j),
                    (
                        f"{rule} cannot carry preset {preset!r}: it needs {preset_kind} questions (0.2 presets "
                        "expand to instructions and criteria)"
                    ),
                )


def check_pools(ctx: Context) -> Iterator[Finding]:
    deployments = set(ctx.config.deployments) | ctx.ignored
    for name, pool in ctx.config.pools.items():
        for j, member in enumerate(pool.members):
            if member not in deployments:
                known = ", ".join(ctx.config.deployments) or "none defined"
                yield ("pools", name, "members", j), f"unknown deployment {member!r} (deployments: {known})"
        for member, count in Counter(pool.members).items():
            if count > 1:
                yield ("pools", name, "members"), f"deployment {member!r} is a member twice"


def check_model_names(ctx: Context) -> Iterator[Finding]:
    """A model name means one thing: an LLM, a pool, a deployment's model or a provider model."""
    owners: dict[str, list[tuple[Loc, str]]] = {}
    for i, model in zip(ctx.provider_index, ctx.config.providers.models):
        owners.setdefault(model.name, []).append((("providers", "models", i, "name"), "a provider model"))
    for pool in ctx.config.pools:
        owners.setdefault(pool, []).append((("pools", pool), "a pool"))
    for name, dep in ctx.config.deployments.items():
        entry = (("deployments", name, "model"), "a deployment's model")
        kinds = [what for _, what in owners.get(dep.model, [])]
        if kinds and all(k == "a deployment's model" for k in kinds):
            continue  # deployments sharing a model name serve it together
        owners.setdefault(dep.model, []).append(entry)
    for name, defs in owners.items():
        if len(defs) > 1:
            what = " and ".join(sorted({w for _, w in defs}))
            for loc, _ in defs[1:]:
                yield loc, f"model name {name!r} is used by {what}; give each a distinct name"


def check_listeners(ctx: Context) -> Iterator[Finding]:
    config = ctx.config
    models = _APIS.same_models(catalog(config))
    # A provider model whose api_format is unknown is reported once, where it is defined.
    unkinded = {m.name for m in config.providers.models if api_kind(m.api_format) is None}
    ctx = Context(config, ctx.ignored | unkinded, ctx.listener_index, ctx.provider_index)
    names: set[str] = set()
    bound: dict[int, list[tuple[str, int]]] = {}
    for i, listener in zip(ctx.listener_index, config.listeners):
        loc: Loc = ("listeners", i)
        if listener.name in names:
            yield loc + ("name",), f"listener name {listener.name!r} is used more than once"
        names.add(listener.name)
        for other, j in bound.get(listener.port, []):
            if _overlap(other, listener.address):
                yield loc + ("port",), f"port {listener.port} on {listener.address} is already taken by listeners[{j}]"
        bound.setdefault(listener.port, []).append((listener.address, i))
        if listener.apis is not None:
            for where, message in _APIS.findings(ctx, listener.apis, models):
                yield loc + ("apis",) + where, message
    _APIS.keep_latest()


class _ApisFindings:
    """Each listener's ``apis`` findings, kept from one check of a file to the next.

    They depend on the ``apis`` map itself, the models the file defines and the entries that
    did not parse, nothing else; the loader hands back the same map object for a listener an
    edit left alone, so on a file of thousands of listeners only the edited ones are looked at
    again. Only the latest check's findings are kept."""

    def __init__(self) -> None:
        self._kept: dict[int, tuple[Any, ModelCatalog, frozenset[str], tuple[Finding, ...]]] = {}
        self._latest: dict[int, tuple[Any, ModelCatalog, frozenset[str], tuple[Finding, ...]]] = {}
        self._models: ModelCatalog | None = None

    def same_models(self, models: ModelCatalog) -> ModelCatalog:
        """``models``, or the equal catalog of the last check: then compared by identity."""
        if models != self._models:
            self._models = models
        return self._models

    def findings(self, ctx: Context, apis: dict[str, Any], models: ModelCatalog) -> tuple[Finding, ...]:
        kept = self._kept.get(id(apis))
        if kept is not None and kept[0] is apis and kept[1] is models and kept[2] == ctx.ignored:
            found = kept[3]
        else:
            found = tuple(_check_apis(ctx, (), apis, models))
        self._latest[id(apis)] = (apis, models, ctx.ignored, found)
        return found

    def keep_latest(self) -> None:
        self._kept, self._latest = self._latest, {}


_APIS = _ApisFindings()


def _overlap(a: str, b: str) -> bool:
    wildcard = {"0.0.0.0", "::"}
    if a in wildcard or b in wildcard:
        return ipaddress.ip_address(a).version == ipaddress.ip_address(b).version or "::" in (a, b)
    return ipaddress.ip_address(a) == ipaddress.ip_address(b)


def _check_apis(ctx: Context, loc: Loc, apis: dict[str, ApiSettings], models: ModelCatalog) -> Iterator[Finding]:
    given: dict[str, str] = {}
    for key, settings in apis.items():
        try:
            api = REGISTRY.get(key)
        except UnknownApiError as exc:
            yield loc + (key,), str(exc)
            continue
        if api.name in given:
            yield loc + (key,), f"{api.name} is given twice in this apis map (as {given[api.name]!r} and {key!r})"
            continue
        given[api.name] = key
        here = loc + (key,)
        if settings.schema_ is not None:
            if not api.versioned:
                yield here + ("schema",), f"{api.name} is unversioned and takes no schema"
            elif settings.schema_ not in schemas.SCHEMAS:
                yield (
                    here + ("schema",),
                    f"unknown schema {settings.schema_!r} (supported: {_supported(schemas.LISTENER_SCHEMAS)})",
                )
            elif settings.schema_ not in api.schemas or settings.schema_ not in schemas.LISTENER_SCHEMAS:
                yield (
                    here + ("schema",),
                    (
                        f"a listener cannot serve {api.name} in {settings.schema_} (listener schemas: "
                        f"{_supported(schemas.LISTENER_SCHEMAS)})"
                    ),
                )
        for setting in ("max_deadline_ms",):
            if getattr(settings, setting) is not None and setting not in api.settings:
                owners = [a.name for a in REGISTRY if setting in a.settings]
                yield here + (setting,), f"{setting} is a {'/'.join(owners)} setting; {api.name} has none"
        for j, model in enumerate(settings.models or []):
            kind = models.kind(model)
            if kind is None:
                if model in ctx.ignored:
                    continue
                offered = ", ".join(models.of_kind(api.kind)) or "none defined"
                yield here + ("models", j), f"unknown model {model!r} ({api.kind} models: {offered})"
            elif kind != api.kind:
                yield (
                    here + ("models", j),
                    (
                        f"{model!r} is {'an LLM' if kind == 'llm' else 'a decision'} model; {api.name} serves "
                        f"{api.kind} models"
                    ),
                )
            elif kind == "llm" and models.formats.get(model) != api.name:
                # The router forwards LLM requests as they are; it does not translate formats.
                yield (
                    here + ("models", j),
                    (
                        f"{model!r} speaks {models.formats.get(model)}, not {api.name}; list it under "
                        f"{models.formats.get(model)} (the router does not translate between LLM formats)"
                    ),
                )


def check_decide(ctx: Context) -> Iterator[Finding]:
    """Signals, virtual models, routes and judges (docs/decide/), cards as the file declares them."""
    yield from decide_checks.check_decide(ctx.config, ctx.ignored)


CHECKS: tuple[Check, ...] = (
    check_provider_models,
    check_deployments,
    check_systemone_02_capabilities,
    check_pools,
    check_model_names,
    check_listeners,
    check_decide,
)


def run_checks(ctx: Context, extra: tuple[Check, ...] = ()) -> list[Finding]:
    return [finding for check in CHECKS + extra for finding in check(ctx)]


__all__ = ["CHECKS", "Check", "Context", "Finding", "api_kind", "run_checks"]
