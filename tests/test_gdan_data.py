"""GDAN data (genfeat.data.gdan): the seeded SQuAD article split on the real file, the labelling rate,
WikiText-2 paragraphs, the vocabulary, batches and their resumable stream, and one clear error per kind
of bad input."""

import json
import os
from pathlib import Path

import pytest

from genfeat.config import from_dict
from genfeat.data.gdan import (D_GEN, D_TRUE, PAD, SPECIALS, CollatedStream, GDANDataConfig, Paragraph,
                               build_vocab, collate_qa, load_gdan_data, words)
from genfeat.errors import ConfigError, DataError

DATA = Path(os.environ.get("GENFEAT_DATA", "../shared/data")).resolve()
pytestmark = pytest.mark.skipif(not (DATA / "squad").is_dir() or not (DATA / "wikitext-2").is_dir(),
                                reason="needs GENFEAT_DATA with squad/ and wikitext-2/")


@pytest.fixture(scope="module")
def data():
    os.environ["GENFEAT_DATA"] = str(DATA)
    return load_gdan_data(GDANDataConfig(), seed=0)


def test_split_sizes_with_split_seed_0_are_the_documented_ones(data):
    assert data.sizes() == {"labelled": 5928, "unlabelled": 3557, "dev": 1477, "test": 1390}
    assert sum(p.uid.startswith("wikitext2:") for p in data.unlabelled) == 3203


def test_parts_share_no_article(data):
    article = lambda uid: uid.split(":")[0]  # noqa: E731
    parts = [{article(e.paragraph.uid) for e in data.labelled},
             {article(p.uid) for p in data.unlabelled if not p.uid.startswith("wikitext2:")},
             {article(e.paragraph.uid) for e in data.dev}, {article(e.paragraph.uid) for e in data.test}]
    assert [len(p) for p in parts] == [24, 8, 8, 8]
    assert len(set().union(*parts)) == 48, "the four parts are disjoint and cover the 48 articles"


def test_answer_spans_point_at_the_answers(data):
    examples = data.labelled + data.dev + data.test
    exact = sum(e.paragraph.span_text(e.start, e.end) == e.answers[0] for e in examples)
    # the rest are answers that cut a word ("Broncos'" for "Broncos"): the span then covers the whole word
    assert exact / len(examples) > 0.98
    assert all(e.answers[0] in e.paragraph.span_text(e.start, e.end) for e in examples)
    assert all(e.end < len(e.paragraph.tokens) <= 300 for e in data.labelled), "training paragraphs are cut at 300"
    assert max(len(e.paragraph.tokens) for e in data.dev) > 300, "dev paragraphs are never cut"


def test_labelling_rate_takes_that_fraction_drawn_by_the_seed(data):
    ten = load_gdan_data(GDANDataConfig(labelling_rate=0.1), seed=0)
    other = load_gdan_data(GDANDataConfig(labelling_rate=0.1), seed=1)
    assert len(ten.labelled) == len(other.labelled) == round(0.1 * 5928)
    assert {e.uid for e in ten.labelled} < {e.uid for e in data.labelled}
    assert {e.uid for e in ten.labelled} != {e.uid for e in other.labelled}
    assert [e.uid for e in ten.test] == [e.uid for e in data.test], "dev and test do not depend on the rate"


def test_wikitext_paragraphs_have_joined_numbers_and_no_headings(data):
    wiki = [p for p in data.unlabelled if p.uid.startswith("wikitext2:")]
    assert not any("@" in p.text for p in wiki)
    assert not any(p.text.startswith("=") for p in wiki)
    assert min(len(p.tokens) for p in wiki) >= 40


def test_vocabulary_holds_training_words_only(data):
    vocab = build_vocab(data, min_freq=1)
    assert vocab.symbols[:6] == list(SPECIALS) and vocab.lookup(PAD) == 0
    train = {t for e in data.labelled for t in e.question + e.paragraph.tokens} | {t for p in data.unlabelled
                                                                                  for t in p.tokens}
    test_only = {t for e in data.test for t in e.question} - train
    assert test_only and all(vocab.lookup(t) == vocab.unk_id for t in test_only)
    assert len(vocab) == len(train | set(SPECIALS))
    assert len(build_vocab(data, min_freq=2)) < len(vocab)


def test_words_keep_character_offsets():
    text = "The Broncos' 24–10 win, in São Paulo."
    w = words(text)
    assert [t for t, _, _ in w] == ["the", "broncos", "'", "24", "–", "10", "win", ",", "in", "são", "paulo", "."]
    assert all(text[s:e].lower() == t for t, s, e in w)
    p = Paragraph.of("x", text)
    assert p.word_span(text.index("São"), text.index(".")) == (9, 10)
    assert p.span_text(9, 10) == "São Paulo"


def test_collate_pads_and_the_stream_resumes_exactly(data):
    vocab = build_vocab(data)
    batch = collate_qa(data.labelled[:3], vocab)
    lengths = [len(e.paragraph.tokens) for e in data.labelled[:3]]
    assert batch["paragraph"].shape == (3, max(lengths))
    assert batch["paragraph_mask"].sum(1).tolist() == lengths
    assert batch["start"].tolist() == [e.start for e in data.labelled[:3]]
    assert vocab.lookup(D_TRUE) != vocab.lookup(D_GEN)
    stream = CollatedStream(data.labelled[:10], lambda ex: [e.uid for e in ex], batch_size=4, seed=3)
    seen = [next(stream) for _ in range(4)]
    again = CollatedStream(data.labelled[:10], lambda ex: [e.uid for e in ex], batch_size=4, seed=3)
    for _ in range(2):
        next(again)
    again.load_state_dict(json.loads(json.dumps(stream.state_dict())))
    assert next(again) == next(stream)
    fresh = CollatedStream(data.labelled[:10], lambda ex: [e.uid for e in ex], batch_size=4, seed=3)
    [next(fresh) for _ in range(2)]
    assert next(fresh) == seen[2]


def _squad_file(tmp_path, context="Paris is the capital of France.", answer="France", offset=24):
    record = {"data": [{"title": f"a{i}", "paragraphs": [{"context": f"{context} ({i})" if context.strip() else context, "qas": [
        {"id": f"q{i}", "question": "What is Paris the capital of?", "answers": [{"text": answer,
                                                                                  "answer_start": offset}]}]}]}
        for i in range(6)]}
    path = tmp_path / "squad.json"
    path.write_text(json.dumps(record))
    return str(path)


def test_a_small_valid_file_loads(tmp_path):
    d = load_gdan_data(GDANDataConfig(squad_file=_squad_file(tmp_path), wikitext=[], unlabelled_share=0.25))
    assert d.sizes() == {"labelled": 3, "unlabelled": 1, "dev": 1, "test": 1}
    assert d.labelled[0].paragraph.span_text(d.labelled[0].start, d.labelled[0].end) == "France"


@pytest.mark.parametrize("kwargs, match", [({"offset": 3}, r"squad.json' article \d paragraph 0 question q\d \(line \d+\): "
                                                          r"answer 'France' is not at offset 3"),
                                           ({"context": "  "}, r"squad.json' article \d paragraph 0: the context is empty")])
def test_bad_squad_records_name_file_and_record(tmp_path, kwargs, match):
    with pytest.raises(DataError, match=match):
        load_gdan_data(GDANDataConfig(squad_file=_squad_file(tmp_path, **kwargs), wikitext=[]))


@pytest.mark.parametrize("rate", [0.0, -0.1, 1.5])
def test_labelling_rate_outside_0_1_is_a_config_error(rate):
    with pytest.raises(ConfigError, match=f"data.labelling_rate is {rate}, outside"):
        from_dict(GDANDataConfig, {"labelling_rate": rate})


def test_missing_squad_file_is_named(tmp_path):
    with pytest.raises(DataError, match="nope.json' does not exist"):
        load_gdan_data(GDANDataConfig(squad_file=str(tmp_path / "nope.json")))


@pytest.mark.parametrize("articles", [0, 1, 3])
def test_a_squad_file_too_small_for_the_split_is_one_data_error(tmp_path, articles):
    """An empty or few-article file left a part of the split empty: sampling the labelled questions raised
    "Sample larger than population", or the batch stream "has no examples", naming neither file nor cause."""
    record = json.loads(Path(_squad_file(tmp_path)).read_text())
    record["data"] = record["data"][:articles]
    (tmp_path / "squad.json").write_text(json.dumps(record))
    with pytest.raises(DataError, match=rf"squad.json' \({articles} articles\) leaves no .* on the article split"):
        load_gdan_data(GDANDataConfig(squad_file=str(tmp_path / "squad.json"), wikitext=[], unlabelled_share=0.25))
