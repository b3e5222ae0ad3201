"""Readers that turn a task's files into :class:`~genfeat.tasks.spec.Example` records.

``load_task(name, split)`` resolves the split's file through the registry (found under
``$GENFEAT_DATA``, downloaded when absent, verified) and reads it with the task's reader. Bad
records end in one :class:`~genfeat.errors.DataError` naming the file and line (JSON: the line of
the syntax error, or the record's path): a row with another number of columns than the header, an
empty text field, a label outside the task's label set, a score that is not a number, a SQuAD
answer whose offset does not point at its text.

SQuAD article split (``squad_split``): only the official dev file of SQuAD v1.1 is in
``shared/data``, so train, dev and test are disjoint sets of its 48 articles, drawn by a
``random.Random(seed)`` shuffle of the article indices (seed 0 by default): the first two thirds
train, half of the rest dev, the remainder test (32 / 8 / 8 articles). With seed 0 that is 7,703 /
1,477 / 1,390 questions (1,439 / 310 / 318 paragraphs).
"""

from __future__ import annotations

import csv
import json
import math
import random
import re
import tarfile
from pathlib import Path

from ..data.registry import data_root, get_dataset, resolve, root_origin
from ..errors import DataError, with_article
from .catalog import check_imdb_reviews, get_task
from .spec import Example, TaskSpec

_IMDB_MEMBER = re.compile(r"(?:^|/)aclImdb/(train|test)/(pos|neg)/(\d+)_(\d+)\.txt$")


def load_task(task: str | TaskSpec, split: str, download: bool = True, seed: int = 0) -> list[Example]:
    """The examples of ``split`` of ``task`` (a name in :data:`~genfeat.tasks.catalog.TASKS` or a spec).

    Args:
        download: fetch a missing file from its canonical URL (default True); False raises DataError.
            RACE is never downloaded (its URL serves the official archive, to be unpacked by hand).
        seed: seed of the SQuAD article split (``squad_split`` only; default 0).

    Raises:
        DataError: an unknown split, missing or corrupt files, a malformed record (file and line).
    """
    spec = get_task(task) if isinstance(task, str) else task
    spec.check_split(split)
    if spec.reader == "race":
        return _read_race(spec, split)
    path = resolve(spec.dataset, spec.splits[split].file, download=download)
    if spec.reader in ("tsv", "csv"):
        return _read_delimited(spec, split, path)
    if spec.reader == "imdb":
        return _read_imdb(spec, split, path)
    return read_squad(path, split if spec.article_split else None, seed)


def _label(spec: TaskSpec, raw: str, where: str) -> int | float:
    if spec.regression:
        try:
            value = float(raw)
        except ValueError:
            value = math.nan
        if not math.isfinite(value):   # float() reads "nan" and "inf": a NaN loss, a NaN correlation
            raise DataError(f"{where}: score {raw!r} of task '{spec.name}' is not a finite number",
                            "fix or remove the row")
        return value
    if raw not in spec.labels:
        raise DataError(f"{where}: label {raw!r} is not one of task '{spec.name}''s labels {spec.labels}",
                        "fix or remove the row, or use the task whose label set it belongs to")
    return spec.labels.index(raw)


def _text(text: str, where: str, what: str = "text field") -> str:
    if not isinstance(text, str):
        raise DataError(f"{where}: the {what} is {type(text).__name__} {text!r:.40}, not a string",
                        "fix or remove the record")
    if not text.strip():
        raise DataError(f"{where}: the {what} is empty", "fix or remove the record")
    return text


def _read_delimited(spec: TaskSpec, split: str, path: Path) -> list[Example]:
    """GLUE TSV (no quoting, as GLUE's own readers) or AG News CSV (quoted); the MRPC header's BOM is dropped."""
    s = spec.splits[split]
    fmt = {"delimiter": "\t", "quoting": csv.QUOTE_NONE} if spec.reader == "tsv" else {"strict": True}
    examples = []
    with open(path, encoding="utf-8-sig", newline="") as f:
        rows = csv.reader(f, **fmt)
        width = None
        try:
            for row in rows:
                where = f"'{path}' line {rows.line_num}"
                if width is None:
                    width = len(row)
                    outside = [c for c in [*s.text_columns, s.label_column] if c is not None and not -width <= c < width]
                    if outside:
                        raise DataError(f"task '{spec.name}' split '{split}' reads column(s) {outside} of '{path}', "
                                        f"whose first line has {width} fields",
                                        "fix SplitSpec.text_columns / label_column (0-based) for this file")
                    if s.header:
                        continue
                if len(row) != width:
                    raise DataError(f"{where} has {len(row)} {fmt.get('delimiter') and 'tab-separated ' or ''}"
                                    f"fields, the file's first line has {width}",
                                    "repair the row (a stray tab or a line break inside a field) or remove it")
                texts = tuple(_text(row[c], where, f"text field in column {c}") for c in s.text_columns)
                if spec.transform == "single":
                    texts = (" ".join(texts),)
                label = None if s.label_column is None else _label(spec, row[s.label_column], where)
                examples.append(Example(f"{path.name}:{rows.line_num}", texts, label))
        except csv.Error as e:
            raise DataError(f"'{path}' line {rows.line_num} cannot be read ({e})",
                            "repair the file or fetch the canonical one") from None
        except UnicodeDecodeError:  # raised for a chunk the reader decodes ahead of its rows: find the byte's line
            raw = path.read_bytes()
            try:
                raw.decode("utf-8-sig")
            except UnicodeDecodeError as e:
                line = raw.count(b"\n", 0, e.start) + 1
                raise DataError(f"'{path}' line {line} is not UTF-8 (byte "
                                f"{raw[e.start]:#04x} at offset {e.start}: {e.reason})",
                                "repair the file or fetch the canonical one") from None
            raise
    if not examples:
        raise DataError(f"'{path}' holds no examples", "fetch the canonical file")
    return examples


def _read_imdb(spec: TaskSpec, split: str, path: Path) -> list[Example]:
    """The reviews ``aclImdb/{split}/{pos,neg}/<id>_<rating>.txt`` of the archive, sorted by member name
    (the unlabeled ``train/unsup`` reviews are never read). Texts are kept as written (with ``<br />``).
    The registry's archive (dataset ``imdb``) must hold 12,500 reviews of each label in the split
    (:func:`~genfeat.tasks.catalog.check_imdb_reviews`); another dataset's archive may hold any number."""
    examples = []
    try:
        with tarfile.open(path, "r:gz") as tar:
            for member in tar:
                m = _IMDB_MEMBER.search(member.name)
                if m is None or m.group(1) != split or not member.isfile():
                    continue
                where = f"'{path}' member {member.name}"
                try:
                    text = tar.extractfile(member).read().decode("utf-8")
                except UnicodeDecodeError as e:
                    raise DataError(f"{where} is not UTF-8 ({e.reason})", "fetch the canonical archive") from None
                examples.append(Example(member.name, (_text(text, where, "review"),), spec.labels.index(m.group(2))))
    except (tarfile.TarError, OSError, EOFError) as e:
        raise DataError(f"'{path}' is not a readable tar.gz archive ({e})", "fetch the canonical archive") from None
    if not examples:
        raise DataError(f"'{path}' holds no aclImdb/{split}/{{pos,neg}}/*.txt reviews",
                        "use the IMDB archive aclImdb_v1.tar.gz (or shared/data's labeled repack)")
    if spec.dataset == "imdb":
        check_imdb_reviews(path, split, {label: sum(spec.labels[e.label] == label for e in examples)
                                         for label in ("neg", "pos")})
    return sorted(examples, key=lambda e: e.uid)


def _race_passage(spec: TaskSpec, raw: bytes, where: str, uid: str) -> list[Example]:
    try:
        obj = json.loads(raw.decode("utf-8"))
        article, questions, options, answers = obj["article"], obj["questions"], obj["options"], obj["answers"]
    except (UnicodeDecodeError, json.JSONDecodeError, KeyError, TypeError) as e:
        raise DataError(f"{where} is not a RACE passage ({type(e).__name__}: {e})",
                        "each file must be one JSON object with article, questions, options, answers") from None
    for name, value in (("questions", questions), ("options", options), ("answers", answers)):
        if not isinstance(value, list):   # a string would be read letter by letter
            raise DataError(f"{where}: {name} is {with_article(type(value).__name__)}, not a list",
                            "give questions, options and answers as JSON lists, one entry per question")
    if not (len(questions) == len(options) == len(answers)):
        raise DataError(f"{where} has {len(questions)} questions, {len(options)} option lists and "
                        f"{len(answers)} answers", "give one option list and one answer per question")
    _text(article, where, "article")
    out = []
    for i, (q, opts, a) in enumerate(zip(questions, options, answers)):
        if not isinstance(opts, list):
            raise DataError(f"{where} question {i}: its options are {with_article(type(opts).__name__)}, not a list",
                            "give every question its four options as a JSON list of strings")
        _text(q, f"{where} question {i}", "question")
        if len(opts) != len(spec.labels):
            raise DataError(f"{where} question {i} has {len(opts)} options, expected {len(spec.labels)}",
                            "give every question four options")
        for o in opts:
            _text(o, f"{where} question {i}", "option")
        out.append(Example(f"{uid}#{i}", (article, q), _label(spec, a, f"{where} question {i}"),
                           tuple(opts)))
    return out


RACE_QUESTIONS = {"train": 87_866, "dev": 4_887, "test": 4_934}
"""Questions of each RACE split, high and middle together (the RACE paper's counts, HF's race split sizes)."""


def _read_race(spec: TaskSpec, split: str) -> list[Example]:
    """RACE questions of ``split`` (high and middle): the folder race/RACE/<split>/ when present (the
    official layout), which must hold the split's :data:`RACE_QUESTIONS` (a partial copy is a DataError),
    else for train the registry's tar.xz repack (sha256-checked); sorted by level and file name.
    Nothing is downloaded: the registry's URL serves the official archive, which is unpacked by hand.
    The uid is ``<split>/<level>/<file>#<question>``; a passage with no questions gives no example
    (two train passages, high/15946 and high/16528)."""
    folder = data_root() / "race" / "RACE" / split
    entry = get_dataset(spec.dataset).files["train"]      # the repack's name, the official archive's URL
    repack = data_root() / entry.relpath
    examples = []
    if folder.is_dir():
        passages = sorted(folder.glob("*/*.txt"))
        for path in passages:
            examples += _race_passage(spec, path.read_bytes(), f"'{path}'", f"{split}/{path.parent.name}/{path.name}")
        if len(examples) != RACE_QUESTIONS[split]:
            raise DataError(f"RACE folder '{folder}' holds {len(examples):,} questions in {len(passages):,} passages, "
                            f"the official {split} split {RACE_QUESTIONS[split]:,} (a partial copy)",
                            f"unpack RACE.tar.gz ({entry.url}) again in '{folder.parent.parent}', so that RACE/{split} "
                            "holds all of high/ and middle/")
    elif split == "train" and repack.is_file():
        path = resolve(spec.dataset, "train", download=False)
        with tarfile.open(path, "r:xz") as tar:
            for member in sorted((m for m in tar if m.isfile() and m.name.endswith(".txt")), key=lambda m: m.name):
                examples += _race_passage(spec, tar.extractfile(member).read(), f"'{path}' member {member.name}",
                                          "/".join(member.name.split("/")[-3:]))
    else:
        also = f", and so is the repack '{repack}'" if split == "train" else ""
        instead = f" (or place shared/data's repack of the train files at '{repack}')" if split == "train" else ""
        raise DataError(f"RACE folder '{folder}' is missing{also} (data directory '{data_root()}', {root_origin()})",
                        f"download {entry.url} and unpack it in '{folder.parent.parent}', so that RACE/train, "
                        f"RACE/dev and RACE/test lie there{instead}")
    return examples


def squad_articles(n_articles: int, split: str, seed: int = 0) -> list[int]:
    """Indices of the articles of ``split`` in the seeded article split (see the module docstring)."""
    order = list(range(n_articles))
    random.Random(seed).shuffle(order)
    n_train = n_articles * 2 // 3
    n_dev = (n_articles - n_train) // 2
    bounds = {"train": (0, n_train), "dev": (n_train, n_train + n_dev), "test": (n_train + n_dev, n_articles)}
    lo, hi = bounds[split]
    return sorted(order[lo:hi])


def read_squad(path: Path, article_split: str | None, seed: int) -> list[Example]:
    """Questions of a SQuAD v1.1/v2.0 file (v2.0's unanswerable ones with no answers); with
    ``article_split`` only the articles of that part of the seeded split."""
    try:
        raw = path.read_text(encoding="utf-8")
        data = json.loads(raw)["data"]
    except json.JSONDecodeError as e:
        raise DataError(f"'{path}' line {e.lineno} is not valid JSON ({e.msg})", "fetch the canonical file") from None
    except (KeyError, TypeError, UnicodeDecodeError) as e:
        raise DataError(f"'{path}' is not a SQuAD file (no top-level 'data' list: {e})",
                        "pass a SQuAD v1.1 or v2.0 JSON file") from None
    chosen = range(len(data)) if article_split is None else squad_articles(len(data), article_split, seed)

    def line_of(qid) -> str:
        """The file's line holding question ``qid`` (ids are unique strings), for an error only: it scans the file."""
        if not isinstance(qid, str):
            return ""
        for written in (json.dumps(qid), json.dumps(qid, ensure_ascii=False)):
            at = raw.find(written)
            if at >= 0:
                return f" (line {raw.count(chr(10), 0, at) + 1})"
        return ""

    examples, seen = [], set()
    for a in chosen:
        qid = None
        try:
            for p, paragraph in enumerate(data[a]["paragraphs"]):
                where = f"'{path}' article {a} paragraph {p}"
                qid = None
                context = _text(paragraph["context"], where, "context")
                for qa in paragraph["qas"]:
                    qid = None                  # a question without an id must not be named as the one before
                    qid = qa["id"]
                    where_q = f"{where} question {qid}"
                    try:
                        if not isinstance(qid, str) or not qid or qid in seen:
                            raise DataError(f"{where_q}: the id {qid!r} is "
                                            f"{'repeated' if qid in seen else 'not a non-empty string'}",
                                            "give every question an id of its own (a string; predictions are keyed "
                                            "by it)")
                        seen.add(qid)
                        answers = tuple((ans["text"], int(ans["answer_start"])) for ans in qa["answers"])
                        for text, start in answers:
                            if not isinstance(text, str) or not text.strip() or start < 0 \
                                    or context[start:start + len(text)] != text:
                                raise DataError(f"{where_q}: answer {text!r} is not at offset {start} of the context",
                                                "fix answer_start or the answer text")
                        if not answers and not qa.get("is_impossible", False):
                            raise DataError(f"{where_q} has no answer and is not marked is_impossible",
                                            "give the question an answer (v1.1) or set is_impossible (v2.0)")
                        question = _text(qa["question"], where_q, "question")
                    except DataError as e:
                        raise DataError(e.cause.replace(where_q, where_q + line_of(qid), 1), e.fix) from None
                    examples.append(Example(qid, (question, context), answers=answers))
        except (KeyError, TypeError, ValueError) as e:
            at = f" question {qid}{line_of(qid)}" if qid is not None else ""
            raise DataError(f"'{path}' article {a}{at} lacks a SQuAD field or has one of the wrong type "
                            f"({type(e).__name__}: {e})",
                            "each paragraph needs context and qas; each question id, question, answers") from None
    return examples
