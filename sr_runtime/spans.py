"""From per-token label probabilities to character spans of the state text.

A token belongs to label l when its probability of l is at or over the threshold; each maximal
run of such tokens is one span, from its first token's first character to its last token's last
(end excluded), with the whitespace at either edge left out. Media tokens and the tokens of the
system turn are never part of a span: only tokens wholly inside the state text are read. A
span's probability is the mean over its tokens.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from sr_runtime.types import Span


def decode_spans(
    probs: torch.Tensor,  # [S, n]
    offsets: Sequence[tuple[int, int]],  # each state token's characters in the state block
    text: str,  # the state text, which ends the state block
    text_start: int,  # where it starts in the state block
    labels: Sequence[str],
    threshold: float,
) -> tuple[Span, ...]:
    inside = [a >= text_start and b > a for a, b in offsets]
    spans: list[Span] = []
    for index, label in enumerate(labels):
        run: list[int] = []
        for t in range(len(offsets) + 1):  # one step past the end closes the last run
            if t < len(offsets) and inside[t] and float(probs[t, index]) >= threshold:
                run.append(t)
                continue
            if run:
                span = _span(run, probs[:, index], offsets, text, text_start, label)
                if span is not None:
                    spans.append(span)
                run = []
    return tuple(sorted(spans, key=lambda s: (s.start, s.end, s.label)))


def _span(
    run: list[int], p: torch.Tensor, offsets: Sequence[tuple[int, int]], text: str, text_start: int, label: str
) -> Span | None:
    start, end = offsets[run[0]][0] - text_start, offsets[run[-1]][1] - text_start
    while start < end and text[start].isspace():
        start += 1
    while end > start and text[end - 1].isspace():
        end -= 1
    if start == end:
        return None
    return Span(label, start, end, text[start:end], float(p[run].mean()))
