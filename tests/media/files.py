"""Real image and video files made here: PNG and JPEG through pillow, MP4 through av (FFmpeg)."""

from __future__ import annotations

import base64
import io
from typing import Any

import av
import numpy as np
from PIL import Image


def pixels(seed: int, width: int = 60, height: int = 40) -> np.ndarray:
    """[H, W, 3] uint8: smooth colour fields, so a resize keeps them recognisable."""
    rng = np.random.default_rng(seed)
    y, x = np.mgrid[0:height, 0:width]
    phases = rng.uniform(0, 2 * np.pi, 3)
    freqs = rng.uniform(0.05, 0.3, 3)
    channels = [127 + 120 * np.sin(freqs[c] * (x + y * (c + 1)) + phases[c]) for c in range(3)]
    return np.stack(channels, axis=-1).astype(np.uint8)


def image(seed: int = 0, width: int = 60, height: int = 40, fmt: str = "PNG") -> bytes:
    out = io.BytesIO()
    Image.fromarray(pixels(seed, width, height)).save(out, fmt)
    return out.getvalue()


def video(seed: int = 0, frames: int = 12, width: int = 48, height: int = 32, fps: int = 6) -> bytes:
    """An MP4 (MPEG-4 part 2, which every FFmpeg build encodes) whose frames drift in colour."""
    out = io.BytesIO()
    with av.open(out, "w", format="mp4") as container:
        stream = container.add_stream("mpeg4", rate=fps)
        stream.width, stream.height, stream.pix_fmt = width, height, "yuv420p"
        for i in range(frames):
            frame = av.VideoFrame.from_ndarray(pixels(seed * 1000 + i, width, height), format="rgb24")
            for packet in stream.encode(frame):
                container.mux(packet)
        for packet in stream.encode():
            container.mux(packet)
    return out.getvalue()


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def asset(data: bytes, kind: str = "image", fmt: str = "png") -> dict[str, Any]:
    return {"type": kind, "format": fmt, "data_base64": b64(data)}
