"""Trained heads beside the code readout: a set readout, span heads, a box head, a track head.

Every head reads the backbone's last hidden states; `q` is the hidden state of a question's last
token (what the code readout reads), `H` the state block's hidden states, `r_l` a label's row.

    set     p_l = sigmoid(W_set[l] . q / T)                     one probability per label
    span    p_{t,l} = sigmoid((H_t W_s) . (E_l + q W_q) + b)     per state token and label
    box     P_e = softmax(W_box[e] q)  over B bins, per edge e;  edge_e = sum_b P_e[b] (b + 1/2) / B
    track   the box head on q + v_g W_v, v_g the mean tower row of the video's g-th frame pair

A span head reads each label through its own label embedding E_l (the label's code, as the
options are coded in the question block) and the question through q, so one head answers any
labels and instructions. The box head gives each edge as the expected value of a distribution
over B bins (the standard: "the expected value of that edge"); its confidence is one minus the
mean normalized entropy of the four distributions. Heads live in `heads.safetensors`; the
checkpoint's decision_config.json `heads` says which there are.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path

import torch
from safetensors import SafetensorError
from safetensors.torch import load_file

from sr_runtime.errors import CheckpointError
from sr_runtime.types import Box

HEADS = "heads.safetensors"
EDGES = ("top", "bottom", "left", "right")


@dataclass(frozen=True, slots=True)
class HeadsConfig:
    """decision_config.json `heads`: which heads the checkpoint has, and their thresholds."""

    set: bool = False
    span: tuple[str, ...] = ()  # span head names: router, broad
    presets: dict[str, str] = field(default_factory=dict)  # preset -> the question type its head answers
    box: bool = False
    track: bool = False
    box_bins: int = 32
    threshold: float = 0.5  # the model's own decision threshold for set labels and span tokens

    def tensors(self, codes: int, hidden: int) -> dict[str, tuple[int, ...]]:
        """Every tensor these heads need, and its shape."""
        shapes: dict[str, tuple[int, ...]] = {}
        if self.set:
            shapes["set.weight"] = (codes, hidden)
        for name in (*self.span, *(p for p, kind in self.presets.items() if kind == "span")):
            shapes |= {
                f"span.{name}.labels": (codes, hidden),
                f"span.{name}.state": (hidden, hidden),
                f"span.{name}.question": (hidden, hidden),
                f"span.{name}.bias": (1,),
            }
        if self.box:
            shapes["box.weight"] = (4 * self.box_bins, hidden)
        if self.track:
            shapes |= {"track.weight": (4 * self.box_bins, hidden), "track.frames": (hidden, hidden)}
        return shapes


class Heads:
    def __init__(self, config: HeadsConfig, weights: dict[str, torch.Tensor]) -> None:
        self.config = config
        self.w = weights

    @classmethod
    def load(cls, path: Path, config: HeadsConfig, codes: int, hidden: int, device: torch.device) -> Heads:
        try:
            weights = load_file(str(path / HEADS))
        except (OSError, SafetensorError) as exc:
            raise CheckpointError(f"cannot read {path / HEADS}: {exc}") from None
        for name, shape in config.tensors(codes, hidden).items():
            got = None if name not in weights else tuple(weights[name].shape)
            if got != shape:
                raise CheckpointError(f"{HEADS} {name} has shape {got}, expected {shape}")
        return cls(config, {k: v.to(device, torch.float32) for k, v in weights.items()})

    @classmethod
    def random(cls, config: HeadsConfig, codes: int, hidden: int, device: torch.device, seed: int) -> Heads:
        """Heads of the shapes `config` needs, at random (scaled like a readout), made on the device."""
        generator = torch.Generator(device).manual_seed(seed + 3)
        return cls(
            config,
            {
                name: torch.randn(shape, generator=generator, device=device) / math.sqrt(hidden)
                for name, shape in sorted(config.tensors(codes, hidden).items())
            },
        )

    def set_probabilities(self, q: torch.Tensor, n: int, temperature: float) -> list[float]:
        """[n]: each label's probability, independently (labels do not compete)."""
        return torch.sigmoid((self.w["set.weight"][:n] @ q.float()) / temperature).tolist()

    def span_probabilities(self, head: str, H: torch.Tensor, q: torch.Tensor, n: int) -> torch.Tensor:
        """[S, n]: each state token's probability of each label."""
        W_s, W_q = self.w[f"span.{head}.state"], self.w[f"span.{head}.question"]
        E, b = self.w[f"span.{head}.labels"][:n], self.w[f"span.{head}.bias"]
        labels = E + q.float() @ W_q  # [n, d]
        return torch.sigmoid((H.float() @ W_s) @ labels.T + b)

    def _box(self, weight: torch.Tensor, x: torch.Tensor) -> tuple[Box, float]:
        B = self.config.box_bins
        P = torch.softmax((weight @ x.float()).view(4, B), dim=-1)  # [edge, bin]
        centres = (torch.arange(B, dtype=torch.float32, device=P.device) + 0.5) / B
        top, bottom, left, right = (P @ centres).tolist()
        entropy = -(P * P.clamp_min(1e-12).log()).sum(-1) / math.log(B)
        # Expected edges need not be ordered; a box is, so each pair is read as (smaller, larger).
        box = Box(min(top, bottom), max(top, bottom), min(left, right), max(left, right))
        return box, float(1 - entropy.mean())

    def box(self, q: torch.Tensor) -> tuple[Box, float]:
        return self._box(self.w["box.weight"], q)

    def track(self, q: torch.Tensor, frames: torch.Tensor) -> list[tuple[Box, float]]:
        """One box per frame pair; `frames` is [G, d], the mean tower row of each."""
        return [self._box(self.w["track.weight"], q.float() + v.float() @ self.w["track.frames"]) for v in frames]
