"""Decision checkpoints: a Hugging Face style folder plus `decision_config.json`.

    config.json  model.safetensors  tokenizer.json  readout.safetensors  decision_config.json

`decision_config.json` says how to read the model: answer codes and their token ids, the
temperature, the attention mode, the prompt layout and the lengths. Anything this runtime does
not know stops start-up with one line, so a newer checkpoint never runs with a silently wrong
layout or temperature. A folder without `decision_config.json` is a stock base model and runs
zero-shot: the readout is the LM head's rows of the answer-code tokens, causal, T = 1.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tokenizers import Tokenizer

from sr_runtime.errors import CheckpointError
from sr_runtime.mask import ATTENTION_MODES, AttentionMode

DECISION_CONFIG = "decision_config.json"
READOUT = "readout.safetensors"
TOKENIZER = "tokenizer.json"

FORMAT_VERSIONS = (1,)
PROMPTS = ("d3",)
PROMPT_LAYOUTS = ("d3", "header-v1")
POOLINGS = ("last",)
READOUT_DTYPES = ("float32", "bfloat16", "float16")
MAX_CODES = 255

# Zero-shot codes: option letters, read as the token that follows "Answer:" (a space, then the letter).
ZERO_SHOT_CODES = tuple(chr(c) for c in range(ord("A"), ord("Z") + 1))


@dataclass(frozen=True, slots=True)
class MediaConfig:
    """`media`: how frames reach the vision tower, and the card's limits on what a request sends."""

    image_side: int  # longer side of an image as the tower reads it, in pixels
    video_side: int  # the same for each sampled video frame
    video_frames: int  # frames sampled evenly from every video
    max_asset_bytes: int
    max_side: int  # longest side, in pixels, of an image or video a request may send
    max_video_frames: int  # frames a video may have
    in_questions: bool = False  # placeholders in instructions and criteria are read as media too


@dataclass(frozen=True, slots=True)
class DecisionConfig:
    """`decision_config.json`, checked. Field names are the file's."""

    format_version: int
    format_id: str
    prompt: str
    base_model: str
    revision: str
    codes: tuple[str, ...]
    token_ids: tuple[int, ...]
    temperature: float
    attention_mode: AttentionMode
    pooling: str
    max_length: int
    readout_dtype: str
    validated_length: int | None = None
    temperature_by_questions: tuple[tuple[int, ...], tuple[float, ...]] | None = None
    prompt_layout: str = "d3"
    media: MediaConfig | None = None
    heads: Any = None  # heads.HeadsConfig, read by `_heads`
    abstain_code: str | None = None  # the last code, offered beside the options as "rather not answer"


@dataclass(frozen=True, slots=True)
class Checkpoint:
    """A model folder that passed every start-up check; `zero_shot` when it has no decision config."""

    path: Path
    config: DecisionConfig
    tokenizer: Tokenizer
    zero_shot: bool


def _fail(message: str) -> CheckpointError:
    return CheckpointError(message)


def _int(name: str) -> Callable[[Any], int]:
    def check(value: Any) -> int:
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise _fail(f"invalid {DECISION_CONFIG} {name} {value!r} (must be a positive integer)")
        return value

    return check


def _text(name: str) -> Callable[[Any], str]:
    def check(value: Any) -> str:
        if not isinstance(value, str) or not value:
            raise _fail(f"invalid {DECISION_CONFIG} {name} {value!r} (must be a non-empty string)")
        return value

    return check


def _one_of(name: str, supported: tuple[Any, ...]) -> Callable[[Any], Any]:
    def check(value: Any) -> Any:
        # `True == 1` in Python, so a bool must not pass for the integer format_version.
        if isinstance(value, bool) or value not in supported:
            raise _fail(f"unsupported {DECISION_CONFIG} {name} {value!r} (supported: {', '.join(map(str, supported))})")
        return value

    return check


def _temperature(name: str, value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value <= 0:
        raise _fail(f"invalid {DECISION_CONFIG} {name} {value!r} (must be positive and finite)")
    return float(value)


def _codes(value: Any) -> tuple[str, ...]:
    if not isinstance(value, list) or not 2 <= len(value) <= MAX_CODES:
        raise _fail(f"invalid {DECISION_CONFIG} codes (must be a list of 2 to {MAX_CODES} strings)")
    if not all(isinstance(c, str) and c for c in value):
        raise _fail(f"invalid {DECISION_CONFIG} codes (every code must be a non-empty string)")
    dupes = sorted({c for c in value if value.count(c) > 1})
    if dupes:
        raise _fail(f"invalid {DECISION_CONFIG} codes: {', '.join(map(repr, dupes))} listed twice")
    return tuple(value)


def _token_ids(value: Any) -> tuple[int, ...]:
    if not isinstance(value, list) or not all(isinstance(i, int) and not isinstance(i, bool) and i >= 0 for i in value):
        raise _fail(f"invalid {DECISION_CONFIG} token_ids (must be a list of non-negative integers)")
    return tuple(value)


def _by_questions(value: Any) -> tuple[tuple[int, ...], tuple[float, ...]]:
    shape = '{"max_questions": [1, 4, 16], "temperature": [1.046, 1.0, 1.0, 1.0]}'
    if not isinstance(value, dict) or set(value) != {"max_questions", "temperature"}:
        raise _fail(f"invalid {DECISION_CONFIG} temperature_by_questions (expected {shape})")
    bounds, temps = value["max_questions"], value["temperature"]
    if not isinstance(bounds, list) or not isinstance(temps, list) or not bounds:
        raise _fail(f"invalid {DECISION_CONFIG} temperature_by_questions (expected {shape})")
    bounds = [_int("temperature_by_questions.max_questions entry")(b) for b in bounds]
    if any(a >= b for a, b in zip(bounds, bounds[1:])):
        raise _fail(f"invalid {DECISION_CONFIG} temperature_by_questions.max_questions {bounds} (must increase)")
    if len(temps) != len(bounds) + 1:
        raise _fail(
            f"invalid {DECISION_CONFIG} temperature_by_questions: {len(bounds)} bounds need "
            f"{len(bounds) + 1} temperatures (the last one is for more questions than any bound), got {len(temps)}"
        )
    return tuple(bounds), tuple(_temperature("temperature_by_questions.temperature entry", t) for t in temps)


def _media(value: Any) -> MediaConfig:
    names = [n for n in MediaConfig.__dataclass_fields__ if n != "in_questions"]
    if not isinstance(value, dict) or not set(names) <= set(value) <= {*names, "in_questions"}:
        raise _fail(
            f"invalid {DECISION_CONFIG} media (expected an object with {', '.join(names)} and optionally in_questions)"
        )
    in_questions = value.get("in_questions", False)
    if not isinstance(in_questions, bool):
        raise _fail(f"invalid {DECISION_CONFIG} media.in_questions {in_questions!r} (must be true or false)")
    return MediaConfig(**{name: _int(f"media.{name}")(value[name]) for name in names}, in_questions=in_questions)


def _heads(value: Any) -> Any:
    from sr_runtime.heads import HeadsConfig

    shape = (
        '{"set": true, "span": ["router", "broad"], "presets": {"pii": "span"}, "box": true, "track": false, '
        '"box_bins": 32, "threshold": 0.5}'
    )
    known = set(HeadsConfig.__dataclass_fields__)
    if not isinstance(value, dict) or not set(value) <= known:
        raise _fail(f"invalid {DECISION_CONFIG} heads (expected an object like {shape})")
    for flag in ("set", "box", "track"):
        if not isinstance(value.get(flag, False), bool):
            raise _fail(f"invalid {DECISION_CONFIG} heads.{flag} {value[flag]!r} (must be true or false)")
    span = value.get("span", [])
    if not isinstance(span, list) or not set(span) <= {"router", "broad"} or len(set(span)) != len(span):
        raise _fail(
            f"invalid {DECISION_CONFIG} heads.span {span!r} (a list of distinct span head names: router, broad)"
        )
    presets = value.get("presets", {})
    if not isinstance(presets, dict) or not all(isinstance(k, str) and k and v == "span" for k, v in presets.items()):
        raise _fail(
            f'invalid {DECISION_CONFIG} heads.presets {presets!r} (preset name -> "span", the type its head answers)'
        )
    threshold = value.get("threshold", 0.5)
    if isinstance(threshold, bool) or not isinstance(threshold, (int, float)) or not 0 < threshold < 1:
        raise _fail(f"invalid {DECISION_CONFIG} heads.threshold {threshold!r} (must be between 0 and 1)")
    return HeadsConfig(
        set=value.get("set", False),
        span=tuple(span),
        presets=dict(presets),
        box=value.get("box", False),
        track=value.get("track", False),
        box_bins=_int("heads.box_bins")(value.get("box_bins", 32)),
        threshold=float(threshold),
    )


# Every field this runtime reads, and its check. A field not listed here stops start-up.
_REQUIRED: dict[str, Callable[[Any], Any]] = {
    "format_version": _one_of("format_version", FORMAT_VERSIONS),
    "format_id": _text("format_id"),
    "prompt": _one_of("prompt", PROMPTS),
    "base_model": _text("base_model"),
    "revision": _text("revision"),
    "codes": _codes,
    "token_ids": _token_ids,
    "temperature": lambda v: _temperature("temperature", v),
    "attention_mode": _one_of("attention_mode", ATTENTION_MODES),
    "pooling": _one_of("pooling", POOLINGS),
    "max_length": _int("max_length"),
    "readout_dtype": _one_of("readout_dtype", READOUT_DTYPES),
}
_OPTIONAL: dict[str, Callable[[Any], Any]] = {
    "validated_length": _int("validated_length"),
    "temperature_by_questions": _by_questions,
    "prompt_layout": _one_of("prompt_layout", PROMPT_LAYOUTS),
    "media": _media,
    "heads": _heads,
    "abstain_code": _text("abstain_code"),
}


def parse_decision_config(text: str) -> DecisionConfig:
    """Check `decision_config.json` text; the first problem raises a one-line CheckpointError."""
    try:
        raw = json.loads(text)
    except json.JSONDecodeError as exc:
        raise _fail(f"{DECISION_CONFIG} is not valid JSON: line {exc.lineno} column {exc.colno}: {exc.msg}") from None
    if not isinstance(raw, dict):
        raise _fail(f"{DECISION_CONFIG} must hold a JSON object")
    known = sorted([*_REQUIRED, *_OPTIONAL])
    for name in raw:
        if name not in _REQUIRED and name not in _OPTIONAL:
            raise _fail(f"unsupported {DECISION_CONFIG} field {name!r} (supported: {', '.join(known)})")
    missing = [name for name in _REQUIRED if name not in raw]
    if missing:
        raise _fail(f"{DECISION_CONFIG} is missing {', '.join(map(repr, missing))}")
    fields = {name: check(raw[name]) for name, check in {**_REQUIRED, **_OPTIONAL}.items() if name in raw}
    config = DecisionConfig(**fields)
    if len(config.token_ids) != len(config.codes):
        raise _fail(f"{DECISION_CONFIG} has {len(config.codes)} codes but {len(config.token_ids)} token_ids")
    if config.abstain_code is not None and config.abstain_code != config.codes[-1]:
        raise _fail(
            f"{DECISION_CONFIG} abstain_code {config.abstain_code!r} must be the last code "
            f"({config.codes[-1]!r}), so no option ever takes it"
        )
    if config.validated_length is not None and config.validated_length > config.max_length:
        raise _fail(
            f"{DECISION_CONFIG} validated_length {config.validated_length} is above max_length {config.max_length}"
        )
    return config


def check_tokenizer(tokenizer: Tokenizer) -> None:
    """A decision checkpoint's prompt is exactly its text's tokens: the tokenizer must add none."""
    if (
        tokenizer.encode("State", add_special_tokens=True).ids
        != tokenizer.encode("State", add_special_tokens=False).ids
    ):
        raise _fail(f"{TOKENIZER} adds special tokens around text; a decision checkpoint's tokenizer must add none")


def check_codes(config: DecisionConfig, tokenizer: Tokenizer) -> None:
    """Each code must be exactly its one token id in the tokenizer."""
    vocab = tokenizer.get_vocab_size()
    for index, (code, token_id) in enumerate(zip(config.codes, config.token_ids)):
        ids = tokenizer.encode(code, add_special_tokens=False).ids
        if ids != [token_id] or token_id >= vocab:
            raise _fail(
                f"{DECISION_CONFIG} code {code!r} (index {index}) is tokens {ids} in {TOKENIZER}, not "
                f"token_id {token_id}"
            )


def zero_shot_config(tokenizer: Tokenizer, model_config: dict[str, Any], base_model: str) -> DecisionConfig:
    """The reading of a stock base model: option letters after "Answer:", causal, T = 1.

    The code tokens are the letters as they follow "Answer:" (" A", " B", ...) when the
    tokenizer has them as single tokens, else the bare letters.
    """
    codes: list[str] = []
    token_ids: list[int] = []
    for prefix in (" ", ""):
        codes, token_ids = [], []
        for code in ZERO_SHOT_CODES:
            ids = tokenizer.encode(prefix + code, add_special_tokens=False).ids
            if len(ids) != 1:
                break
            codes.append(code)
            token_ids.append(ids[0])
        if len(codes) >= 2:
            break
    if len(codes) < 2:
        raise _fail(f"{TOKENIZER} has no single-token option letters (' A', 'A'), so the model cannot run zero-shot")
    max_length = model_config.get("max_position_embeddings")
    return DecisionConfig(
        format_version=1,
        format_id="zero-shot",
        prompt="d3",
        base_model=base_model,
        revision="local",
        codes=tuple(codes),
        token_ids=tuple(token_ids),
        temperature=1.0,
        attention_mode="causal",
        pooling="last",
        max_length=max_length if isinstance(max_length, int) and max_length > 0 else 2048,
        readout_dtype="float32",
    )


def read_checkpoint(path: Path, *, weights: bool = True) -> Checkpoint:
    """Read and check a model folder's decision config and tokenizer (the weights load later).

    `weights=False`: a folder of configs and tokenizer only, whose weights are made at random
    on the device (`Engine.load(..., random_init=SEED)`, for benchmarks): no readout file needed."""
    if not path.is_dir():
        raise _fail(f"{path} is not a folder (a checkpoint is a folder with config.json and tokenizer.json)")
    for name in ("config.json", TOKENIZER):
        if not (path / name).is_file():
            raise _fail(f"{path} has no {name}")
    try:
        model_config = json.loads((path / "config.json").read_text(encoding="utf-8"))
        tokenizer = Tokenizer.from_file(str(path / TOKENIZER))
    except Exception as exc:  # tokenizers raises a bare Exception on a malformed file
        raise _fail(f"{path}: cannot read config.json or {TOKENIZER}: {exc}") from None
    if not (path / DECISION_CONFIG).is_file():
        config = zero_shot_config(tokenizer, model_config, model_config.get("_name_or_path") or path.name)
        return Checkpoint(path, config, tokenizer, zero_shot=True)
    config = parse_decision_config((path / DECISION_CONFIG).read_text(encoding="utf-8"))
    check_tokenizer(tokenizer)
    check_codes(config, tokenizer)
    if weights and not (path / READOUT).is_file():
        raise _fail(f"{path} has a {DECISION_CONFIG} but no {READOUT}")
    return Checkpoint(path, config, tokenizer, zero_shot=False)
