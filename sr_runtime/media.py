"""Images and videos as a vision tower reads them: decoded, checked against the card, as pixels.

    pixels = decode(asset, limits)     # [T, 3, H, W] in [0, 1]: an image is one frame

Images go through `pillow`, videos through `av` (FFmpeg). The model card's limits (bytes,
resolution, frames) are checked while decoding, before any pixel reaches the tower: a file over
a limit is refused with `invalid_input` (seed 002: "the input is malformed or longer than the
model reads"), never shrunk in silence. A video is read as `frames` frames spaced evenly over its
length, the way the Qwen-VL processors sample, so a long video costs what a short one does.
"""

from __future__ import annotations

import io
from dataclasses import dataclass

import av
import numpy as np
import torch
from PIL import Image, UnidentifiedImageError

from sr_runtime.errors import InvalidInput
from sr_runtime.types import Media


@dataclass(frozen=True, slots=True)
class MediaLimits:
    """What a model card lets in: bytes per asset, pixels per side, frames per video."""

    max_asset_bytes: int
    max_side: int
    max_video_frames: int
    frames: int  # frames sampled from each video for the tower


class MediaRefused(InvalidInput):
    """An asset that cannot be read or is over a card limit; `reason` is seed 002's fixed word."""

    def __init__(self, placeholder: str, message: str, reason: str, limit: int | None = None) -> None:
        super().__init__(f"asset {placeholder!r}: {message}")
        self.reason = reason
        self.limit = limit


def decode(placeholder: str, media: Media, limits: MediaLimits) -> tuple[torch.Tensor, list[float], int]:
    """[T, 3, H, W] float pixels in [0, 1] (one frame for an image, `limits.frames` for a video),
    each frame's time in seconds from the video's start, and how many frames the asset has."""
    if len(media.data) > limits.max_asset_bytes:
        raise MediaRefused(
            placeholder,
            f"{len(media.data)} bytes, over the model's {limits.max_asset_bytes}",
            "asset_too_large",
            limits.max_asset_bytes,
        )
    frames, times, total = (
        _video(placeholder, media.data, limits)
        if media.kind == "video"
        else ([_image(placeholder, media.data)], [0.0], 1)
    )
    for frame in frames:
        if max(frame.shape[:2]) > limits.max_side:
            h, w = frame.shape[:2]
            raise MediaRefused(
                placeholder,
                f"{w}x{h} pixels, over the model's {limits.max_side} per side",
                "resolution_too_large",
                limits.max_side,
            )
    # [T, H, W, 3] uint8 -> [T, 3, H, W] in [0, 1]
    return torch.from_numpy(np.stack(frames)).permute(0, 3, 1, 2).float() / 255.0, times, total


def _image(placeholder: str, data: bytes) -> np.ndarray:
    try:
        with Image.open(io.BytesIO(data)) as image:
            return np.asarray(image.convert("RGB"))
    except (UnidentifiedImageError, OSError, ValueError):
        raise MediaRefused(
            placeholder, "not a readable image (pillow knows no format in it)", "invalid_asset"
        ) from None


def _video(placeholder: str, data: bytes, limits: MediaLimits) -> tuple[list[np.ndarray], list[float], int]:
    # Two passes, so only the sampled frames are ever held: count (up to the limit), then keep picks.
    try:
        with av.open(io.BytesIO(data), mode="r") as container:
            if not container.streams.video:
                raise MediaRefused(placeholder, "holds no video stream", "invalid_asset")
            count = 0
            for _ in container.decode(video=0):
                count += 1
                if count > limits.max_video_frames:
                    raise MediaRefused(
                        placeholder,
                        f"more than the model's {limits.max_video_frames} frames",
                        "too_many_frames",
                        limits.max_video_frames,
                    )
        if count == 0:
            raise MediaRefused(placeholder, "holds no frames", "invalid_asset")
        # Evenly spaced over the whole video, first and last frame included.
        picks = set(np.linspace(0, count - 1, limits.frames).round().astype(int).tolist())
        with av.open(io.BytesIO(data), mode="r") as container:
            rate = float(container.streams.video[0].average_rate or 1)
            kept = {
                i: (f.to_ndarray(format="rgb24"), f.time if f.time is not None else i / rate)
                for i, f in enumerate(container.decode(video=0))
                if i in picks
            }
    except av.error.FFmpegError as exc:
        raise MediaRefused(placeholder, f"not a readable video (FFmpeg: {exc.strerror})", "invalid_asset") from None
    order = np.linspace(0, count - 1, limits.frames).round().astype(int).tolist()
    return [kept[i][0] for i in order], [float(kept[i][1]) for i in order], count
