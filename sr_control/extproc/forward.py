"""Step 3, call, by Envoy (systemone_path.py): Envoy forwards the request to a vllm-sr/5.0 member.

    envoy_forwards(forwarding, member) -> bool     whether Envoy calls ``member`` (else the
                                                   sidecar calls it: members.py)
    through_envoy(sidecar, call, member) -> Forward   the cluster, ``/v1/decisions`` behind the
                                                   member's prefix, the body, the deadline
    member_body(req, sent, model)                  the body a vllm-sr/5.0 member gets, and the
                                                   plan's form (passthrough or convert)

What happens when the member answers is the next step's: fail over (failover.py), else the
answer (answer.py).
"""

from __future__ import annotations

from sr_control.compiler.limits import DEADLINE_MARGIN_MS
from sr_control.extproc.call import Call
from sr_control.extproc.data import DEFAULT_ALIASES, Member
from sr_control.extproc.envoy import Forward
from sr_control.extproc.incoming import Sidecar
from systemone import Batch, ClientRequest, Request
from systemone.ir import items
from systemone.writing import internal_body

DECISIONS = "/v1/decisions"
# What is left of the request's deadline when the sidecar sends it on, in ms: the member
# (vllm-srun serve) stops the request's work when it runs out (docs/extproc/flow.md).
DEADLINE_HEADER = "x-vsr-deadline-ms"


def envoy_forwards(forwarding: str, member: Member) -> bool:
    """Whether Envoy takes the request to ``member`` (else the sidecar calls it). ``auto``:
    Envoy where its cluster balances several hosts (per pod, with health checks and
    ejection); a member of one host the sidecar calls itself, one ext_proc message and
    Envoy's upstream work fewer (docs/extproc/flow.md)."""
    return forwarding == "envoy" or (forwarding == "auto" and member.several_hosts)


def through_envoy(sidecar: Sidecar, call: Call, member: Member) -> Forward:
    """What Envoy is told to send ``member``; the call counts as open to it until it answers."""
    body, form = member_body(call.req, call.sent, member.model)
    sidecar.metrics.diagnostics.labels(call.incoming.listener, form).inc()
    call.member = member
    call.answered_by = member.name  # unless it fails and another answers (failover.py)
    call.tried.add(member.name)
    sidecar.pool.begin(member)
    sets = [
        # The member stops at the deadline and answers 504 in JSON; Envoy's own timeout (an
        # empty 504) is the backstop after it.
        (DEADLINE_HEADER, str(call.left_ms())),
        ("x-envoy-upstream-rq-timeout-ms", str(call.left_ms() + DEADLINE_MARGIN_MS)),
        # Envoy's access log shows the path the client asked for, not /v1/decisions (without
        # the query: the header goes upstream too, and a query may hold a client's key).
        ("x-envoy-original-path", call.incoming.path.partition("?")[0]),
    ]
    if body is not None:
        sets.append(("content-type", "application/json"))
    # No key here: Envoy adds the member's own as the request leaves for its cluster, and a
    # listener with keys drops the client's (sr_control/compiler/credentials.py), so no
    # ext_proc answer carries a key.
    return Forward(
        cluster=member.cluster, path=member.path(DECISIONS), body=body, set_headers=tuple(sets), member=member.name
    )


def member_body(req: ClientRequest, sent: bytes, model: str) -> tuple[bytes | None, str]:
    """The body for a vllm-sr/5.0 member answering to ``model``, and the plan's form: None (the
    client's own bytes, ``sent``) when the plan is passthrough and every model the request names
    is ``model``; else the internal form, the plan's own unless a model name must change."""
    if not _names_only(req.ir, model):
        return internal_body(req.ir, model), "convert"
    if req.plan.kind == "passthrough":
        return None, "passthrough"
    # A client that already wrote the internal form (json.dumps spacing, every member in the
    # internal order) sent these very bytes: Envoy forwards them as they are, nothing to replace.
    return (None if req.plan.body == sent else req.plan.body), "convert"


def _names_only(ir: Request | Batch, model: str) -> bool:
    """Every model name in ``ir`` is absent, the standard's alias, or ``model``."""
    names = [ir.model, *(r.model for _, r in items(ir))] if isinstance(ir, Batch) else [ir.model]
    return all(n is None or n == model or n in DEFAULT_ALIASES for n in names)


__all__ = ["DEADLINE_HEADER", "DECISIONS", "envoy_forwards", "member_body", "through_envoy"]
