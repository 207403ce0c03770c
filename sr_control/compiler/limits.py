"""Sizes and times the compiled resources share, with the reason for each."""

from __future__ import annotations

MIB = 1024 * 1024

# The standard caps request bodies at 32 MiB (413 above). ext_proc buffers a body whole, so the
# listener, route and cluster buffers hold 32 MiB plus room for headers (gotcha 5).
BODY_LIMIT = 32 * MIB
BUFFER_LIMIT = BODY_LIMIT + MIB

# A System One API without max_deadline_ms: the time a request may take end to end. The one
# place this default is stated; the sidecar reads it from here for data that carries none.
DEFAULT_DEADLINE_MS = 60_000
# Envoy's own timeouts on a System One request (the ext_proc message timeout, the route's and
# the upstream timeout the sidecar sets) end this long after the request's deadline. The
# sidecar answers 504 `deadline_exceeded` in the listener's form at the deadline itself; the
# margin covers its writing that answer on a busy machine, so an Envoy timeout (an empty 504)
# fires only when the sidecar cannot answer at all.
DEADLINE_MARGIN_MS = 2_000
# Model listings are answered by the sidecar from what it already knows, or by one upstream.
LISTING_TIMEOUT_MS = 10_000
# LLM generations stream for minutes; the stream idle timeout (5 min) still ends a stuck one.
LLM_TIMEOUT_MS = 600_000


def duration(ms: int) -> str:
    """Milliseconds in proto3 JSON Duration form: 3000 -> '3.000s'."""
    return f"{ms // 1000}.{ms % 1000:03d}s"
