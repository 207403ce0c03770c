"""Tiny random decision checkpoints, written by our own code, for tests and benchmarks.

Each preset is a real checkpoint in the format `checkpoint.py` reads: a transformers model with
random weights (hidden 64), a byte-level BPE tokenizer trained here on a small built-in corpus,
a random code readout and a `decision_config.json`. The tokenizer has no pre-tokenizer split,
so its merges may cross the state/question boundary (`e.\\n\\n` is one token), which is the case
the state block size rule exists for. The same seed writes the same bytes.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from itertools import product
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import save_file
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

from sr_runtime.checkpoint import DECISION_CONFIG, READOUT
from sr_runtime.mask import AttentionMode
from sr_runtime.prompt import LAYOUTS
from sr_runtime.types import ChoiceQuestion, NoulQuestion, Question, ScoreQuestion

HIDDEN = 64
VOCAB = 1024
# d3's codes: A..Z, then AA, AB, ... up to 255 single-token codes.
CODES = tuple(
    [chr(c) for c in range(65, 91)]
    + ["".join(p) for p in product("ABCDEFGHIJ", repeat=2)]
    + ["".join(p) for p in product("KLMNOPQRSTUVWXYZ", repeat=2)]
)[:255]

CORPUS = """\
Our export button fails with a 500 since this morning. Open a ticket.
How do I export my invoices as CSV? The download link in the billing page is gone.
I was charged twice for the March invoice and I want a refund.
The app crashes on login after the latest update, every single time.
Can you reset my password? The reset email never arrives.
Thanks, the issue is solved now. Great support as always.
This is the third time I write about the same bug. Nobody answers.
Please cancel my subscription at the end of the month.
The dashboard is slow when I open reports with more than a year of data.
Your product is garbage and your team is useless.
Buy cheap watches now, click this link for a free prize!
I love the new dark mode, it looks great on my phone.
Our whole team is blocked: the API returns timeouts for every request.
Where can I find the documentation for the webhooks?
The refund window is 30 days from the date of purchase.
Our offices close on public holidays.
The shipment arrived damaged and two items are missing.
I would like to upgrade to the business plan with more seats.
Is there a way to add a second admin to our account?
The invoice shows the wrong company address, please fix it.
Payments, invoices and refunds. Outages, errors and bugs. Anything else.
low, medium, high, critical. calm, annoyed, angry, furious.
{"request": "Open a ticket.", "history": "How do I export my invoices?"}
"""


@dataclass(frozen=True, slots=True)
class Preset:
    name: str
    backbone: str  # "hybrid" (Qwen3.5 text: Gated DeltaNet + full attention) or "llama"
    attention_mode: AttentionMode
    prompt_layout: str
    temperature: float
    temperature_by_questions: dict[str, list[Any]] | None = None
    validated_length: int | None = None
    summary: str = ""
    vision: bool = False  # a Qwen3.5 vision tower: images and video
    heads: dict[str, Any] | None = None  # decision_config.json `heads`: trained heads beside the readout
    abstain: bool = False  # the last code is an abstain code (decision_config.json abstain_code)


PRESETS = {
    p.name: p
    for p in (
        Preset(
            "hybrid-prefix-bidir",
            "hybrid",
            "prefix_bidir",
            "header-v1",
            1.0,
            {"max_questions": [1, 4, 16], "temperature": [1.046, 1.0, 1.0, 1.0]},
            16384,
            "Qwen3.5-style hybrid (linear + full layers), prefix_bidir, header-v1, temperature_by_questions",
        ),
        Preset("hybrid-causal", "hybrid", "causal", "d3", 0.75, summary="Qwen3.5-style hybrid, causal, d3 layout"),
        Preset(
            "hybrid-noncausal",
            "hybrid",
            "noncausal_full_attention",
            "d3",
            0.75,
            summary="Qwen3.5-style hybrid, noncausal_full_attention (as public d3 checkpoints)",
        ),
        Preset("llama-causal", "llama", "causal", "d3", 1.0, summary="Llama-style, causal, d3 layout"),
        Preset(
            "llama-prefix-bidir",
            "llama",
            "prefix_bidir",
            "header-v1",
            1.0,
            validated_length=16384,
            summary="Llama-style, prefix_bidir, header-v1",
        ),
        Preset(
            "hybrid-vision",
            "hybrid",
            "prefix_bidir",
            "d3",
            1.0,
            validated_length=16384,
            summary="Qwen3.5-style hybrid with a Qwen3.5 vision tower (images, video), prefix_bidir",
            vision=True,
        ),
        Preset(
            "hybrid-heads",
            "hybrid",
            "prefix_bidir",
            "d3",
            1.0,
            validated_length=16384,
            summary=(
                "Qwen3.5-style hybrid, prefix_bidir, with a set readout, a router span head, a pii span head and "
                "an abstain code"
            ),
            heads={"set": True, "span": ["router"], "presets": {"pii": "span"}, "threshold": 0.5},
            abstain=True,
        ),
        Preset(
            "hybrid-vision-heads",
            "hybrid",
            "prefix_bidir",
            "d3",
            1.0,
            validated_length=16384,
            summary=(
                "hybrid-vision plus a set readout, router and broad span heads, a pii span head, box and track heads"
            ),
            vision=True,
            heads={
                "set": True,
                "span": ["router", "broad"],
                "presets": {"pii": "span"},
                "box": True,
                "track": True,
                "box_bins": 32,
                "threshold": 0.5,
            },
        ),
    )
}

# The tiny tower reads images at 48 px (3 x 3 rows of the backbone) and 8 frames of each video at
# 32 px (4 x 2 x 2 rows); the limits are what a d3-like card would declare, scaled down.
MEDIA = {
    "image_side": 48,
    "video_side": 32,
    "video_frames": 8,
    "max_asset_bytes": 8 * 2**20,
    "max_side": 1024,
    "max_video_frames": 300,
}


def _training_text() -> list[str]:
    """The corpus, plus prompts in both layouts so the scaffolding gets its own merges."""
    lines = CORPUS.splitlines()
    questions: list[Question] = [
        NoulQuestion("Does the user report a problem that blocks their work?"),
        ChoiceQuestion(
            (
                ("billing", "Payments, invoices and refunds"),
                ("engineering", "Outages, errors and bugs"),
                ("other", None),
            ),
            "Which team should handle this request?",
        ),
        ScoreQuestion(("calm", "annoyed", "angry"), "How angry is the customer?"),
    ]
    prompts = [
        layout.state_block(line) + layout.question_block(questions[i % len(questions)], CODES)
        for layout in LAYOUTS.values()
        for i, line in enumerate(lines)
    ]
    return lines + prompts


def train_tokenizer() -> Tokenizer:
    """Byte-level BPE with no pre-tokenizer split, so merges run across spaces and newlines."""
    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=VOCAB - len(CODES),
        min_frequency=2,
        max_token_length=8,  # keeps whole repeated prompt lines from becoming single tokens
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tokenizer.train_from_iterator(_training_text(), trainer)
    return _with_codes(tokenizer)


def _with_codes(trained: Tokenizer) -> Tokenizer:
    """Append one last-ranked merge per two-letter code, so every code is exactly one token.

    Single letters are already byte-level tokens. Merges, unlike added tokens, leave ordinary
    words whole ("Question" stays mergeable), so a state's last character can still join the
    question block's first token.
    """
    model = json.loads(trained.to_str())["model"]
    vocab: dict[str, int] = dict(model["vocab"])
    merges = [tuple(m) if isinstance(m, list) else tuple(m.split(" ")) for m in model["merges"]]
    for code in CODES:
        if len(code) == 2 and code not in vocab:
            vocab[code] = len(vocab)
            merges.append((code[0], code[1]))
    tokenizer = Tokenizer(models.BPE(vocab=vocab, merges=merges))
    tokenizer.pre_tokenizer = trained.pre_tokenizer
    tokenizer.decoder = trained.decoder
    return tokenizer


def _model_config(preset: Preset, vocab: int, hidden: int, layers: int | None) -> dict[str, Any]:
    heads = max(4, hidden // 64)
    common = {
        "vocab_size": vocab,
        "hidden_size": hidden,
        "intermediate_size": 2 * hidden,
        "num_attention_heads": heads,
        "num_key_value_heads": heads // 2,
        "head_dim": hidden // heads,
        "max_position_embeddings": 32768,
        # 0.1 at hidden 64, larger than the usual 0.02, so a wrong mask or a stale state moves answers visibly.
        "initializer_range": 0.8 / math.sqrt(hidden),
        "tie_word_embeddings": True,
    }
    if preset.backbone == "llama":
        return {
            **common,
            "model_type": "llama",
            "architectures": ["LlamaForCausalLM"],
            "num_hidden_layers": layers or 2,
        }
    n = layers or 4
    return {
        **common,
        "model_type": "qwen3_5_text",
        "architectures": ["Qwen3_5ForCausalLM"],
        "num_hidden_layers": n,
        # Qwen3.5's pattern: three linear layers, then one full-attention layer (tiny: two and two).
        "layer_types": (
            ["linear_attention", "full_attention"] * 2
            if n == 4
            else ["full_attention" if (i + 1) % 4 == 0 else "linear_attention" for i in range(n)]
        ),
        "linear_key_head_dim": hidden // heads,
        "linear_value_head_dim": hidden // heads,
        "linear_num_key_heads": heads // 2,
        "linear_num_value_heads": heads,
    }


def create(
    path: Path,
    preset_name: str,
    seed: int = 0,
    *,
    hidden: int = HIDDEN,
    layers: int | None = None,
    weights: bool = True,
) -> Path:
    """Write preset `preset_name` to `path` (created if needed); the same seed gives the same bytes.

    `hidden` and `layers` scale a preset up for benchmarks (tests use the tiny default).
    `weights=False` writes the configs and the tokenizer only, no weight file: the engine then
    makes the weights at random on its device (`Engine.load(path, random_init=SEED)`), so a
    benchmark of a 27B shape never holds it in host memory or on disk.
    """
    from transformers import AutoConfig, AutoModelForCausalLM, PreTrainedTokenizerFast
    from transformers.utils import logging as hf_logging

    if preset_name not in PRESETS:
        raise KeyError(f"unknown preset {preset_name!r} (presets: {', '.join(PRESETS)})")
    hf_logging.set_verbosity_error()
    hf_logging.disable_progress_bar()
    preset = PRESETS[preset_name]
    path.mkdir(parents=True, exist_ok=True)
    tokenizer = train_tokenizer()
    PreTrainedTokenizerFast(tokenizer_object=tokenizer).save_pretrained(path)

    raw = _model_config(preset, tokenizer.get_vocab_size(), hidden, layers)
    config = AutoConfig.for_model(raw.pop("model_type"), **raw)
    if weights:
        torch.manual_seed(seed)
        model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
        model.save_pretrained(path)
    else:
        config.dtype = torch.float32  # as save_pretrained writes it for the weights above
        config.architectures = raw["architectures"]
        config.save_pretrained(path)
    (path / "generation_config.json").unlink(missing_ok=True)

    if preset.vision:
        _create_vision(path, hidden, seed, weights)

    if weights:
        generator = torch.Generator().manual_seed(seed + 1)
        readout = torch.randn(len(CODES), hidden, generator=generator) / math.sqrt(hidden)
        save_file({"weight": readout.contiguous()}, str(path / READOUT))

    decision: dict[str, Any] = {
        "format_version": 1,
        "format_id": "vllm-sr-decision",
        "prompt": "d3",
        "base_model": f"vllm-sr/tiny-{preset.backbone}",
        "revision": f"seed-{seed}",
        "codes": list(CODES),
        "token_ids": [tokenizer.token_to_id(code) for code in CODES],
        "temperature": preset.temperature,
        "attention_mode": preset.attention_mode,
        "pooling": "last",
        "max_length": 32768,
        "readout_dtype": "float32",
        "prompt_layout": preset.prompt_layout,
    }
    if preset.validated_length is not None:
        decision["validated_length"] = preset.validated_length
    if preset.temperature_by_questions is not None:
        decision["temperature_by_questions"] = preset.temperature_by_questions
    if preset.vision:
        decision["media"] = {**MEDIA, "in_questions": True} if preset.heads is not None else MEDIA
    if preset.abstain:
        decision["abstain_code"] = CODES[-1]
    if preset.heads is not None:
        decision["heads"] = preset.heads
        if weights:
            _create_heads(path, preset.heads, len(CODES), hidden, seed)
    (path / DECISION_CONFIG).write_text(json.dumps(decision, indent=2) + "\n", encoding="utf-8")
    return path


def _create_vision(path: Path, hidden: int, seed: int, weights: bool = True) -> None:
    """A tiny random Qwen3.5 vision tower whose merger writes rows of the backbone's width
    (`weights=False`: its config alone)."""
    from transformers.models.qwen3_5.configuration_qwen3_5 import Qwen3_5VisionConfig
    from transformers.models.qwen3_5.modeling_qwen3_5 import Qwen3_5VisionModel

    from sr_runtime.vision import VISION

    config = Qwen3_5VisionConfig(
        depth=2,
        hidden_size=32,
        intermediate_size=64,
        num_heads=2,
        patch_size=8,
        spatial_merge_size=2,
        temporal_patch_size=2,
        out_hidden_size=hidden,
        num_position_embeddings=64,  # an 8 x 8 learned grid, resampled to each image's
        # Larger than the usual 0.02, so an image moves answers as visibly as text does.
        initializer_range=0.2,
    )
    if not weights:
        config.architectures, config.dtype = ["Qwen3_5VisionModel"], torch.float32  # as the weights' save writes
        config.save_pretrained(path / VISION)
        return
    torch.manual_seed(seed + 2)
    Qwen3_5VisionModel(config).save_pretrained(path / VISION)


def _create_heads(path: Path, heads: dict[str, Any], codes: int, hidden: int, seed: int) -> None:
    """Random heads of the shapes `heads.HeadsConfig.tensors` names, scaled like the readout."""
    from sr_runtime.checkpoint import _heads
    from sr_runtime.heads import HEADS

    generator = torch.Generator().manual_seed(seed + 3)
    tensors = {
        name: (torch.randn(shape, generator=generator) / math.sqrt(hidden)).contiguous()
        for name, shape in sorted(_heads(heads).tensors(codes, hidden).items())
    }
    save_file(tensors, str(path / HEADS))
