"""A yes/no question as the two statements an NLI model weighs against a state.

"Is the customer asking for a refund?" becomes "The customer is asking for a refund." and "The
customer is not asking for a refund.": an entailment model cannot answer a question, but it can
tell which of two statements a text supports. English only, and by rule, not by a parser: the
auxiliary that leads the question moves behind its subject, and "not" follows it. The subject is
a determiner or possessive with the word after it ("the customer", "this message", "the user's
account"), carried on over "of" ("the tone of the message"), a pronoun ("it", "there",
"someone"), or else the first word ("John"). What the rule cannot see is a compound noun ("Is the
tool call successful?" gives "The tool is call successful."); only for do/does/did, whose verb
comes right after the subject, does it look one word further (`_do_subject_end`), and "Did the
tool call succeed?" still gives "The tool did call succeed.". Anything that does not start with
an auxiliary is not converted (None), and the caller falls back.
"""

from __future__ import annotations

BE = frozenset({"is", "are", "was", "were", "am"})
DO = frozenset({"do", "does", "did"})
OTHERS = frozenset({"has", "have", "had", "can", "could", "should", "will", "would", "may", "might", "must", "shall"})
AUXILIARIES = BE | DO | OTHERS
# "Isn't the order late?" asks, as English does, whether it is late.
CONTRACTED = {
    "isn't": "is",
    "aren't": "are",
    "wasn't": "was",
    "weren't": "were",
    "doesn't": "does",
    "don't": "do",
    "didn't": "did",
    "hasn't": "has",
    "haven't": "have",
    "hadn't": "had",
    "can't": "can",
    "cannot": "can",
    "couldn't": "could",
    "shouldn't": "should",
    "won't": "will",
    "wouldn't": "would",
    "mustn't": "must",
}
DETERMINERS = frozenset(
    {
        "the",
        "a",
        "an",
        "this",
        "that",
        "these",
        "those",
        "any",
        "some",
        "every",
        "each",
        "no",
        "my",
        "your",
        "his",
        "her",
        "its",
        "our",
        "their",
        "another",
        "either",
        "neither",
        "all",
        "both",
    }
)
PRONOUNS = frozenset(
    {
        "it",
        "they",
        "he",
        "she",
        "you",
        "we",
        "i",
        "there",
        "someone",
        "somebody",
        "anyone",
        "anybody",
        "everyone",
        "everybody",
        "something",
        "anything",
        "everything",
        "nothing",
        "nobody",
        "one",
    }
)
# Words that start what follows a noun phrase, never continue it: they mark where a subject ends.
PREPOSITIONS = frozenset(
    {
        "about",
        "above",
        "after",
        "against",
        "along",
        "among",
        "around",
        "as",
        "at",
        "before",
        "behind",
        "below",
        "beside",
        "between",
        "beyond",
        "by",
        "during",
        "except",
        "for",
        "from",
        "in",
        "inside",
        "into",
        "like",
        "near",
        "of",
        "off",
        "on",
        "onto",
        "out",
        "outside",
        "over",
        "past",
        "since",
        "through",
        "to",
        "toward",
        "towards",
        "under",
        "until",
        "up",
        "upon",
        "with",
        "within",
        "without",
    }
)
NEGATORS = frozenset({"not", "never"})
DEMONSTRATIVES = frozenset({"this", "that", "these", "those"})
ADVERBS = frozenset(
    {
        "already",
        "still",
        "yet",
        "really",
        "actually",
        "currently",
        "now",
        "ever",
        "also",
        "just",
        "clearly",
        "explicitly",
        "likely",
        "probably",
        "even",
        "only",
        "always",
        "often",
        "again",
    }
)
BOUNDARIES = DETERMINERS | PRONOUNS | PREPOSITIONS | NEGATORS | ADVERBS | {"if", "whether", "been", "being"}
# Endings of participles, adverbs and nouns: a word ending so is not a verb's bare form.
NOT_BARE_VERB = ("ing", "ed", "ly", "tion", "sion", "ment", "ness", "ity", "ance", "ence", "ude", "ship", "ism", "age")


def statements(question: str) -> tuple[str, str] | None:
    """(affirmative, negated) for a question led by an auxiliary, else None."""
    words = question.strip().rstrip("?").strip().split()
    if len(words) < 3:
        return None
    aux = words[0].lower().replace("\u2019", "'")
    aux = CONTRACTED.get(aux, aux)
    if aux not in AUXILIARIES:
        return None
    rest = words[1:]
    end = min(_subject_end(rest, aux), len(rest) - 1)  # "Is this spam?": the predicate keeps a word
    subject, predicate = rest[:end], rest[end:]
    if predicate[0].lower() in NEGATORS:  # "Is the message not about X?": its negation drops the "not"
        negated = predicate[1:] or predicate
        return _sentence(subject, [aux], predicate), _sentence(subject, [aux], negated)
    return _sentence(subject, [aux], predicate), _sentence(subject, [aux, "not"], predicate)


def _sentence(subject: list[str], middle: list[str], predicate: list[str]) -> str:
    text = " ".join([*subject, *middle, *predicate])
    text = text[0].upper() + text[1:]
    return text if text[-1] in ".!" else text + "."


def _noun_phrase_end(words: list[str], start: int, aux: str = "is") -> int:
    """Where the noun phrase at `start` ends: determiner + word, possessives and "of" carried on."""
    first = words[start].lower()
    if first in DEMONSTRATIVES and _stands_alone(words, start, aux):
        end = start + 1
    elif first in DETERMINERS and start + 1 < len(words):
        end = start + 2
    else:
        end = start + 1
    while end < len(words) and words[end - 1].lower().endswith(("'s", "s'", "\u2019s")):  # "the user's account"
        end += 1
    if end + 1 < len(words) and words[end].lower() == "of":  # "the tone of the message"
        end = _noun_phrase_end(words, end + 1)
    return end


def _stands_alone(words: list[str], start: int, aux: str) -> bool:
    """Is "this" a pronoun here ("Is this about billing?", "Should this go to billing?") or a
    determiner ("Is this email spam?")? After do, have or a modal a verb follows the subject."""
    after = words[start + 1 : start + 3]
    if not after or after[0].lower() in BOUNDARIES:
        return True
    if aux in BE:
        return False
    if aux in {"has", "have", "had"}:
        return after[0].lower().endswith(("ed", "en"))
    return len(after) == 2 and after[1].lower() in BOUNDARIES


def _subject_end(words: list[str], aux: str) -> int:
    end = _noun_phrase_end(words, 0, aux)
    if aux in DO:
        end = _do_subject_end(words, end)
    return end


def _do_subject_end(words: list[str], end: int) -> int:
    """After do/does/did the verb follows the subject. "the tool result contain the data": the word
    after the head ("result") runs straight into another open word ("contain") that itself leads
    into a determiner or preposition, so the head was a compound ("the tool result")."""
    if end + 2 >= len(words) or words[0].lower() not in DETERMINERS:
        return end
    second, third, fourth = (w.lower() for w in words[end : end + 3])
    if second in BOUNDARIES or third in BOUNDARIES or fourth not in BOUNDARIES:
        return end
    if third.endswith(NOT_BARE_VERB) or (third.endswith("s") and not third.endswith("ss")):
        return end  # not a verb's bare form
    return end + 1


def not_true(sentence: str) -> str:
    """The negation of any statement, such as a described outcome ("It contains a phone number"):
    measured on the development set as good as "not" after the auxiliary (docs/runtime/builtin-models.md)."""
    body = sentence.strip().rstrip(".")
    return f"It is not true that {body[:1].lower() + body[1:]}."
