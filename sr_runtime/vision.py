"""The vision tower: pixels to rows in the backbone's embedding space (Qwen3.5's tower).

    rows = tower(pixels)          # [T, 3, H, W] in [0, 1]  ->  [n, hidden]

Frames are resized so their longer side is the tower's side (both sides multiples of
patch x merge), normalized with CLIP's mean and std, and cut into patches of
`temporal_patch_size` frames x p x p pixels in the order the Qwen-VL processors use. The tower
(`Qwen3_5VisionModel`, the family d3 checkpoints use) reads them; its merger folds each
merge x merge block of patches into one row of the backbone's width. An image is one frame
repeated over the temporal patch, as in Qwen-VL, so it is (H/pm) x (W/pm) rows; a video of T
sampled frames is T/t times that.

A checkpoint carries a tower as `vision/` (config.json and model.safetensors) beside the
backbone, and its decision_config.json `media` says the sides, the frames and the card's limits.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from transformers import PreTrainedModel

from sr_runtime.checkpoint import MediaConfig
from sr_runtime.errors import CheckpointError
from sr_runtime.media import MediaLimits

VISION = "vision"
CLIP_MEAN = (0.48145466, 0.4578275, 0.40821073)
CLIP_STD = (0.26862954, 0.26130258, 0.27577711)


def patchify(frames: torch.Tensor, p: int, m: int, t: int) -> torch.Tensor:
    """[T, C, H, W] -> [T/t * H/p * W/p, C*t*p*p], patches of one merge block adjacent.

    The Qwen-VL processors' layout: the merger folds each run of m*m consecutive patches.
    """
    T, C, H, W = frames.shape
    gt, gh, gw = T // t, H // p, W // p
    x = frames.reshape(gt, t, C, gh // m, m, p, gw // m, m, p)
    x = x.permute(0, 3, 6, 4, 7, 2, 1, 5, 8)  # [gt, gh/m, gw/m, m, m, C, t, p, p]
    return x.reshape(gt * gh * gw, C * t * p * p)


class VisionTower:
    """A Qwen3.5 vision tower and the steps that bring frames to it."""

    def __init__(self, model: PreTrainedModel, media: MediaConfig, device: torch.device) -> None:
        self.model = model
        self.media = media
        self.device = device
        config = model.config
        self.patch, self.merge, self.temporal = config.patch_size, config.spatial_merge_size, config.temporal_patch_size
        self.mean = torch.tensor(CLIP_MEAN).view(1, 3, 1, 1)
        self.std = torch.tensor(CLIP_STD).view(1, 3, 1, 1)

    @property
    def limits(self) -> MediaLimits:
        m = self.media
        return MediaLimits(m.max_asset_bytes, m.max_side, m.max_video_frames, m.video_frames)

    @classmethod
    def load(
        cls,
        path: Path,
        media: MediaConfig | None,
        device: torch.device,
        dtype: torch.dtype = torch.float32,
        random_init: int | None = None,
    ) -> VisionTower | None:
        """The checkpoint's tower in `dtype` (None without one); `random_init`: built from its
        config.json at random on the device, no weights read."""
        folder = path / VISION
        if media is None and not folder.is_dir():
            return None
        if media is None or not folder.is_dir():
            raise CheckpointError(
                f"{path}: a vision tower needs both the {VISION}/ folder and decision_config.json media"
            )
        from transformers import AutoConfig
        from transformers.models.qwen3_5.modeling_qwen3_5 import Qwen3_5VisionModel

        config = AutoConfig.from_pretrained(folder, local_files_only=True)
        if config.model_type != "qwen3_5_vision":
            raise CheckpointError(
                f"unsupported vision tower model_type {config.model_type!r} in {folder}/config.json "
                "(supported: qwen3_5_vision)"
            )
        if random_init is not None:
            torch.manual_seed(random_init + 2)
            with device:
                tower = Qwen3_5VisionModel._from_config(config, dtype=dtype)
            return cls(tower.eval(), media, device)
        try:
            model = Qwen3_5VisionModel.from_pretrained(folder, dtype=dtype, local_files_only=True)
        except (OSError, ValueError, RuntimeError) as exc:
            raise CheckpointError(f"cannot load the vision tower in {folder}: {exc}".splitlines()[0]) from None
        return cls(model.to(device).eval(), media, device)  # type: ignore[arg-type]  # transformers' functools.wraps on PreTrainedModel.to is typed badly

    def _resized(self, frames: torch.Tensor, side: int) -> torch.Tensor:
        """Longer side to `side`, both sides multiples of patch x merge (at least one block)."""
        unit = self.patch * self.merge
        h, w = frames.shape[-2:]
        scale = side / max(h, w)
        size = [max(unit, round(n * scale / unit) * unit) for n in (h, w)]
        return F.interpolate(frames, size=size, mode="bilinear", align_corners=False, antialias=True)

    def rows_and_frames(self, pixels: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """The tower's rows [n, hidden], and their mean over each group of `temporal` frames [G, hidden]."""
        rows = self(pixels)
        groups = -(-pixels.shape[0] // self.temporal)
        return rows, rows.view(groups, -1, rows.shape[-1]).mean(1)

    @torch.inference_mode()
    def __call__(self, pixels: torch.Tensor) -> torch.Tensor:
        """[n, hidden]: the tower's rows for one image (T = 1) or one video's sampled frames."""
        side = self.media.image_side if pixels.shape[0] == 1 else self.media.video_side
        x = (self._resized(pixels, side) - self.mean) / self.std
        if x.shape[0] % self.temporal:  # an image, or an odd frame count: repeat the last frame
            x = torch.cat([x, x[-1:].expand(self.temporal - x.shape[0] % self.temporal, -1, -1, -1)])
        t, (h, w) = x.shape[0] // self.temporal, x.shape[-2:]
        grid = torch.tensor([[t, h // self.patch, w // self.patch]], device=self.device)
        patches = patchify(x, self.patch, self.merge, self.temporal).to(self.device, self.model.dtype)
        out: Any = self.model(patches, grid_thw=grid)
        return out.pooler_output
