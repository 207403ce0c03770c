"""Every error the runtime raises, as one tree.

    CheckpointError              the model cannot start: one line naming the field and the fix
    DecisionError                one question (or a whole request) cannot be answered; carries `code`
     ├── InvalidQuestion         invalid_question: malformed, or a type/size this model does not answer
     ├── InvalidInput            invalid_input: the state or a request field is unusable
     ├── MaxLengthExceeded       max_length_exceeded: a prompt is longer than the model may read
     └── InvalidModelOutput      invalid_model_output: the model produced no valid answer
    Stopped                      an engine call given up between passes: nobody waits for it

`code` is the standard's error word (seed 002's table); the HTTP server maps it to a status.
"""

from __future__ import annotations


class CheckpointError(Exception):
    """A checkpoint or built-in model that cannot be served; the message is one line."""


class Stopped(Exception):
    """``answer_batch(..., stop=)`` gave up between two passes because ``stop()`` said every
    request of the call was abandoned (its deadline passed, or its client went away)."""


class DecisionError(Exception):
    """A question that cannot be answered; `reason` is a fixed word where the code is too broad."""

    code = "invalid_input"
    reason: str | None = None

    def __init__(self, message: str, reason: str | None = None) -> None:
        super().__init__(message)
        if reason is not None:
            self.reason = reason


class InvalidQuestion(DecisionError):
    """The question is malformed, or the model does not answer its type, size or fields."""

    code = "invalid_question"


class InvalidInput(DecisionError):
    """The state, or a field of the request other than a question, cannot be used."""

    code = "invalid_input"


class MaxLengthExceeded(DecisionError):
    """A prompt is longer than the model's maximum length; nothing is ever truncated."""

    code = "max_length_exceeded"

    def __init__(self, tokens: int, limit: int, long_context_limit: int | None = None) -> None:
        if long_context_limit is None:
            message = f"the prompt is {tokens} tokens, longer than the model's maximum length {limit}"
        else:
            message = (
                f"the prompt is {tokens} tokens, longer than the length the model was validated at ({limit}); "
                f"send the header TypeSafe-Danger-Zone-Long-Context: true to read up to {long_context_limit}"
            )
        super().__init__(message)
        self.tokens = tokens
        self.limit = limit


class InvalidModelOutput(DecisionError):
    """The model produced something that is not a probability distribution."""

    code = "invalid_model_output"
