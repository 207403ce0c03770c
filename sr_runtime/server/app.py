"""The runtime's HTTP server: a Starlette app whose routes are a declared list.

    POST /v1/systemone          one request; the first unanswerable question fails it
    POST /v1/systemone/batch    named requests, each answered as if sent alone
    POST /v1/decisions          the internal form: failed questions carry their own error in a 200
    GET  /v1/models             the served model with its version, features and card
    GET  /health                api_version 5.0.0 and readiness (503 while the model loads)
    GET  /metrics               Prometheus

A System One request goes: API key -> body (size, zstd, multipart) -> the listener codec's
``read`` -> the served model's checks -> ``bridge.to_engine`` -> the scheduler -> ``to_reply``
-> the codec's ``answer_success``. Every error on the way becomes an answer in one place
(``errors.error_answer``), so the runtime and the sidecar write the same bytes.
"""

from __future__ import annotations

import asyncio
import itertools
import re
import time
import uuid
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any

import anyio
from prometheus_client import CONTENT_TYPE_LATEST
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.requests import ClientDisconnect
from starlette.requests import Request as HttpRequest
from starlette.responses import JSONResponse, Response
from starlette.routing import Route
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from sr_base.log import get_logger
from sr_base.tracing import REQUEST_ID as TRACE_REQUEST_ID
from sr_base.tracing import set_status, step
from sr_runtime.server.auth import check_key
from sr_runtime.server.body import check_parts, read_body
from sr_runtime.server.bridge import EnginePlan, to_engine, to_reply
from sr_runtime.server.errors import CLIENT_CLOSED, RETRY_AFTER_S, MethodNotAllowed, error_answer
from sr_runtime.server.runtime import Loader, Runtime, Status
from sr_runtime.server.scheduler import Outcome, Scheduler
from sr_runtime.server.served import folder_date, model_folder
from sr_runtime.server.settings import ServerSettings
from sr_runtime.types import DecisionEngine
from systemone import ClientRequest, DeadlineExceeded, DetailItem, HttpAnswer, NotServed, ValidationFailed
from systemone.generated.runtime_fields import RUNTIME_CONTRACT
from systemone.replies import WHOLE_REPLY, WHOLE_REPLY_HEADER, is_whole

log = get_logger("vllm-srun.server")
REQUEST_ID = "x-typesafe-request-id"
# What the sidecar in front says is left of the request's deadline, in ms (docs/runtime/server.md).
DEADLINE_HEADER = "x-vsr-deadline-ms"
_REQUEST_ID_SHAPE = re.compile(rb"[\x21-\x7e]{1,128}")  # printable ASCII: it goes back out as a header
# A new id: this process's random half and a counter, unique like a uuid4 without reading
# os.urandom for every request (a system call that showed in profiles under load).
_PROCESS, _COUNT = uuid.uuid4().hex[:16], itertools.count()


def _send(answer: HttpAnswer) -> Response:
    return Response(answer.body, answer.status, headers=dict(answer.headers))


def _runtime(request: HttpRequest) -> Runtime:
    return request.state.runtime


# ---------------------------------------------------------------------------- endpoints


async def answer(request: HttpRequest) -> Response:
    """The three System One endpoints: the codec knows which one a path is. With tracing on, a
    span per request, the child of the caller's ``traceparent`` (the router's call)."""
    rt = _runtime(request)
    tracing = rt.tracing
    if tracing is None:
        return await _answer(rt, request)
    model = rt.model.name if rt.model is not None else rt.settings.model  # its name once loaded
    attributes = {TRACE_REQUEST_ID: request.headers.get("x-request-id", ""), "vllm_sr.model": model}
    span = tracing.server_span(f"POST {request.url.path}", request.headers, attributes)
    try:
        with tracing.within(span):
            response = await _answer(rt, request)
        set_status(span, response.status_code)
        return response
    finally:
        span.end()


async def _answer(rt: Runtime, request: HttpRequest) -> Response:
    arrived = time.monotonic()
    req: ClientRequest | None = None
    try:
        check_key(rt.settings.api_key, request.headers)
        body = await read_body(request)
        with step("read"):
            req = _read(rt, request, body.json)
        if body.multipart:
            check_parts(req.ir, body)
        model, scheduler = rt.ready()
        model.check(req.ir)
        plan = to_engine(req.ir, model.card, body.parts)
        with step("model", **{"vllm_sr.items": len(plan.items)}) as span:
            deadline_ms = _deadline_ms(req.ir.deadline_ms, request.headers)
            outcome = await _answered(request, scheduler, plan, deadline_ms, arrived)
            meta = _meta(outcome)
            if span is not None:
                span.set_attributes({f"vllm_sr.{k}": v for k, v in meta["meta"].items()})
        reply = to_reply(plan, outcome.results if outcome else [], model.name, meta, legacy=req.schema == "vllm-sr/4.0")
        # Said of /v1/decisions replies, where a question may fail inside a 200: a sidecar in
        # front need not read a reply that is whole (replies.WHOLE_REPLY_HEADER).
        whole = {WHOLE_REPLY_HEADER: WHOLE_REPLY} if req.endpoint == "decisions" and is_whole(reply, req.ir) else None
        return Response(rt.codec.answer_success(req, reply), 200, headers=whole, media_type="application/json")
    except ClientDisconnect:
        return Response(status_code=CLIENT_CLOSED)  # nobody reads it; the metrics count it as such
    except Exception as exc:  # noqa: BLE001 - every error is answered, in one place
        return _send(error_answer(rt.codec, exc, req))


def _read(rt: Runtime, request: HttpRequest, body: bytes) -> ClientRequest:
    try:
        return rt.codec.read(request.url.path, body, request.headers.items())
    except (RecursionError, OverflowError) as exc:
        # Limits of Python itself that a client's JSON could reach inside the codec: it reports
        # nesting past its depth as json_invalid and caps deadline_ms (decision 31); anything it
        # still misses is a bad body here, not a 500.
        log.warning("request unreadable", error=f"{type(exc).__name__}: {exc}")
        message = (
            "the body nests deeper than this server reads"
            if isinstance(exc, RecursionError)
            else "a number in the body is too large to read"
        )
        raise ValidationFailed([DetailItem(("body",), f"JSON decode error: {message}", "json_invalid")]) from None


def _deadline_ms(given: int | None, headers: Any) -> int | None:
    """The request's own deadline, or what the sidecar in front says is left of the listener's
    (``x-vsr-deadline-ms``), whichever ends first. The header can only shorten a deadline, so a
    client that sends it itself gains nothing."""
    passed = headers.get(DEADLINE_HEADER, "")
    left = int(passed) if passed.isdigit() and 0 < len(passed) <= 9 else None
    return min((d for d in (given, left) if d is not None), default=None)


async def _answered(
    request: HttpRequest, scheduler: Scheduler, plan: EnginePlan, deadline_ms: int | None, arrived: float
) -> Outcome | None:
    """The engine's outcome; if the deadline passes or the client goes away first, the job is
    abandoned (its requests not yet run never run) and the caller answers 504 or nothing."""
    if not plan.requests:
        return None
    deadline = None if deadline_ms is None else arrived + deadline_ms / 1000  # the IR caps deadline_ms (decision 31)
    job = scheduler.submit(plan.requests, deadline)
    answer = asyncio.wrap_future(job)
    gone = asyncio.ensure_future(_disconnected(request.receive))
    why = "client_closed"  # also when this task is cancelled: the server is stopping under it
    try:
        done, _ = await asyncio.wait(
            (answer, gone),
            timeout=None if deadline is None else max(0.0, deadline - time.monotonic()),
            return_when=asyncio.FIRST_COMPLETED,
        )
        if answer in done:
            why = ""
            try:
                return answer.result()
            except DeadlineExceeded:
                # The scheduler ended the job at its deadline before this timer fired (between
                # slices, or at the engine's next pass): the client is told whose deadline it was
                # all the same.
                raise DeadlineExceeded(
                    f"{_deadline_source(deadline_ms, request)} passed before the model answered",
                    reason="deadline_exceeded",
                ) from None
        if gone in done:
            raise ClientDisconnect()
        why = "deadline"
        raise DeadlineExceeded(
            f"{_deadline_source(deadline_ms, request)} passed before the model answered", reason="deadline_exceeded"
        )
    finally:
        gone.cancel()
        if why:
            scheduler.abandon(job, why)
            answer.cancel()  # nobody reads what the job may still set


def _deadline_source(deadline_ms: int | None, request: HttpRequest) -> str:
    if request.headers.get(DEADLINE_HEADER) == str(deadline_ms):
        return f"the request's deadline ({deadline_ms} ms of it were left when the router sent it here)"
    return f"options.deadline_ms ({deadline_ms} ms)"


async def _disconnected(receive: Receive) -> None:
    """Returns when the client has closed the connection (the body is read by now, so the
    server's next message is the disconnect)."""
    while (await receive())["type"] != "http.disconnect":
        pass


def _meta(outcome: Outcome | None) -> dict[str, Any]:
    if outcome is None:
        return {"meta": {"queue_ms": 0.0, "inference_ms": 0.0, "batched_requests": 0}}
    return {
        "meta": {
            "queue_ms": round(outcome.queue_s * 1000, 3),
            "inference_ms": round(outcome.inference_s * 1000, 3),
            "batched_requests": outcome.round_requests,
        }
    }


async def models(request: HttpRequest) -> Response:
    rt = _runtime(request)
    try:
        check_key(rt.settings.api_key, request.headers)
        model, _ = rt.ready()
        return Response(rt.codec.answer_listing(model.listing()), 200, media_type="application/json")
    except Exception as exc:  # noqa: BLE001
        return _send(error_answer(rt.codec, exc))


async def health(request: HttpRequest) -> Response:
    """Readiness for probes and routers: 200 once the model answers, 503 before (no key needed)."""
    rt = _runtime(request)
    ready = rt.status is Status.READY
    doc: dict[str, Any] = {
        "status": rt.status.value,
        "ready": ready,
        "api_version": RUNTIME_CONTRACT,
        "model": rt.model.name if rt.model else rt.settings.model,
        "schema": rt.settings.schema,
    }
    if rt.model is not None and rt.model.card.dtype is not None:
        doc["dtype"] = rt.model.card.dtype  # what the weights run in (vllm-srun serve --dtype)
    if rt.failure is not None:
        doc["error"] = rt.failure
    headers = {"retry-after": str(int(RETRY_AFTER_S))} if rt.status is Status.LOADING else None
    return JSONResponse(doc, 200 if ready else 503, headers=headers)


async def metrics(request: HttpRequest) -> Response:
    return Response(_runtime(request).metrics.text(), 200, media_type=CONTENT_TYPE_LATEST)


async def not_routed(request: HttpRequest, exc: Exception) -> Response:
    """404 and 405 in the listener's error form, naming what is served."""
    rt = _runtime(request)
    status = exc.status_code if isinstance(exc, HTTPException) else 404
    where = f"{request.method} {request.url.path}"
    serves = f"POST {', '.join(rt.codec.paths)}; GET /v1/models, /health, /metrics"
    if status == 405:
        error: Exception = MethodNotAllowed(f"{where} is not allowed (this server serves {serves})")
    else:
        error = NotServed(f"no {where} here (this server serves {serves})")
    answer = error_answer(rt.codec, error)
    extra = dict(exc.headers or {}) if isinstance(exc, HTTPException) else {}
    return Response(answer.body, answer.status, headers={**dict(answer.headers), **extra})


ROUTES = [
    Route("/v1/systemone", answer, methods=["POST"]),
    Route("/v1/systemone/batch", answer, methods=["POST"]),
    Route("/v1/decisions", answer, methods=["POST"]),
    Route("/v1/models", models, methods=["GET"]),
    Route("/health", health, methods=["GET"]),
    Route("/metrics", metrics, methods=["GET"]),
]
ENDPOINTS = frozenset(route.path for route in ROUTES)


class RequestIds:
    """Every response carries ``x-typesafe-request-id`` (the request's ``x-request-id`` when it
    has one); each request is counted and timed."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        # Behind the router the request already has an id (Envoy's x-request-id): keep it, so
        # the client, Envoy's access log, the sidecar and this server name the request alike.
        given = next((v for k, v in scope.get("headers", ()) if k == b"x-request-id"), b"")
        request_id = given if _REQUEST_ID_SHAPE.fullmatch(given) else f"req_{_PROCESS}{next(_COUNT):016x}".encode()
        started = time.monotonic()
        status = 500

        async def send_with_id(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
                message["headers"] = [*message.get("headers", []), (REQUEST_ID.encode(), request_id)]
            await send(message)

        try:
            await self.app(scope, receive, send_with_id)
        finally:
            runtime: Runtime | None = scope.get("state", {}).get("runtime")
            if runtime is not None:
                endpoint = scope["path"] if scope["path"] in ENDPOINTS else "other"
                runtime.metrics.requests.labels(endpoint, str(status)).inc()
                runtime.metrics.latency.labels(endpoint).observe(time.monotonic() - started)


# ---------------------------------------------------------------------------- the app


def engine_loader(settings: ServerSettings) -> Loader:
    """Load the model named by the settings (a built-in or a checkpoint folder)."""

    def load() -> tuple[DecisionEngine, str]:
        from sr_runtime.loader import load_engine
        from sr_runtime.server.threads import math_threads

        threads = math_threads(settings)
        engine = load_engine(
            settings.model,
            device=settings.device,
            dtype=settings.dtype,
            max_model_len=settings.max_model_len,
            state_cache_bytes=settings.state_cache_mb * 2**20,
            token_budget=settings.batch_tokens,
            noul_model=settings.noul_model,
            noul_threads=None if threads is None else threads.heavy,
        )
        return engine, folder_date(model_folder(settings.model))

    return load


def create_app(
    settings: ServerSettings, load: Loader | None = None, on_failure: Callable[[str], None] | None = None
) -> Starlette:
    """The app; its lifespan starts loading the model (``load``, else the settings' model)."""

    @asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[dict[str, Any]]:
        runtime = Runtime(settings, load or engine_loader(settings), on_failure)
        runtime.start()
        try:
            yield {"runtime": runtime}
        finally:
            await anyio.to_thread.run_sync(runtime.close)

    return Starlette(
        routes=ROUTES,
        middleware=[Middleware(RequestIds)],
        exception_handlers={HTTPException: not_routed},
        lifespan=lifespan,
    )
