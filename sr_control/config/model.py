"""The router config as pydantic models: shapes, types and limits.

Names, aliases and cross-references (a listener naming a model that exists, a deviation that
fits its schema) are checked in ``checks.py``, which sees the whole file at once.
"""

from __future__ import annotations

import ipaddress
from typing import Annotated, Literal
from urllib.parse import urlsplit

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, model_validator

CURRENT_VERSION = 2

QuestionType = Literal["noul", "choice", "score", "box", "span", "set", "track"]
Modality = Literal["text", "image", "video"]


def _url(value: str) -> str:
    parts = urlsplit(value)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError(f"{value!r} is not an http:// or https:// URL with a host")
    try:
        parts.port  # noqa: B018 - raises on a malformed port
    except ValueError as exc:
        raise ValueError(f"{value!r} has a malformed port") from exc
    return value


def _address(value: str) -> str:
    try:
        ipaddress.ip_address(value)
    except ValueError:
        raise ValueError(f"{value!r} is not an IP address") from None
    return value


Url = Annotated[str, AfterValidator(_url)]
Name = Annotated[str, Field(min_length=1, max_length=253)]
ListenerName = Annotated[str, Field(pattern=r"^[a-z0-9]([a-z0-9_-]{0,61}[a-z0-9])?$")]
EnvVar = Annotated[str, Field(pattern=r"^[A-Za-z_][A-Za-z0-9_]*$")]


class _Section(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class ProviderModel(_Section):
    """A model reached through provider endpoints (LLM APIs, or System One with ``schema``)."""

    name: Name
    api_format: str = "chat_completions"
    endpoints: list[Url] = Field(min_length=1)
    schema_: str | None = Field(default=None, alias="schema")
    api_key_env: EnvVar | None = None


class Providers(_Section):
    models: list[ProviderModel] = []


class Capabilities(_Section):
    """What a deployment answers, for members whose upstream publishes no model card."""

    question_types: list[QuestionType] = Field(min_length=1)
    modalities: list[Modality] = ["text"]
    presets: list[str] = []


class Deployment(_Section):
    """A decision-model deployment the router calls as a System One client (seed 000)."""

    provider: Literal["systemone"]
    endpoint: Url
    model: Name
    schema_: str = Field(default="systemone/0.2", alias="schema")
    deviations: list[str] = []
    max_concurrency: int = Field(default=8, ge=1, le=1024)
    capabilities: Capabilities | None = None
    api_key_env: EnvVar | None = None


class Pool(_Section):
    """Members answer for the pool's name; ``vllm-sr/auto`` routes by capability."""

    members: list[Name] = Field(min_length=1)


class ApiSettings(_Section):
    """One entry of a listener's ``apis`` map; which keys apply depends on the API."""

    schema_: str | None = Field(default=None, alias="schema")
    models: list[Name] | None = None
    max_deadline_ms: int | None = Field(default=None, gt=0, le=3_600_000)


class ListenerAuth(_Section):
    """Where a listener's bearer keys are, by reference: the keys never enter the config, the
    compiled resources or the ADS stream. Exactly one of the two."""

    keys_env: EnvVar | None = None  # an environment variable of the sidecar: keys separated by commas or whitespace
    keys_file: str | None = Field(default=None, min_length=1)  # a file the sidecar reads: one key per line, '#' comments

    @model_validator(mode="after")
    def _one_source(self) -> ListenerAuth:
        if (self.keys_env is None) == (self.keys_file is None):
            raise ValueError("give exactly one of keys_env and keys_file")
        if self.keys_file is not None and not self.keys_file.startswith("/"):
            raise ValueError(f"keys_file {self.keys_file!r} must be an absolute path (the sidecar reads it, from its own working directory)")
        return self


class Listener(_Section):
    name: ListenerName
    address: Annotated[str, AfterValidator(_address)] = "0.0.0.0"
    port: int = Field(ge=1, le=65535)
    # None: the four LLM APIs for their LLM models, System One off (seed 000).
    apis: dict[str, ApiSettings] | None = None
    auth: ListenerAuth | None = None


class RouterConfig(_Section):
    """A whole router config file, format version 2."""

    version: Literal[2] = CURRENT_VERSION
    providers: Providers = Providers()
    deployments: dict[Name, Deployment] = {}
    pools: dict[Name, Pool] = {}
    listeners: list[Listener] = []
