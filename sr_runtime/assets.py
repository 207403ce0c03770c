"""A request's assets as the engine reads them: decoded, through the tower, once per request.

    assets = read_assets(vision, request, state_block)   # placeholder -> Asset, for those it reads
    the_one(question, assets)                            # a box's image or a track's video

Only assets whose placeholder the state block holds are read; a request with media on a model
without a vision tower is `invalid_input`.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

import torch

from sr_runtime.errors import InvalidInput
from sr_runtime.media import decode
from sr_runtime.types import BoxQuestion, DecisionRequest, Question, TrackQuestion
from sr_runtime.vision import VisionTower


@dataclass(frozen=True, slots=True)
class Asset:
    """One asset as the tower read it: its rows, digest, kind, and its frames' rows and times."""

    rows: torch.Tensor  # [n, hidden]
    digest: str  # sha256 of its bytes: the state cache tells states with other media apart by it
    kind: str
    frames: torch.Tensor  # [G, hidden]: mean rows of each frame group (an image: one group)
    times: tuple[float, ...]  # seconds of each group's first frame
    whole: bool  # every frame was read (a video longer than its sample is not)


def read_assets(vision: VisionTower | None, request: DecisionRequest, state_block: str) -> dict[str, Asset]:
    used = [p for p in request.media if p in state_block]
    if not used:
        return {}
    if vision is None:
        raise InvalidInput("this model reads text only; the request carries media")
    out = {}
    for placeholder in used:
        media = request.media[placeholder]
        pixels, times, total = decode(placeholder, media, vision.limits)
        rows, frames = vision.rows_and_frames(pixels)
        digest = hashlib.sha256(media.data).hexdigest()
        out[placeholder] = Asset(
            rows, digest, media.kind, frames, tuple(times[:: vision.temporal]), total <= pixels.shape[0]
        )
    return out


def the_one(question: Question, assets: dict[str, Asset]) -> tuple[torch.Tensor, tuple[float, ...]] | None:
    """A box question reads exactly one image, a track question exactly one video."""
    if not isinstance(question, (BoxQuestion, TrackQuestion)):
        return None
    kind = "image" if isinstance(question, BoxQuestion) else "video"
    found = [a for a in assets.values() if a.kind == kind]
    if len(found) != 1:
        raise InvalidInput(
            f"a {question.type} question reads exactly one {kind} in the state, and this one has {len(found)}",
            reason=f"{question.type}_needs_one_{kind}",
        )
    return found[0].frames, found[0].times
