"""The API registry: every API a listener can offer or an upstream can speak."""

from sr_control.apis.registry import (
    API_NAMES,
    LLM_APIS,
    REGISTRY,
    Api,
    ApiRegistry,
    UnknownApiError,
)

__all__ = ["API_NAMES", "LLM_APIS", "REGISTRY", "Api", "ApiRegistry", "UnknownApiError"]
