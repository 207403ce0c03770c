"""What one listener offers: each API with its schema, models and deadline, resolved once.

The route table, the sidecar's data and the 404 texts all read this one view, so they cannot
disagree about what a listener serves.
"""

from __future__ import annotations

from dataclasses import dataclass

from sr_control.apis import REGISTRY, Api
from sr_control.compiler.limits import DEFAULT_DEADLINE_MS
from sr_control.config.catalog import ModelCatalog, catalog
from sr_control.config.explain import offered_apis
from sr_control.config.model import Listener, RouterConfig


@dataclass(frozen=True, slots=True)
class Offer:
    api: Api
    schema: str | None  # None for unversioned APIs
    models: tuple[str, ...]
    deadline_ms: int


@dataclass(frozen=True, slots=True)
class ListenerOffer:
    listener: Listener
    offers: tuple[Offer, ...]

    @property
    def name(self) -> str:
        return self.listener.name

    @property
    def api_names(self) -> tuple[str, ...]:
        return tuple(o.api.name for o in self.offers)

    @property
    def systemone_schema(self) -> str | None:
        return next((o.schema for o in self.offers if o.api.versioned), None)

    def not_offered(self) -> tuple[Api, ...]:
        return tuple(api for api in REGISTRY if api.name not in self.api_names)


def listener_offer(config: RouterConfig, listener: Listener, models: ModelCatalog | None = None) -> ListenerOffer:
    """``models``: ``catalog(config)``, when the caller has it (it costs a pass over the config)."""
    models = models if models is not None else catalog(config)
    offers = []
    for name, settings in offered_apis(listener):
        api = REGISTRY.get(name)
        served = settings.models if settings.models is not None else models.serving(api)
        offers.append(
            Offer(
                api=api,
                schema=(settings.schema_ or api.listener_schema) if api.versioned else None,
                models=tuple(served),
                deadline_ms=settings.max_deadline_ms or DEFAULT_DEADLINE_MS,
            )
        )
    return ListenerOffer(listener, tuple(offers))
