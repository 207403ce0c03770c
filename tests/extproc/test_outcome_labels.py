"""How an access log entry's details (Envoy's RESPONSE_CODE_DETAILS, as measured against Envoy
1.40 for each case) name who answered in ``vsr_listener_responses_total``."""

from __future__ import annotations

import pytest

from sr_control.extproc.outcomes import answered_by


@pytest.mark.parametrize(
    ("details", "expected"),
    [
        ("via_upstream", ("member", "")),
        ("", ("sidecar", "")),  # an ext_proc immediate response without details: the sidecar's
        ("direct_response", ("route", "")),
        ("ext_proc_error_per-message_timeout_exceeded", ("envoy", "ext_proc_error_per-message_timeout_exceeded")),
        ("response_timeout", ("envoy", "response_timeout")),
        ("request_payload_too_large", ("envoy", "request_payload_too_large")),
        ("http1.headers_too_large", ("envoy", "http1.headers_too_large")),
        ("no_healthy_upstream", ("envoy", "no_healthy_upstream")),
        # A variable tail is cut, so the label's values stay few.
        (
            "upstream_reset_before_response_started{connection_termination}",
            ("envoy", "upstream_reset_before_response_started"),
        ),
    ],
)
def test_details_name_who_answered(details: str, expected: tuple[str, str]) -> None:
    assert answered_by(details) == expected
