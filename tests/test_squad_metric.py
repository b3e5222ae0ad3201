"""SQuAD exact match and F1 (genfeat.eval.metrics) on hand-made cases, worked out from the official
v1.1/v2.0 evaluation's definition: normalise (lower-case, drop punctuation, drop a/an/the, collapse
whitespace), compare to every gold answer, keep the best."""

import pytest

from genfeat.errors import DataError
from genfeat.eval.metrics import normalize_answer, squad_exact_match, squad_f1, squad_scores


@pytest.mark.parametrize("raw,norm", [
    ("The Denver Broncos!", "denver broncos"),
    ("  an   apple, a day  ", "apple day"),
    ("apple,a day", "applea day"),                    # punctuation is dropped, not replaced by a space
    ("Theater", "theater"),                           # 'the' only as a whole word
    ("A.D. 1066", "ad 1066"),
    ("rock-'n'-roll", "rocknroll"),
    ("Ånder the sea", "ånder sea"),                   # non-ASCII letters are kept
    ("“quoted”", "“quoted”"),                         # only ASCII punctuation is dropped, as the official script
])
def test_normalisation(raw, norm):
    assert normalize_answer(raw) == norm


def test_exact_match_takes_the_best_gold():
    assert squad_exact_match("the Broncos", ["Denver Broncos", "Broncos"]) == 1.0
    assert squad_exact_match("Denver", ["Denver Broncos", "Broncos"]) == 0.0


def test_f1_by_hand():
    # prediction 'denver broncos team' vs 'denver broncos': precision 2/3, recall 1, F1 0.8
    assert squad_f1("Denver Broncos team", ["Denver Broncos"]) == pytest.approx(0.8)
    # best of two golds: vs 'broncos' P 1/3 R 1 -> 0.5; vs 'the denver broncos' -> 0.8
    assert squad_f1("Denver Broncos team", ["Broncos", "the Denver Broncos"]) == pytest.approx(0.8)
    # repeated tokens count with multiplicity: 'x y y' vs 'y y z' share 2 -> P 2/3, R 2/3
    assert squad_f1("x y y", ["y y z"]) == pytest.approx(2 / 3)
    assert squad_f1("cat", ["dog"]) == 0.0
    assert squad_f1("The", ["dog"]) == 0.0           # empty after normalisation


def test_corpus_scores_and_unanswerable_questions():
    scores = squad_scores(["Denver Broncos", "Denver Broncos team", "cat", ""],
                          [["Denver Broncos"], ["Denver Broncos"], ["dog"], []])
    assert scores["exact_match"] == pytest.approx(2 / 4)
    assert scores["squad_f1"] == pytest.approx((1 + 0.8 + 0 + 1) / 4)
    assert squad_scores(["something"], [[]]) == {"exact_match": 0.0, "squad_f1": 0.0}
    with pytest.raises(DataError, match="2 predictions for 1 questions"):
        squad_scores(["a", "b"], [["a"]])
