"""Sizes and times the compiled resources share, with the reason for each."""

from __future__ import annotations

MIB = 1024 * 1024

# The standard caps request bodies at 32 MiB (413 above). ext_proc buffers a body whole, so the
# listener, route and cluster buffers hold 32 MiB plus room for headers (gotcha 5).
BODY_LIMIT = 32 * MIB
BUFFER_LIMIT = BODY_LIMIT + MIB

# A System One API without max_deadline_ms: the time a request may take end to end.
DEFAULT_DEADLINE_MS = 60_000
# Model listings are answered by the sidecar from what it already knows, or by one upstream.
LISTING_TIMEOUT_MS = 10_000
# LLM generations stream for minutes; the stream idle timeout (5 min) still ends a stuck one.
LLM_TIMEOUT_MS = 600_000


def duration(ms: int) -> str:
    """Milliseconds in proto3 JSON Duration form: 3000 -> '3.000s'."""
    return f"{ms // 1000}.{ms % 1000:03d}s"
