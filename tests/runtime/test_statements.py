"""Yes/no questions as the statement and negation `default`'s entailment reader weighs."""

from __future__ import annotations

import pytest

from sr_runtime.builtins.nli import FALLBACK_THRESHOLD, THRESHOLD, readings
from sr_runtime.builtins.statements import not_true, statements
from sr_runtime.errors import InvalidQuestion
from sr_runtime.types import NoulQuestion


@pytest.mark.parametrize(
    ("question", "statement", "negation"),
    [
        (
            "Is the customer asking for a refund?",
            "The customer is asking for a refund.",
            "The customer is not asking for a refund.",
        ),
        (
            "Does the user report a problem that blocks their work?",
            "The user does report a problem that blocks their work.",
            "The user does not report a problem that blocks their work.",
        ),
        # do/does/did keep their verb bare after the subject, and a compound subject is seen when
        # its verb leads into more
        (
            "Does the tool result contain the information the user asked for?",
            "The tool result does contain the information the user asked for.",
            "The tool result does not contain the information the user asked for.",
        ),
        (
            "Does the user express gratitude?",
            "The user does express gratitude.",
            "The user does not express gratitude.",
        ),
        ("Is the message not about billing?", "The message is not about billing.", "The message is about billing."),
        ("Has the order never arrived?", "The order has never arrived.", "The order has arrived."),
        ("Isn't the order late?", "The order is late.", "The order is not late."),
        ("Is this spam?", "This is spam.", "This is not spam."),
        (
            "Is this email a phishing attempt?",
            "This email is a phishing attempt.",
            "This email is not a phishing attempt.",
        ),
        (
            "Should this go to the billing team?",
            "This should go to the billing team.",
            "This should not go to the billing team.",
        ),
        ("Is the tone of the reply rude?", "The tone of the reply is rude.", "The tone of the reply is not rude."),
        ("Is the user's account locked?", "The user's account is locked.", "The user's account is not locked."),
        (
            "Is there a deadline in the message?",
            "There is a deadline in the message.",
            "There is not a deadline in the message.",
        ),
        ("Can John log in?", "John can log in.", "John can not log in."),
    ],
)
def test_a_question_led_by_an_auxiliary_becomes_two_statements(question: str, statement: str, negation: str) -> None:
    assert statements(question) == (statement, negation)


@pytest.mark.parametrize(
    "question",
    [
        "Urgent?",
        "Which team should handle this?",
        "Answer yes if the user is angry.",
        "¿Está enfadado el cliente?",
        "Is it?",
    ],
)
def test_anything_else_is_not_converted(question: str) -> None:
    assert statements(question) is None


def test_readings_fall_back_and_read_criteria() -> None:
    (fallback,) = readings(NoulQuestion("Urgent?"))
    assert (fallback.statement, fallback.negation, fallback.threshold) == (
        "Urgent? Yes.",
        "Urgent? No.",
        FALLBACK_THRESHOLD,
    )
    question, criteria = readings(
        NoulQuestion("Is the customer angry?", true="The customer is angry", false="The customer is calm")
    )
    assert question.statement == "The customer is angry." and (criteria.statement, criteria.negation) == (
        "The customer is angry",
        "The customer is calm",
    )
    assert question.threshold == criteria.threshold == THRESHOLD
    (only_false,) = readings(NoulQuestion(false="It contains no contact details"))
    assert (
        only_false.statement
        == not_true("It contains no contact details")
        == "It is not true that it contains no contact details."
    )
    with pytest.raises(InvalidQuestion):
        readings(NoulQuestion())
