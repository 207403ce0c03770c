"""Recompiling after an edit: only what the edit touched is built again.

    recompiler = Recompiler(settings)
    recompiler.compile(config) -> Resources     # the first call builds everything
    recompiler.compile(edited) -> Resources     # equal to compile(edited), reusing the rest

A config listener compiles to three resources (listener, routes, sidecar data) that depend on
the listener itself, on what it offers (which, for an API that lists no models, depends on
every model the file defines) and on the definitions of the models it offers: a pool with its
members' deployments, the deployments of a model name, a provider model and its position. A
cluster depends on its deployment or provider model and the settings. Each unit is kept with
those inputs and reused, as the same Resource objects (bytes packed and digested once), while
they compare equal; anything else is built again. Definitions are compared once per model name,
not once per listener: an edit of a deployment rebuilds its cluster and the listeners serving
a model that reaches it. ``tracing`` is an input of every listener (its connection manager and
its sidecar data carry it): an edit of it builds them all again. A fresh Recompiler is the
whole compile (``compile()``), the reference: ``tests/compiler/test_incremental.py`` holds
every recompile after generated edits equal to it.

Inputs compare by identity first, then by value: the config loader hands back the same model
objects for entries an edit left alone (``config/load.py``), so an unchanged listener costs a
few lookups.
"""

from __future__ import annotations

import gc
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from functools import partial
from typing import Any

from sr_control.compiler import names
from sr_control.compiler.clusters import deployment_cluster, otlp_cluster, provider_cluster, sidecar_cluster, upstream
from sr_control.compiler.convert import parse
from sr_control.compiler.listeners import listener as listener_dict
from sr_control.compiler.offer import ListenerOffer, listener_offer
from sr_control.compiler.protos import (
    CLUSTER,
    LISTENER,
    ROUTE,
    SIDECAR,
    Cluster,
    Listener,
    RouteConfiguration,
    typed_struct,
)
from sr_control.compiler.resources import Resource, Resources
from sr_control.compiler.routes import route_configuration
from sr_control.compiler.settings import Settings
from sr_control.compiler.sidecar import SidecarData
from sr_control.config import model as config_model
from sr_control.config.catalog import ModelCatalog, catalog


@dataclass(frozen=True, slots=True)
class _ListenerUnit:
    listener: config_model.Listener
    models: ModelCatalog  # what "every model of the API" meant when the offer was made
    offer: ListenerOffer
    served: frozenset[str]  # the models its APIs serve, whose definitions it was built with
    resources: tuple[Resource, Resource, Resource]  # sidecar data, routes, listener
    tracing: config_model.Tracing | None = None


@dataclass(frozen=True, slots=True)
class _ClusterUnit:
    source: Any  # (name, deployment) or (index, provider model)
    resource: Resource


class Recompiler:
    """Compiles configs one after another, reusing the units of the previous compile.

    What it returns is not yet checked for consistency: ``compile()`` checks it, and so does
    ``Snapshot.of`` before anything is served (one check per version, not two).

    Keeps only what the latest compile used, so memory follows the config's size. Not
    thread-safe: one caller compiles at a time (the control plane's reload holds a lock)."""

    def __init__(self, settings: Settings = Settings()) -> None:
        self.settings = settings
        self._listeners: dict[str, _ListenerUnit] = {}
        self._clusters: dict[str, _ClusterUnit] = {}
        self._sidecar_cluster: Resource | None = None
        self._otlp_cluster: tuple[config_model.Tracing, Resource] | None = None
        self._models: ModelCatalog | None = None
        # The definition of every model some listener serves, as the latest compile saw it.
        self._definitions: dict[str, tuple[Any, ...]] = {}
        self.reused = 0  # listeners and clusters the latest compile took from the one before
        self.built = 0

    def compile(self, config: config_model.RouterConfig) -> Resources:
        with _gc_paused():
            return self._compile(config)

    def _compile(self, config: config_model.RouterConfig) -> Resources:
        self.reused = self.built = 0
        # Every endpoint list first, in file order: a bad one fails the same way, naming the
        # same field, whichever listeners were reused.
        for name, dep in config.deployments.items():
            upstream([dep.endpoint], f"deployments.{name}.endpoint")  # type: ignore[list-item]
        for index, model in enumerate(config.providers.models):
            upstream(model.endpoints, f"providers.models[{index}].endpoints")

        by_type: dict[str, list[Resource]] = {CLUSTER: [], LISTENER: [], ROUTE: [], SIDECAR: []}
        models = catalog(config)
        if models == self._models:
            models = self._models  # the same object: each listener then checks it by identity
        definitions = _Definitions(config)
        # Models whose definition changed: the listeners serving one of them are built again.
        changed = frozenset(m for m, d in self._definitions.items() if definitions.of(m) != d)
        data = SidecarData(config)
        units: dict[str, _ListenerUnit] = {}
        for listener_config in config.listeners:
            unit = self._listener(config, listener_config, models, changed, data)
            units[listener_config.name] = unit
            sidecar, routes, listener = unit.resources
            by_type[SIDECAR].append(sidecar)
            by_type[ROUTE].append(routes)
            by_type[LISTENER].append(listener)
        clusters = self._all_clusters(config)
        by_type[CLUSTER] = [u.resource for u in clusters.values()] + [self._sidecar(), *self._otlp(config.tracing)]
        resources = Resources(by_type)
        served = {m for s in {u.served for u in units.values()} for m in s}
        # Kept only once the whole compile succeeded: a failed one leaves the last good units.
        self._listeners, self._clusters, self._models = units, clusters, models
        self._definitions = {m: definitions.of(m) for m in served}
        return resources

    def _listener(
        self,
        config: config_model.RouterConfig,
        listener_config: config_model.Listener,
        models: ModelCatalog,
        changed: frozenset[str],
        data: SidecarData,
    ) -> _ListenerUnit:
        old = self._listeners.get(listener_config.name)
        if (
            old is not None
            and (old.listener is listener_config or old.listener == listener_config)
            and old.tracing == config.tracing
        ):
            # What the listener offers changes with the listener, or with the models the file
            # defines (an API that lists none serves every model of its kind).
            offer = old.offer if old.models is models else listener_offer(config, listener_config, models)
            if (offer is old.offer or offer == old.offer) and changed.isdisjoint(old.served):
                self.reused += 1
                if old.listener is listener_config and old.models is models:
                    return old
                return _ListenerUnit(listener_config, models, offer, old.served, old.resources, old.tracing)
        else:
            offer = listener_offer(config, listener_config, models)
        self.built += 1
        served = frozenset(m for o in offer.offers for m in o.models)
        resources = _listener_resources(config, offer, data)
        return _ListenerUnit(listener_config, models, offer, served, resources, config.tracing)

    def _all_clusters(self, config: config_model.RouterConfig) -> dict[str, _ClusterUnit]:
        units: dict[str, _ClusterUnit] = {}
        for name, dep in config.deployments.items():
            units[names.deployment_cluster(name)] = self._cluster(
                names.deployment_cluster(name), (name, dep), partial(deployment_cluster, name, dep, self.settings)
            )
        for index, model in enumerate(config.providers.models):
            units[names.provider_cluster(model.name)] = self._cluster(
                names.provider_cluster(model.name),
                (index, model),
                partial(provider_cluster, model, index, self.settings),
            )
        return units

    def _sidecar(self) -> Resource:
        if self._sidecar_cluster is None:
            built = sidecar_cluster(self.settings)
            self._sidecar_cluster = Resource.of(built["name"], parse(built, Cluster, built["name"]))
        return self._sidecar_cluster

    def _otlp(self, tracing: config_model.Tracing | None) -> list[Resource]:
        if tracing is None:
            return []
        if self._otlp_cluster is None or self._otlp_cluster[0] != tracing:
            built = otlp_cluster(tracing)
            self._otlp_cluster = (tracing, Resource.of(built["name"], parse(built, Cluster, built["name"])))
        return [self._otlp_cluster[1]]

    def _cluster(self, name: str, source: tuple[Any, Any], build: Callable[[], dict[str, Any]]) -> _ClusterUnit:
        old = self._clusters.get(name)
        if old is not None and old.source == source:
            self.reused += 1
            return _ClusterUnit(source, old.resource)
        self.built += 1
        cluster = build()
        return _ClusterUnit(source, Resource.of(cluster["name"], parse(cluster, Cluster, cluster["name"])))


def _listener_resources(
    config: config_model.RouterConfig, offer: ListenerOffer, data: SidecarData
) -> tuple[Resource, Resource, Resource]:
    name = offer.name
    sidecar = Resource.of(names.sidecar(name), typed_struct(data.payload(offer)))
    routes = route_configuration(config, offer, sidecar.version)
    return (
        sidecar,
        Resource.of(names.route(name), parse(routes, RouteConfiguration, names.route(name))),
        Resource.of(
            names.listener(name), parse(listener_dict(offer, tracing=config.tracing), Listener, names.listener(name))
        ),
    )


class _Definitions:
    """What a model name stands for, as the sidecar data and the routes read it: every pool,
    deployment and provider model of that name (a valid config has one kind), with a pool's
    members' deployments and a provider model's position (it names the field in errors)."""

    def __init__(self, config: config_model.RouterConfig) -> None:
        self._config = config
        self._deployments_of: dict[str, list[tuple[str, config_model.Deployment]]] = {}
        for name, dep in config.deployments.items():
            self._deployments_of.setdefault(dep.model, []).append((name, dep))
        self._providers = {m.name: (i, m) for i, m in enumerate(config.providers.models)}
        self._memo: dict[str, tuple[Any, ...]] = {}

    def of(self, name: str) -> tuple[Any, ...]:
        found = self._memo.get(name)
        if found is None:
            pool = self._config.pools.get(name)
            members = tuple((m, self._config.deployments.get(m)) for m in pool.members) if pool is not None else ()
            found = self._memo[name] = (
                name,
                pool,
                members,
                tuple(self._deployments_of.get(name, ())),
                self._providers.get(name),
            )
        return found


@contextmanager
def _gc_paused() -> Iterator[None]:
    # Compiling allocates hundreds of thousands of short-lived objects and frees them all at
    # the end; collections in between find nothing and cost ~15% of a large compile.
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


__all__ = ["Recompiler"]
