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
                f"{value!r} is not a Kubernetes {what}: lowercase letters, digits and '-', starting with "
                f"{starts} and ending with a letter or digit (at most 63)"
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
                f"keys_file {self.keys_file!r} must be an absolute path (the sidecar reads it, from its own "
                "working directory)"
            )
        return self


class Listener(_Section):
    name: ListenerName
    address: Annotated[str, AfterValidator(_address)] = "0.0.0.0"
    port: int = Field(ge=1, le=65535)
    # None: the four LLM APIs for their LLM models, System One off (seed 000).
    apis: dict[str, ApiSettings] | None = None
    auth: ListenerAuth | None = None


# ---------------------------------------------------------------------------- the Decide path
# Signals, virtual models, routes and judges (docs/decide/config.md). Shapes only here; names
# and references (a route naming a signal that exists, an option of its choice) are checked in
# ``sr_control/decide/checks.py``, which sees the whole file.

# The state's part names (seed 000 rule 6), then the request turn's media (seed 002's
# ``input.image`` / ``input.video``).
Input = Literal[
    "request",
    "history",
    "previous_turns",
    "previous_answer",
    "tool_results",
    "candidate",
    "answer",
    "context",
    "image",
    "video",
]
SignalType = Literal["noul", "choice", "score", "set", "span"]
# The tests a condition makes, by the kind of signal each reads.
TEST_KEYS: Final = ("noul", "score", "choice", "set", "span", "keyword")
BOUNDS: Final = ("above", "at_least", "below", "at_most")
_HEADER = re.compile(r"^[A-Za-z0-9!#$%&'*+.^_`|~-]+$")
# Headers a rewrite may not set: the router's own, and those Envoy or the provider's key own.
_RESERVED_HEADERS = ("host", "content-length", "authorization", "x-api-key", "transfer-encoding")


class Signal(_Section):
    """A named question about the conversation, asked of a decision model, or (``keyword``) a
    regular expression over its parts, which asks no model."""

    type: SignalType | None = None  # None: the preset's type (or a keyword signal)
    preset: str | None = Field(default=None, min_length=1)
    instructions: str | None = Field(default=None, min_length=1)
    # choice: {option: description}; noul: {"true": ..., "false": ...}; score: levels, low to
    # high; set and span: {label: description}. A description may be null.
    criteria: dict[str, str | None] | list[str] | None = None
    keyword: str | None = Field(default=None, min_length=1)
    input: list[Input] = Field(default=["request"], min_length=1)
    model: Name = "vllm-sr/auto"
    timeout_ms: int = Field(default=1000, gt=0, le=600_000)
    # What an unknown answer means to a test of this signal: false or true (the test's value),
    # skip (a route that tests it is passed over), or for a choice signal one of its options.
    on_unknown: bool | str = "skip"

    @model_validator(mode="after")
    def _shape(self) -> Signal:
        if self.keyword is not None:
            given = [f for f in ("type", "preset", "instructions", "criteria") if getattr(self, f) is not None]
            given += [f for f in ("model", "timeout_ms", "on_unknown") if f in self.model_fields_set]
            if given:
                raise ValueError(f"a keyword signal asks no model; drop {', '.join(given)}")
            try:
                re.compile(self.keyword)
            except re.error as exc:
                raise ValueError(f"keyword {self.keyword!r} is not a regular expression: {exc}") from None
            if "answer" in self.input:
                raise ValueError("a keyword signal reads the request's parts; answer is a judge's input")
            return self
        if self.type is None and self.preset is None:
            raise ValueError("give type (noul, choice, score, set or span), preset, or keyword")
        if self.preset is None and self.instructions is None:
            raise ValueError(f"a {self.type} signal without a preset needs instructions")
        if self.type is not None:
            check_criteria(self.type, self.criteria)
        if isinstance(self.on_unknown, str) and self.on_unknown != "skip" and self.type not in (None, "choice"):
            raise ValueError(
                f"on_unknown {self.on_unknown!r}: a default answer is for choice signals; use false, true or skip"
            )
        return self

    @property
    def asks_model(self) -> bool:
        return self.keyword is None


def check_criteria(kind: str, criteria: dict[str, str | None] | list[str] | None) -> None:
    if criteria is None:
        if kind in ("choice", "score", "set", "span"):
            raise ValueError(f"a {kind} signal without a preset needs criteria")
        return
    if kind == "score":
        if not isinstance(criteria, list) or len(criteria) < 2:
            raise ValueError("a score signal's criteria are its levels, low to high: a list of at least 2")
    elif not isinstance(criteria, dict):
        raise ValueError(f"a {kind} signal's criteria map each {_WHAT[kind]} to its description")
    elif kind == "choice" and len(criteria) < 2:
        raise ValueError("a choice signal needs at least 2 options")
    elif kind in ("set", "span") and not criteria:
        raise ValueError(f"a {kind} signal needs at least 1 label")
    elif kind == "noul" and set(criteria) - {"true", "false"}:
        raise ValueError("a noul signal's criteria are 'true' and 'false'")


_WHAT = {"choice": "option", "noul": "answer", "set": "label", "span": "label"}


class Condition(_Section):
    """One test of a signal's answer, or ``all``/``any``/``not`` over other conditions.

    ``{noul: s, above: 0.7}``, ``{score: s, at_least: 2}``, ``{choice: s, is: billing}`` (or a
    list: any of them), ``{set: s, contains: refund}``, ``{span: s}`` or ``{span: s, label:
    email}`` (a span present), ``{keyword: s}`` (it matched)."""

    noul: Name | None = None
    score: Name | None = None
    choice: Name | None = None
    set: Name | None = None
    span: Name | None = None
    keyword: Name | None = None
    all: list[Condition] | None = Field(default=None, min_length=1)
    any: list[Condition] | None = Field(default=None, min_length=1)
    not_: Condition | None = Field(default=None, alias="not")
    above: float | None = None
    at_least: float | None = None
    below: float | None = None
    at_most: float | None = None
    is_: str | list[str] | None = Field(default=None, alias="is")
    contains: str | None = None
    label: str | None = None

    @model_validator(mode="after")
    def _one_test(self) -> Condition:
        kinds = [k for k in (*TEST_KEYS, "all", "any") if getattr(self, k) is not None]
        kinds += ["not"] if self.not_ is not None else []
        if len(kinds) != 1:
            said = f"it gives {', '.join(kinds)}" if kinds else "it gives none"
            raise ValueError(
                f"a condition is exactly one of noul, score, choice, set, span, keyword, all, any and not ({said})"
            )
        kind = kinds[0]
        allowed = {
            "noul": BOUNDS,
            "score": BOUNDS,
            "choice": ("is_",),
            "set": ("contains",),
            "span": ("label",),
        }.get(kind, ())
        extra = [f for f in (*BOUNDS, "is_", "contains", "label") if getattr(self, f) is not None and f not in allowed]
        if extra:
            names = ", ".join("is" if f == "is_" else f for f in extra)
            raise ValueError(f"{names} does not apply to a {kind} condition")
        if kind == "score" and self.bounds == ():
            raise ValueError("a score condition needs a threshold: above, at_least, below or at_most")
        if kind == "choice" and self.is_ is None:
            raise ValueError("a choice condition needs is: an option, or a list of options")
        if kind == "set" and self.contains is None:
            raise ValueError("a set condition needs contains: a label")
        return self

    @property
    def kind(self) -> str:
        names = (*TEST_KEYS, "all", "any", "not")
        return next(k for k in names if getattr(self, "not_" if k == "not" else k) is not None)

    @property
    def signal(self) -> str | None:
        return next((getattr(self, k) for k in TEST_KEYS if getattr(self, k) is not None), None)

    @property
    def bounds(self) -> tuple[tuple[str, float], ...]:
        return tuple((b, getattr(self, b)) for b in BOUNDS if getattr(self, b) is not None)

    @property
    def options(self) -> tuple[str, ...]:
        return (self.is_,) if isinstance(self.is_, str) else tuple(self.is_ or ())


def _header_name(value: str) -> str:
    if not _HEADER.match(value):
        raise ValueError(f"{value!r} is not an HTTP header name")
    low = value.lower()
    if low in _RESERVED_HEADERS or low.startswith("x-vsr-") or low.startswith("x-envoy-"):
        raise ValueError(f"{value!r} is the router's or Envoy's to set; a rewrite cannot set it")
    return value


class Rewrite(_Section):
    """What the router changes in the LLM request when its route fires (besides ``model``)."""

    system_prompt: str | None = Field(default=None, min_length=1)  # replaces the request's own
    headers: dict[Annotated[str, AfterValidator(_header_name)], str] = {}


class Route(_Section):
    """A rule: when its condition holds, the request goes to its model (a list: tried in order)."""

    name: Name
    when: Condition | None = None  # None: always
    model: Name | list[Name] = Field(min_length=1)
    rewrite: Rewrite | None = None
    priority: int = 0  # higher first; equal priorities keep file order
    judge: Name | None = None  # a judge of ``judges``: may escalate to the next model

    @property
    def models(self) -> tuple[str, ...]:
        return (self.model,) if isinstance(self.model, str) else tuple(self.model)


class VirtualModel(_Section):
    """A name a client sends as ``model`` that means "decide": its routes choose the LLM."""

    routes: list[Route] = Field(min_length=1)
    default: Name | None = None  # where a request goes when no route fires; None: an error


class Judge(_Section):
    """After the chosen model answers: escalate to the route's next model when ``when`` holds
    (it tests signals over ``answer``), while the deadline allows."""

    when: Condition
    deadline_ms: int = Field(default=30_000, gt=0, le=3_600_000)  # since the request came in
    max_escalations: int = Field(default=1, ge=1, le=16)


def _host_port(value: str) -> str:
    host, sep, port = value.rpartition(":")
    if not sep or not host.strip("[]") or not port.isdigit() or not 0 < int(port) < 65536 or "/" in host:
        raise ValueError(f"{value!r} is not HOST:PORT (an OTLP/gRPC collector, such as otel-collector:4317)")
    return value


class Tracing(_Section):
    """OpenTelemetry spans from Envoy, the sidecar and the runtimes, one trace per request
    (docs/operate.md, Tracing). Absent: no tracing anywhere, and nothing compiled for it."""

    otlp_endpoint: Annotated[str, AfterValidator(_host_port)]  # an OTLP/gRPC collector, plaintext
    # Percent of the requests Envoy starts a trace for; a request that comes with a sampled
    # traceparent is traced whatever this says.
    sample_rate: float = Field(default=100.0, ge=0, le=100)
    # The services are named <service_name>-envoy, -sidecar and -runtime.
    service_name: str = Field(default="vllm-sr", pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]{0,62}$")


class RouterConfig(_Section):
    """A whole router config file, format version 2."""

    version: Literal[2] = CURRENT_VERSION
    providers: Providers = Providers()
    deployments: dict[Name, Deployment] = {}
    pools: dict[Name, Pool] = {}
    listeners: list[Listener] = []
    # The Decide path (docs/decide/): additions, so format 2 reads them with no migration.
    signals: dict[Name, Signal] = {}
    virtual_models: dict[Name, VirtualModel] = {}
    judges: dict[Name, Judge] = {}
    # An addition too: format 2 reads it with no migration.
    tracing: Tracing | None = None
