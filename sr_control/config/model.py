"""The router config as pydantic models: shapes, types and limits.

Names, aliases and cross-references (a listener naming a model that exists, a deviation that
fits its schema) are checked in ``checks.py``, which sees the whole file at once.
"""

from __future__ import annotations

import ipaddress
import re
from typing import Annotated, Any, Final, Literal
from urllib.parse import urlsplit

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, model_validator

CURRENT_VERSION: Final = 2  # Final: the value is the type RouterConfig.version takes, Literal[2]

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


def _label(what: str, first: str) -> tuple[AfterValidator, Any]:
    """Kubernetes' own rules: a Service name is a DNS-1035 label, a namespace a DNS-1123 label.
    The message names the rule; the JSON schema carries the pattern, for Helm's values schema."""
    pattern = rf"^[{first}]([-a-z0-9]{{0,61}}[a-z0-9])?$"
    starts = "a letter" if first == "a-z" else "a letter or digit"

    def check(value: str) -> str:
        if not re.match(pattern, value):
            raise ValueError(
                f"{value!r} is not a Kubernetes {what}: lowercase letters, digits and '-', starting with {starts} and ending with a letter or digit (at most 63)"
            )
        return value

    return AfterValidator(check), Field(json_schema_extra={"pattern": pattern})


def _url_path(value: str) -> str:
    if not re.match(r"^/[^\s?#]*$", value):
        raise ValueError(f"{value!r} is not a URL path (it starts with '/' and has no spaces, '?' or '#')")
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
ServiceName = Annotated[str, *_label("Service name", "a-z")]
Namespace = Annotated[str, *_label("namespace", "a-z0-9")]


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


class ServiceRef(_Section):
    """A Kubernetes Service whose ready endpoints are a deployment's members (docs/deploy/discovery.md).

    The control plane watches the Service's EndpointSlices and feeds Envoy the ready endpoints
    by EDS; the sidecar's own calls (fail-over, model cards) go to the Service's DNS name."""

    name: ServiceName
    # None: the namespace the control plane runs in (vllm-sr xds serve --namespace).
    namespace: Namespace | None = None
    port: int = Field(ge=1, le=65535)  # the Service's port, as clients of the Service call it
    # Which of the EndpointSlices' ports to use when the Service has several (its port's name).
    port_name: str | None = Field(default=None, min_length=1, max_length=63)
    path: Annotated[str, AfterValidator(_url_path)] = "/v1/systemone"

    @property
    def url(self) -> str:
        """The Service's cluster DNS URL; without a namespace, the short name, which a pod of
        the same namespace resolves."""
        host = f"{self.name}.{self.namespace}.svc" if self.namespace else self.name
        return f"http://{host}:{self.port}{self.path}"


class Deployment(_Section):
    """A decision-model deployment the router calls as a System One client (seed 000).

    It is reached at a fixed ``endpoint`` URL or through a Kubernetes ``service`` (exactly one).
    For a Service-backed deployment ``endpoint`` is derived: the Service's DNS URL, which the
    sidecar calls itself when it fails over, while Envoy balances over the discovered pods."""

    model_config = ConfigDict(
        frozen=True,
        extra="forbid",
        json_schema_extra={"oneOf": [{"required": ["endpoint"]}, {"required": ["service"]}]},
    )

    provider: Literal["systemone"]
    endpoint: Url | None = None
    service: ServiceRef | None = None
    model: Name
    schema_: str = Field(default="systemone/0.2", alias="schema")
    deviations: list[str] = []
    max_concurrency: int = Field(default=8, ge=1, le=1024)
    capabilities: Capabilities | None = None
    api_key_env: EnvVar | None = None

    @model_validator(mode="after")
    def _endpoint_or_service(self) -> Deployment:
        if "service" in self.model_fields_set and self.service is not None:
            if self.endpoint is not None and "endpoint" in self.model_fields_set:
                raise ValueError("give endpoint or service, not both")
            return self.model_copy(update={"endpoint": self.service.url})
        if self.endpoint is None:
            raise ValueError("give endpoint (a URL) or service (a Kubernetes Service)")
        return self


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
    keys_file: str | None = Field(
        default=None, min_length=1
    )  # a file the sidecar reads: one key per line, '#' comments

    @model_validator(mode="after")
    def _one_source(self) -> ListenerAuth:
        if (self.keys_env is None) == (self.keys_file is None):
            raise ValueError("give exactly one of keys_env and keys_file")
        if self.keys_file is not None and not self.keys_file.startswith("/"):
            raise ValueError(
                f"keys_file {self.keys_file!r} must be an absolute path (the sidecar reads it, from its own working directory)"
            )
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
