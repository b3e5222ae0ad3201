"""Task specs and loaders (genfeat.tasks): published statistics of the real files in GENFEAT_DATA,
and one clear DataError for each kind of bad record in small files the tests write."""

import io
import json
import os
import tarfile
from pathlib import Path

import pytest

from genfeat.data import registry
from genfeat.data.registry import DatasetSpec, FileSpec, get_dataset
from genfeat.errors import ConfigError, DataError
from genfeat.tasks import TASKS, SplitSpec, TaskSpec, get_task, load_task
from genfeat.tasks import loaders
from genfeat.tasks.loaders import squad_articles

DATA = Path(os.environ.get("GENFEAT_DATA", "../shared/data")).resolve()
needs = {name: pytest.mark.skipif(not (DATA / name).is_dir(), reason=f"needs GENFEAT_DATA with {name}/")
         for name in ("glue", "squad", "race", "imdb", "ag_news")}


@pytest.fixture(autouse=True)
def _data_root(monkeypatch):
    monkeypatch.setenv("GENFEAT_DATA", str(DATA))


# (task, split, examples, labelled) — GLUE's official sizes (MRPC train: the mirror lacks one row)
GLUE_SIZES = [("cola", "train", 8551, True), ("cola", "dev", 1043, True), ("cola", "test", 1063, False),
              ("sst2", "train", 67349, True), ("sst2", "dev", 872, True), ("sst2", "test", 1821, False),
              ("mrpc", "train", 3667, True), ("mrpc", "dev", 408, True), ("mrpc", "test", 1725, False),
              ("rte", "train", 2490, True), ("rte", "dev", 277, True), ("rte", "test", 3000, False),
              ("stsb", "train", 5749, True), ("stsb", "dev", 1500, True), ("stsb", "test", 1379, False),
              ("wnli", "train", 635, True), ("wnli", "dev", 71, True), ("wnli", "test", 146, False)]


@needs["glue"]
@pytest.mark.parametrize("task,split,size,labelled", GLUE_SIZES)
def test_glue_split_sizes_and_labels(task, split, size, labelled):
    spec = get_task(task)
    examples = load_task(task, split)
    assert len(examples) == size
    assert all(len(e.texts) == (1 if spec.transform == "single" else 2) and all(t.strip() for t in e.texts)
               for e in examples)
    labels = {e.label for e in examples}
    if not labelled:
        assert labels == {None}
    elif spec.regression:
        assert min(labels) == 0.0 and max(labels) == 5.0
    else:
        assert labels == set(range(spec.n_labels))


@needs["glue"]
def test_glue_fields_are_the_right_columns():
    first = load_task("rte", "dev")[0]
    assert first.texts[0].startswith("Dana Reeve, the widow") and first.texts[1] == "Christopher Reeve had an accident."
    assert first.label == get_task("rte").labels.index("not_entailment")
    mrpc = load_task("mrpc", "dev")[0]  # the header's BOM is not part of the first column
    assert mrpc.label == 1 and mrpc.texts[1].startswith('" The foodservice pie business')
    assert load_task("stsb", "dev")[0].texts == ("A man with a hard hat is dancing.", "A man wearing a hard hat is dancing.")
    assert load_task("cola", "test")[0].texts == ("Bill whistled past the house.",)
    # SST-2 dev: 444 positive and 428 negative sentences
    assert sum(e.label for e in load_task("sst2", "dev")) == 444


@needs["squad"]
def test_squad_dev_and_its_seeded_article_split():
    dev = load_task("squad_v1.1", "dev")
    assert len(dev) == 10570
    assert all(q.texts[1][s:s + len(t)] == t for q in dev for t, s in q.answers)
    parts = {split: load_task("squad_split", split) for split in ("train", "dev", "test")}
    assert [len(parts[s]) for s in ("train", "dev", "test")] == [7703, 1477, 1390]
    contexts = {s: {e.texts[1] for e in parts[s]} for s in parts}
    assert not (contexts["train"] & contexts["dev"] or contexts["train"] & contexts["test"]
                or contexts["dev"] & contexts["test"])
    assert sorted(e.uid for p in parts.values() for e in p) == sorted(e.uid for e in dev)
    articles = [squad_articles(48, s) for s in ("train", "dev", "test")]
    assert [len(a) for a in articles] == [32, 8, 8] and sorted(sum(articles, [])) == list(range(48))
    assert squad_articles(48, "test", seed=1) != articles[2]  # the seed draws the split
    assert len(load_task("squad_split", "test", seed=1)) != 1390


@needs["race"]
def test_race_dev_questions_and_passages():
    examples = load_task("race", "dev")
    assert len(examples) == 3451 + 1436
    assert len({e.uid.split("#")[0] for e in examples}) == 1021 + 368
    assert all(len(e.choices) == 4 and e.label in range(4) for e in examples)
    assert {e.label for e in examples} == {0, 1, 2, 3}
    assert examples[0].uid == "dev/high/10024.txt#0"


@needs["race"]
def test_race_train_from_the_tar_xz():
    examples = load_task("race", "train")  # about 10 s: the 14.6 MB xz archive is read whole
    assert len(examples) == 62445 + 25421
    assert len({e.uid.split("#")[0] for e in examples}) == 18728 + 6409 - 2  # two passages have no questions


@needs["ag_news"]
def test_ag_news_test_has_1900_per_class():
    examples = load_task("ag_news", "test")
    assert len(examples) == 7600
    assert [sum(e.label == c for e in examples) for c in range(4)] == [1900] * 4
    assert examples[0].texts[0].startswith("Fears for T N pension after talks Unions representing")


@needs["imdb"]
def test_imdb_test_reviews():
    examples = load_task("imdb", "test")
    assert len(examples) == 25000 and sum(e.label for e in examples) == 12500
    assert all(e.uid.startswith("aclImdb/test/") for e in examples)


def _tar(path: Path, members: dict[str, str]) -> None:
    with tarfile.open(path, "w:gz") as tar:
        for name, text in members.items():
            data = text.encode()
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))


@pytest.fixture
def scratch(tmp_path, monkeypatch):
    """A dataset 'scratch' whose files are whatever the test writes under tmp_path (no checksum)."""
    monkeypatch.setenv("GENFEAT_DATA", str(tmp_path))
    files = {k: FileSpec(f"scratch/{k}", "http://invalid.example/", None) for k in ("tsv", "csv", "json", "tar.gz")}
    monkeypatch.setitem(registry._REGISTRY, "scratch", DatasetSpec("scratch", files))
    (tmp_path / "scratch").mkdir()
    return tmp_path / "scratch"


def _tsv_task(**kw):
    return TaskSpec("t", "scratch", "tsv", "pair", {"dev": SplitSpec("tsv", True, [1, 2], 3)}, ["accuracy"],
                    **({"labels": ["no", "yes"]} | kw))


@pytest.mark.parametrize("rows,match", [
    (["0\ta\tb\tyes", "1\ta\tno"], "line 3 has 3 tab-separated fields, the file's first line has 4"),
    (["0\ta\tb\tyes", "1\ta\tb\tmaybe"], r"line 3: label 'maybe' is not one of task 't''s labels \['no', 'yes'\]"),
    (["0\ta\t \tno"], "line 2: the text field in column 2 is empty"),
])
def test_bad_tsv_rows_name_file_and_line(scratch, rows, match):
    (scratch / "tsv").write_text("\n".join(["index\ts1\ts2\tlabel", *rows]) + "\n")
    with pytest.raises(DataError, match=match) as e:
        load_task(_tsv_task(), "dev")
    assert str(scratch / "tsv") in str(e.value)


def test_a_malformed_csv_row_names_file_and_line(scratch):
    """AG News-style quoted CSV: a stray quote inside a field is an error at its line, not a silently merged text."""
    spec = TaskSpec("c", "scratch", "csv", "single", {"dev": SplitSpec("csv", False, [1, 2], 0)}, ["accuracy"],
                    ["1", "2"])
    (scratch / "csv").write_text('"1","Title one","Desc, ""quoted"" one"\n"2","Title "two","Desc two"\n')
    with pytest.raises(DataError, match=r"'.*csv' line 2 cannot be read \(',' expected after '\"'\)"):
        load_task(spec, "dev")
    (scratch / "csv").write_text('"1","Title one","Desc, ""quoted"" one"\n')
    assert load_task(spec, "dev")[0].texts == ('Title one Desc, "quoted" one',)


def test_a_spec_reading_columns_the_file_lacks(scratch):
    (scratch / "tsv").write_text("index\ts1\ts2\tlabel\n0\ta\tb\tyes\n")
    spec = TaskSpec("t", "scratch", "tsv", "pair", {"dev": SplitSpec("tsv", True, [1, 4], 3)}, ["accuracy"], ["no", "yes"])
    with pytest.raises(DataError, match=r"task 't' split 'dev' reads column\(s\) \[4\] of .* first line has 4 fields"):
        load_task(spec, "dev")


def test_a_score_that_is_not_a_number(scratch):
    (scratch / "tsv").write_text("i\ta\tb\tscore\n0\tx\ty\t4.5\n1\tx\ty\thigh\n")
    spec = _tsv_task(labels=[], regression=True)
    with pytest.raises(DataError, match="line 3: score 'high'"):
        load_task(spec, "dev")
    (scratch / "tsv").write_text("i\ta\tb\tscore\n0\tx\ty\t4.5\n")
    assert load_task(spec, "dev")[0].label == 4.5


def _squad(context="The cat sat.", answer=("cat", 4)):
    qa = {"id": "q1", "question": "Who sat?", "answers": [{"text": answer[0], "answer_start": answer[1]}]}
    return {"version": "1.1", "data": [{"title": "x", "paragraphs": [{"context": context, "qas": [qa]}]}]}


def _squad_task():
    return TaskSpec("s", "scratch", "squad", "span", {"dev": SplitSpec("json")}, ["exact_match"])


def test_bad_squad_records(scratch):
    path = scratch / "json"
    path.write_text(json.dumps(_squad()))
    assert load_task(_squad_task(), "dev")[0].answers == (("cat", 4),)
    path.write_text(json.dumps(_squad(answer=("cat", 3))))
    with pytest.raises(DataError, match=r"article 0 paragraph 0 question q1 \(line 1\): answer 'cat' is not at offset 3"):
        load_task(_squad_task(), "dev")
    bad = _squad()
    bad["data"][0]["paragraphs"][0]["qas"].append({"id": "q2", "question": "Where?"})     # no answers
    path.write_text(json.dumps(bad, indent=1))
    lines = path.read_text().splitlines()
    at = next(i for i, line in enumerate(lines) if '"q2"' in line) + 1
    with pytest.raises(DataError, match=rf"article 0 question q2 \(line {at}\) lacks a SQuAD field.*'answers'"):
        load_task(_squad_task(), "dev")
    del bad["data"][0]["paragraphs"][0]["qas"][1]["id"]
    path.write_text(json.dumps(bad, indent=1))
    with pytest.raises(DataError, match=r"json' article 0 lacks a SQuAD field.*KeyError: 'id'"):
        load_task(_squad_task(), "dev")
    path.write_text(json.dumps(_squad(), indent=1)[:-30])
    with pytest.raises(DataError, match=r"line \d+ is not valid JSON"):
        load_task(_squad_task(), "dev")
    path.write_text(json.dumps({"data": [{"paragraphs": [{"qas": []}]}]}))
    with pytest.raises(DataError, match="article 0 lacks a SQuAD field.*'context'"):
        load_task(_squad_task(), "dev")
    for change, match in ((lambda p: p.update(context=5), "paragraph 0: the context is int 5, not a string"),
                          (lambda p: p["qas"][0].update(question=["Who"]), r"question q1 \(line 1\): the question is list"),
                          (lambda p: p["qas"][0].update(id=1), r"question 1: the id 1 is not a non-empty"),
                          (lambda p: p["qas"].append(dict(p["qas"][0])), r"question q1 \(line 1\): the id 'q1' is "
                                                                          "repeated"),
                          (lambda p: p["qas"][0].update(answers=[{"text": "", "answer_start": -1}]),
                           "answer '' is not at offset -1")):
        bad = _squad()
        change(bad["data"][0]["paragraphs"][0])
        path.write_text(json.dumps(bad))
        with pytest.raises(DataError, match=match):
            load_task(_squad_task(), "dev")


def test_an_undecodable_byte_is_named_at_its_line(scratch):
    """The TSV reader decodes ahead of its rows: the error names the byte's own line, not the last row read."""
    rows = [f"{i}\trow number {i}\tb\tyes" for i in range(3000)]
    raw = "\n".join(["index\ts1\ts2\tlabel", *rows]).encode()
    at = raw.index(b"row number 2499\t")
    (scratch / "tsv").write_bytes(raw[:at] + b"\xff" + raw[at:])
    with pytest.raises(DataError, match=r"tsv' line 2501 is not UTF-8 \(byte 0xff at offset"):
        load_task(_tsv_task(), "dev")


def test_squad_v2_unanswerable_questions(scratch):
    data = _squad()
    data["data"][0]["paragraphs"][0]["qas"].append({"id": "q2", "question": "Why?", "answers": [], "is_impossible": True})
    (scratch / "json").write_text(json.dumps(data))
    assert [e.answers for e in load_task(_squad_task(), "dev")] == [(("cat", 4),), ()]
    del data["data"][0]["paragraphs"][0]["qas"][1]["is_impossible"]
    (scratch / "json").write_text(json.dumps(data))
    with pytest.raises(DataError, match=r"question q2 \(line 1\) has no answer and is not marked is_impossible"):
        load_task(_squad_task(), "dev")


def test_imdb_reads_only_its_split_and_never_unsup(scratch):
    _tar(scratch / "tar.gz", {"aclImdb/train/pos/1_9.txt": "good", "aclImdb/train/neg/2_1.txt": "bad",
                              "aclImdb/train/unsup/3_0.txt": "unlabelled", "aclImdb/test/pos/4_8.txt": "fine"})
    spec = TaskSpec("i", "scratch", "imdb", "single", {"train": SplitSpec("tar.gz")}, ["accuracy"], ["neg", "pos"])
    examples = load_task(spec, "train")
    assert [(e.texts[0], e.label) for e in examples] == [("bad", 0), ("good", 1)]


def test_a_partial_copy_of_the_registry_imdb_archive_is_refused(tmp_path, monkeypatch):
    """The registry's archive (no sha256: the official one and shared/data's repack differ) must hold 12,500
    reviews of each label in the split read; a partial copy used to load silently. Another dataset's archive
    (test_imdb_reads_only_its_split_and_never_unsup) holds what it holds."""
    monkeypatch.setenv("GENFEAT_DATA", str(tmp_path))
    (tmp_path / "imdb").mkdir()
    archive = tmp_path / "imdb" / "aclImdb_v1_labeled.tar.gz"
    _tar(archive, {"aclImdb/train/pos/1_9.txt": "good", "aclImdb/train/neg/2_1.txt": "bad",
                   "aclImdb/train/neg/3_2.txt": "poor", "aclImdb/train/unsup/4_0.txt": "unlabelled"})
    with pytest.raises(DataError, match=rf"'{archive}' is a partial copy of the IMDB archive: aclImdb/train/neg holds 2 "
                                        r"of its 12,500 reviews; aclImdb/train/pos holds 1 of its 12,500 reviews\. fix: "
                                        r"replace it with the complete archive \(download https://ai.stanford.edu/"):
        load_task("imdb", "train")
    with pytest.raises(DataError, match="aclImdb/test/neg holds 1 of its 12,500 reviews; aclImdb/test/pos holds 0 of"):
        _tar(archive, {"aclImdb/train/pos/1_9.txt": "good", "aclImdb/test/neg/2_1.txt": "bad"})
        load_task("imdb", "test")


def test_declared_but_absent_datasets_say_where_to_fetch_them(tmp_path, monkeypatch):
    monkeypatch.setenv("GENFEAT_DATA", str(tmp_path))
    for task, split, url in (("mnli", "train", "MNLI.zip"), ("qnli", "dev", "QNLIv2.zip"), ("qqp", "test", "QQP-clean.zip"),
                             ("squad_v1.1", "train", "train-v1.1.json"), ("squad_v2.0", "dev", "dev-v2.0.json"),
                             ("ag_news", "train", "train.csv")):
        with pytest.raises(DataError, match=f"is missing.*set by GENFEAT_DATA.*fix: (download|extract the member .* "
                                            f"of the zip archive) .*{url}"):
            load_task(task, split, download=False)
    assert get_dataset("squad_v1.1").files["train"].sha1 == "1faea1252438a64f9718412a55036b786cfcc636"
    with pytest.raises(DataError, match="RACE folder .* is missing"):
        load_task("race", "dev")


def test_race_train_missing_names_the_official_archive_and_the_repack_and_downloads_nothing(tmp_path, monkeypatch):
    """The message said to download RACE.tar.gz to race/RACE_train.tar.xz, the repack's name (a download to it
    could only fail its checksum): it names the archive to unpack and, apart, the repack."""
    monkeypatch.setenv("GENFEAT_DATA", str(tmp_path))
    monkeypatch.setattr(registry.urllib.request, "urlopen", lambda *a, **k: pytest.fail("RACE was downloaded"))
    with pytest.raises(DataError, match=rf"RACE folder '{tmp_path}/race/RACE/train' is missing, and so is the repack "
                                        rf"'{tmp_path}/race/RACE_train.tar.xz' \(data directory '{tmp_path}', set by "
                                        r"GENFEAT_DATA\)\. fix: download http://www.cs.cmu.edu/~glai1/data/race/RACE.tar.gz "
                                        rf"and unpack it in '{tmp_path}/race', so that RACE/train, RACE/dev and RACE/test "
                                        rf"lie there \(or place shared/data's repack of the train files at "
                                        rf"'{tmp_path}/race/RACE_train.tar.xz'\)$"):
        load_task("race", "train")


def test_a_partial_race_folder_is_refused(tmp_path, monkeypatch):
    """race/RACE/<split> with passages missing loaded silently; it must hold the official number of questions."""
    monkeypatch.setenv("GENFEAT_DATA", str(tmp_path))
    (tmp_path / "race" / "RACE" / "dev" / "high").mkdir(parents=True)
    (tmp_path / "race" / "RACE" / "dev" / "high" / "1.txt").write_text(json.dumps(
        {"article": "A text.", "questions": ["Why?", "How?"], "options": [["a", "b", "c", "d"]] * 2, "answers": ["A", "B"]}))
    with pytest.raises(DataError, match=rf"RACE folder '{tmp_path}/race/RACE/dev' holds 2 questions in 1 passages, the "
                                        r"official dev split 4,887 \(a partial copy\)\. fix: unpack RACE.tar.gz "
                                        rf"\(http://www.cs.cmu.edu/~glai1/data/race/RACE.tar.gz\) again in '{tmp_path}/race', "
                                        "so that RACE/dev holds all of high/ and middle/"):
        load_task("race", "dev")


@needs["race"]
@pytest.mark.parametrize("split, level, found", [("dev", "high", "3,451 questions in 1,021 passages, the official dev "
                                                                   "split 4,887"),
                                                 ("test", "middle", "1,436 questions in 362 passages, the official "
                                                                    "test split 4,934")])
def test_race_folders_with_one_level_only_are_partial(tmp_path, monkeypatch, split, level, found):
    monkeypatch.setenv("GENFEAT_DATA", str(tmp_path))
    (tmp_path / "race" / "RACE" / split).mkdir(parents=True)
    (tmp_path / "race" / "RACE" / split / level).symlink_to(DATA / "race" / "RACE" / split / level)
    with pytest.raises(DataError, match=found):
        load_task("race", split)


def test_task_spec_checks():
    with pytest.raises(ConfigError, match="at least 2"):
        TaskSpec("x", "d", "tsv", "single", {"dev": SplitSpec("f", True, [0], 1)}, ["accuracy"], ["a"])
    with pytest.raises(ConfigError, match="regression task with a label set"):
        TaskSpec("x", "d", "tsv", "single", {"dev": SplitSpec("f", True, [0], 1)}, ["pearson"], ["a", "b"], True)
    with pytest.raises(ConfigError, match="the pair transformation takes 2"):
        TaskSpec("x", "d", "tsv", "pair", {"dev": SplitSpec("f", True, [0], 1)}, ["accuracy"], ["a", "b"])
    with pytest.raises(ConfigError, match="expected one of"):
        TaskSpec("x", "d", "tsv", "triple", {"dev": SplitSpec("f", True, [0], 1)}, ["accuracy"], ["a", "b"])
    for names, match in ((["no"], "names its 2 labels"), (["no", "no"], "names its 2 labels"),
                         (["1", "0"], "names label '0' '1', which is another of its labels")):
        with pytest.raises(ConfigError, match=match):
            TaskSpec("x", "d", "tsv", "single", {"dev": SplitSpec("f", True, [0], 1)}, ["accuracy"], ["0", "1"],
                     label_names=names)
    with pytest.raises(DataError, match="task 'sst2' has no split 'validation'"):
        load_task("sst2", "validation")
    assert {"cola", "sst2", "mrpc", "rte", "stsb", "wnli", "imdb", "race", "squad_split"} <= set(TASKS)


def test_bad_race_passages(tmp_path, monkeypatch):
    monkeypatch.setenv("GENFEAT_DATA", str(tmp_path))
    monkeypatch.setitem(loaders.RACE_QUESTIONS, "dev", 1)        # the one passage written here is the whole split
    folder = tmp_path / "race" / "RACE" / "dev" / "high"
    folder.mkdir(parents=True)
    passage = {"id": "high1.txt", "article": "A text.", "questions": ["Why _?"], "options": [["a", "b", "c", "d"]],
               "answers": ["C"]}
    (folder / "1.txt").write_text(json.dumps(passage))
    (example,) = load_task("race", "dev")
    assert example.label == 2 and example.choices == ("a", "b", "c", "d") and example.uid == "dev/high/1.txt#0"
    for change, match in (({"answers": ["E"]}, r"question 0: label 'E' is not one of"),
                          ({"options": [["a", "b", "c"]]}, "question 0 has 3 options, expected 4"),
                          ({"answers": []}, "has 1 questions, 1 option lists and 0 answers"),
                          ({"article": " "}, "the article is empty"),
                          # wrong JSON types: one line each, never a traceback nor a string read letter by letter
                          ({"article": 3}, "the article is int 3, not a string"),
                          ({"questions": [7]}, "question 0: the question is int 7, not a string"),
                          ({"questions": [None]}, "question 0: the question is NoneType"),
                          ({"questions": [""]}, "question 0: the question is empty"),
                          ({"options": [["a", 1, "c", "d"]]}, "question 0: the option is int 1"),
                          ({"options": ["abcd"]}, "question 0: its options are a str, not a list"),
                          ({"questions": "W", "options": [["a", "b", "c", "d"]]}, "questions is a str, not a list")):
        (folder / "1.txt").write_text(json.dumps(passage | change))
        with pytest.raises(DataError, match=match) as e:
            load_task("race", "dev")
        assert str(folder / "1.txt") in str(e.value)
    (folder / "1.txt").write_text("{not json")
    with pytest.raises(DataError, match="is not a RACE passage"):
        load_task("race", "dev")
