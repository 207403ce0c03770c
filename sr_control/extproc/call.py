"""A System One request in flight: what every step of its path (systemone_path.py) hands on.

Reading makes it (read.py); choosing adds the ranking (choose.py); a call to a member marks whom
it went to and who answered (forward.py, members.py, failover.py); answering reads it
(answer.py). It is not a step itself, only the record the steps share.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from sr_control.extproc.choose import NOT_RANKED, Ranking
from sr_control.extproc.data import Member
from sr_control.extproc.incoming import Incoming
from systemone import ClientRequest, ListenerCodec


@dataclass(slots=True)
class Call:
    incoming: Incoming
    codec: ListenerCodec  # the listener's: it read the request and writes the client's answer
    req: ClientRequest
    deadline_ms: int  # the client's, capped by the listener's (read.request_deadline_ms)
    sent: bytes = b""  # the client's JSON body as it came (b"" for a multipart body)
    ranking: Ranking = NOT_RANKED  # the members able to answer, best first (choose.py)
    member: Member | None = None  # the member Envoy was asked to forward to, until it answers
    tried: set[str] = field(default_factory=set)
    answered_by: str | None = None  # the member whose answer the client gets (the last, if several)

    def remaining_s(self) -> float:
        """What is left of the request's deadline, in seconds (negative once it has passed)."""
        return self.deadline_ms / 1000 - (time.monotonic() - self.incoming.started)

    def left_ms(self) -> int:
        """What is left of the deadline as a member is told it: whole ms, at least 1."""
        return max(1, int(self.remaining_s() * 1000))


__all__ = ["Call"]
