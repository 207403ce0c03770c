"""The data an ext_proc sidecar needs to serve one listener, as one xDS resource per listener.

``sidecar/<listener>`` holds the listener's APIs (schema, models, deadline) and everything those
models reach: pools, deployments and provider models, each with the Envoy cluster that serves
it. Its version travels on every sidecar route as ``x-vsr-config-version``, so for each request
the sidecar uses the data of the version Envoy routed it with (docs/xds/sidecar-versions.md).
"""

from __future__ import annotations

import json
from typing import Any

from sr_control.compiler import names
from sr_control.compiler.clusters import upstream
from sr_control.compiler.offer import ListenerOffer
from sr_control.compiler.protos import struct_value
from sr_control.config.model import RouterConfig


class SidecarData:
    """Per-compile: each deployment's and provider model's entry, built once, shared by listeners.

    Entries are kept as ready protobuf values: every listener that reaches a deployment carries
    the same entry, and converting it once instead of once per listener is a third of the
    compile time of a thousand listeners."""

    def __init__(self, config: RouterConfig) -> None:
        self.config = config
        self._deployments: dict[str, Any] = {}
        self._providers: dict[str, Any] = {}
        self._deployments_of: dict[str, list[str]] = {}
        self._provider_index = {model.name: i for i, model in enumerate(config.providers.models)}
        self._values: dict[tuple[Any, ...], Any] = {}
        for name, dep in config.deployments.items():
            self._deployments_of.setdefault(dep.model, []).append(name)

    # Entries are built when a listener first reaches them: a recompile after an edit builds
    # the payloads of the edited listeners only, and so only the entries those reach.
    def _deployment(self, name: str) -> Any:
        entry = self._deployments.get(name)
        if entry is None:
            dep = self.config.deployments[name]
            assert dep.endpoint is not None  # a Service-backed deployment's is derived from the Service
            entry = self._deployments[name] = struct_value(
                dep.model_dump(mode="json", by_alias=True, exclude_none=True)
                | {
                    "cluster": names.deployment_cluster(name),
                    "path": upstream([dep.endpoint], f"deployments.{name}.endpoint").base_path or "/",
                }
            )
        return entry

    def _provider(self, name: str) -> Any:
        entry = self._providers.get(name)
        if entry is None:
            index = self._provider_index[name]
            model = self.config.providers.models[index]
            entry = self._providers[name] = struct_value(
                model.model_dump(mode="json", by_alias=True, exclude_none=True)
                | {
                    "cluster": names.provider_cluster(model.name),
                    "path": upstream(model.endpoints, f"providers.models[{index}].endpoints").base_path or "/",
                }
            )
        return entry

    def payload(self, offer: ListenerOffer) -> dict[str, Any]:
        apis: list[Any] = []
        models: dict[str, Any] = {}
        deployments: list[str] = []
        providers: list[str] = []
        for o in offer.offers:
            apis.append(self._api_entry(o.api.name, o.api.paths, o.models, o.schema, o.deadline_ms))
            for model in o.models:
                if model in self.config.pools:
                    members = list(self.config.pools[model].members)
                    models[model] = self._shared(("pool", model), {"pool": members})
                    deployments += members
                elif model in self._deployments_of:
                    models[model] = self._shared(("deployments", model), {"deployments": self._deployments_of[model]})
                    deployments += self._deployments_of[model]
                elif model in self._provider_index:
                    models[model] = self._shared(("provider", model), {"provider": model})
                    providers.append(model)
        decide = self._decide(offer)
        if decide is not None:
            # The Decide path's targets and decision models: reached through the virtual
            # models, whether or not the listener names them itself.
            for model in decide["reach"]:
                if model in self.config.pools:
                    members = list(self.config.pools[model].members)
                    models.setdefault(model, self._shared(("pool", model), {"pool": members}))
                    deployments += members
                elif model in self._deployments_of:
                    entry = {"deployments": self._deployments_of[model]}
                    models.setdefault(model, self._shared(("deployments", model), entry))
                    deployments += self._deployments_of[model]
                elif model in self._provider_index:
                    providers.append(model)
        auth = offer.listener.auth
        return {
            "listener": offer.name,
            # Where the listener's keys are (an environment variable or a file of the sidecar's),
            # never the keys themselves: this data travels over the plaintext ADS port.
            **({"auth": auth.model_dump(exclude_none=True)} if auth is not None else {}),
            "apis": apis,
            "models": models,
            "deployments": {name: self._deployment(name) for name in dict.fromkeys(deployments)},
            "providers": {name: self._provider(name) for name in dict.fromkeys(providers)},
            **({"decide": decide["text"]} if decide is not None else {}),
            # Where the sidecar sends its spans (docs/operate.md, Tracing); absent: it traces nothing.
            **({"tracing": self.config.tracing.model_dump(mode="json")} if self.config.tracing is not None else {}),
        }

    def _decide(self, offer: ListenerOffer) -> dict[str, Any] | None:
        """The virtual models this listener offers, with the signals and judges they read, as
        one JSON text (``decide``) the sidecar compiles into plans (sr_control/decide/rules.py);
        and every model they reach: route targets, defaults, decision models."""
        config = self.config
        offered = [m for o in offer.offers for m in o.models if m in config.virtual_models]
        if not offered:
            return None
        vms = {name: config.virtual_models[name] for name in dict.fromkeys(offered)}
        reach: list[str] = []
        judges: dict[str, Any] = {}
        for vm in vms.values():
            reach += [m for route in vm.routes for m in route.models] + ([vm.default] if vm.default else [])
            judges |= {r.judge: config.judges[r.judge] for r in vm.routes if r.judge in config.judges}
        # Every signal is carried (they are few); only those the routes and judges test are asked.
        reach += [s.model for s in config.signals.values() if s.asks_model]

        def dump(section: Any) -> Any:
            # exclude_unset: a keyword signal refuses a model field it did not give.
            return section.model_dump(mode="json", by_alias=True, exclude_unset=True)

        doc = {
            "virtual_models": {n: dump(vm) for n, vm in vms.items()},
            "signals": {n: dump(s) for n, s in config.signals.items()},
            "judges": {n: dump(j) for n, j in judges.items()},
        }
        return {"text": json.dumps(doc, sort_keys=True), "reach": list(dict.fromkeys(reach))}

    def _api_entry(
        self, api: str, paths: tuple[str, ...], models: tuple[str, ...], schema: str | None, deadline_ms: int | None
    ) -> Any:
        entry: dict[str, Any] = {"api": api, "paths": list(paths), "models": list(models)}
        if schema is not None:
            entry["schema"] = schema
            entry["max_deadline_ms"] = deadline_ms
        return self._shared(("api", api, tuple(models), schema, deadline_ms), entry)

    def _shared(self, key: tuple[Any, ...], entry: dict[str, Any]) -> Any:
        """One protobuf value per distinct entry: listeners offering the same API share it."""
        value = self._values.get(key)
        if value is None:
            value = self._values[key] = struct_value(entry)
        return value
