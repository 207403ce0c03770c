"""Prompt layouts and the state block size rule.

A prompt is a state block (system turn, media, `State:` and the state) then a question block
(instructions and coded options). The question id never enters the prompt. Every question
block of a layout starts with the same text (`QUESTION_LEAD`), so the tokens at the boundary,
and with them the state block, are the same for every question of a request.

The state block size is the count of lead tokens that end by the end of the state block's
text: a token that joins the state's last character to the question block (say `.\\n\\n`)
belongs to the question. Layouts are specified for operators in docs/runtime/prompt-layouts.md.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from tokenizers import Tokenizer

from sr_runtime.errors import InvalidInput
from sr_runtime.token_cache import CachedTokenizer
from sr_runtime.types import Question, Text, coded_options, render_text

SYSTEM = "Read the state, then answer the question with the code of one option."
QUESTION_LEAD = "\n\n"

_DEFAULT_INSTRUCTIONS = {
    "noul": "Is this true?",
    "choice": "Which option fits best?",
    "score": "Which level fits best?",
    "set": "Which labels apply?",
    "span": "Mark the parts of the state each label names.",
    "box": "Locate the main object.",
    "track": "Follow the main object.",
}


def _instructions(question: Question) -> str:
    if question.instructions is None:
        return _DEFAULT_INSTRUCTIONS[question.type]
    return render_text(question.instructions)


def _option_lines(question: Question, codes: Sequence[str]) -> str:
    return "".join(f"{code}. {option.label}\n" for code, option in zip(codes, coded_options(question)))


@dataclass(frozen=True, slots=True)
class Layout:
    """How one checkpoint family writes its prompts; `d3` and `header-v1` are the two in use."""

    name: str

    def state_block(self, state: Text) -> str:
        return "".join(self.state_parts(state))

    def state_parts(self, state: Text, lead: Sequence[str] = ()) -> list[str]:
        """The state block as text pieces, the media read before the state (`lead`) between them.

        Seed 001: a state block is the system turn, the media, `State:` and the state. Without
        lead media the pieces join to exactly the text-only state block.
        """
        if self.name == "header-v1":
            return [f"### System\n{SYSTEM}\n\n", *lead, f"### State\n{render_text(state)}"]
        return [f"{SYSTEM}\n\n", *lead, f"State:\n{render_text(state)}"]

    def question_block(self, question: Question, codes: Sequence[str]) -> str:
        options = _option_lines(question, codes)
        if self.name == "header-v1":
            n = len(coded_options(question))
            return (
                f"{QUESTION_LEAD}### Question ({question.type}, {n} options)\n{_instructions(question)}\n\n"
                f"### Options\n{options}\n### Answer\n"
            )
        return f"{QUESTION_LEAD}Question: {_instructions(question)}\n{options}Answer:"


LAYOUTS = {name: Layout(name) for name in ("d3", "header-v1")}


# The id a media position carries: the backbone replaces its embedding with the tower's, so the
# id itself is never read.
MEDIA_TOKEN = 0


@dataclass(frozen=True, eq=False, slots=True)
class MediaSpan:
    """An asset in a prompt: where its tokens start, the tower's rows for them, and its digest."""

    start: int
    embeds: Any  # torch.Tensor [n, hidden]
    digest: str  # of the asset's bytes: two states are one only if their media are

    def __len__(self) -> int:
        return int(self.embeds.shape[0])


@dataclass(frozen=True, slots=True)
class PromptTokens:
    """One question's prompt as tokens: the state block (S tokens) then the question block.

    `media` are the state's assets, each standing at its place: MEDIA_TOKEN ids in `state`.
    """

    state: tuple[int, ...]
    question: tuple[int, ...]
    media: tuple[MediaSpan, ...] = ()
    # Each state token's characters in the state block, end excluded; (-1, -1) for media tokens.
    offsets: tuple[tuple[int, int], ...] = ()
    question_media: tuple[MediaSpan, ...] = ()  # assets in the question block; `start` counts from its first token

    def __len__(self) -> int:
        return len(self.state) + len(self.question)


def state_block_size(offsets: Sequence[tuple[int, int]], state_chars: int) -> int:
    """The count of lead tokens that end by character `state_chars`."""
    size = 0
    for _, end in offsets:
        if end > state_chars:
            break
        size += 1
    return size


def checked_state_tokens(value: object, rule_size: int) -> int:
    """A caller-given state block size: an int (never a bool) within the state block."""
    # bool is a subclass of int: `True` would otherwise make a one-token state block.
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidInput(f"the state size must be an int, not {type(value).__name__}")
    if not 1 <= value <= rule_size:
        raise InvalidInput(f"the state size {value} is outside 1..{rule_size} (the state block's tokens)")
    return value


def encode_prompts(
    tokenizer: Tokenizer | CachedTokenizer,
    state_block: str,
    question_blocks: Sequence[str],
    state_tokens: object = None,
) -> list[PromptTokens]:
    """Tokenize a request's prompts, reading the state once.

    The first prompt is tokenized whole; the state block is its first S tokens. Every question
    block is then tokenized from the character where the question's first token starts (the
    "tail"), never the whole state again. If the first question's tail tokens differ from its
    whole-prompt tokens, the tokenizer's split is not local here, and every prompt is tokenized
    whole instead (each question then carries its own state block).
    """
    first = tokenizer.encode(state_block + question_blocks[0], add_special_tokens=False)
    rule = state_block_size(first.offsets, len(state_block))
    size = rule if state_tokens is None else checked_state_tokens(state_tokens, rule)
    cut = first.offsets[size][0]
    tails = tokenizer.encode_batch([state_block[cut:] + block for block in question_blocks], add_special_tokens=False)
    if tails[0].ids == first.ids[size:]:
        state, offsets = tuple(first.ids[:size]), tuple(first.offsets[:size])
        return [PromptTokens(state, tuple(tail.ids), offsets=offsets) for tail in tails]
    wholes = tokenizer.encode_batch([state_block + block for block in question_blocks], add_special_tokens=False)
    out = []
    for whole in wholes:
        own = state_block_size(whole.offsets, len(state_block))
        own = own if state_tokens is None else checked_state_tokens(state_tokens, own)
        out.append(PromptTokens(tuple(whole.ids[:own]), tuple(whole.ids[own:]), offsets=tuple(whole.offsets[:own])))
    return out


def split_placeholders(text: str, placeholders: Sequence[str]) -> list[str]:
    """Text and placeholders in turn: [text, placeholder, text, ..., text] (texts may be empty)."""
    if not placeholders:
        return [text]
    # Longest first, so a placeholder that contains another is matched whole.
    pattern = "|".join(re.escape(p) for p in sorted(placeholders, key=len, reverse=True))
    return re.split(f"({pattern})", text)


def encode_media_prompts(
    tokenizer: Tokenizer | CachedTokenizer,
    state_block: str,
    media: Mapping[str, tuple[Any, str]],
    question_blocks: Sequence[str],
    state_tokens: object = None,
) -> list[PromptTokens]:
    """`encode_prompts` for a state block whose placeholders stand for media.

    `media` maps each placeholder to the tower's rows for it and its digest. The text before
    the last placeholder is tokenized piece by piece (an asset is a token boundary, as in every
    VLM processor); the text after it is the state's end and meets the question block under the
    state block size rule, exactly as in a text-only prompt.
    """
    pieces = split_placeholders(state_block, [p for p in media if p in state_block])
    if len(pieces) == 1:
        return encode_prompts(tokenizer, state_block, question_blocks, state_tokens)
    if state_tokens is not None:
        raise InvalidInput("a state size cannot be given for a state with media")
    lead: list[int] = []
    offsets: list[tuple[int, int]] = []
    spans: list[MediaSpan] = []
    at = 0  # characters of the state block before this piece
    for i, piece in enumerate(pieces[:-1]):
        if i % 2:  # a placeholder
            embeds, digest = media[piece]
            spans.append(MediaSpan(len(lead), embeds, digest))
            lead += [MEDIA_TOKEN] * int(embeds.shape[0])
            offsets += [(-1, -1)] * int(embeds.shape[0])
        elif piece:
            encoding = tokenizer.encode(piece, add_special_tokens=False)
            lead += encoding.ids
            offsets += [(a + at, b + at) for a, b in encoding.offsets]
        at += len(piece)
    tail = (
        encode_prompts(tokenizer, pieces[-1], question_blocks)
        if pieces[-1]
        else _questions_alone(tokenizer, question_blocks)
    )
    return [
        PromptTokens((*lead, *p.state), p.question, tuple(spans), (*offsets, *((a + at, b + at) for a, b in p.offsets)))
        for p in tail
    ]


def _questions_alone(tokenizer: Tokenizer | CachedTokenizer, question_blocks: Sequence[str]) -> list[PromptTokens]:
    """A state that ends with an asset: each question block starts its own tokens."""
    return [
        PromptTokens((), tuple(e.ids)) for e in tokenizer.encode_batch(list(question_blocks), add_special_tokens=False)
    ]


def with_question_media(
    tokenizer: Tokenizer, prompt: PromptTokens, rest: Sequence[str], media: Mapping[str, tuple[Any, str]]
) -> PromptTokens:
    """A prompt whose question block went on past its first placeholder: `rest` is that
    placeholder, then text, placeholder, ..., text ([P, text, P, ..., text]); each asset stands
    at its place, and each text piece is tokenized on its own (an asset is a token boundary)."""
    ids = list(prompt.question)
    spans: list[MediaSpan] = []
    for i, piece in enumerate(rest):
        if i % 2 == 0:  # a placeholder
            embeds, digest = media[piece]
            spans.append(MediaSpan(len(ids), embeds, digest))
            ids += [MEDIA_TOKEN] * int(embeds.shape[0])
        elif piece:
            ids += tokenizer.encode(piece, add_special_tokens=False).ids
    return PromptTokens(prompt.state, tuple(ids), prompt.media, prompt.offsets, tuple(spans))
