"""The target tasks genfeat knows: their registry datasets (files, canonical URLs, checksums) and
their :class:`~genfeat.tasks.spec.TaskSpec`.

Present in ``shared/data`` (sha256s from its PROVENANCE.md files): GLUE CoLA, SST-2, MRPC, RTE,
STS-B, WNLI (train/dev/test; the test files have no labels), IMDB (25k train + 25k test reviews),
RACE, SQuAD v1.1 dev, AG News test. Declared for users who download them: MNLI, QNLI, QQP, AG News
train, SQuAD v1.1 train and SQuAD v2.0. Where no sha256 is established the declaration carries the
digest that is known (SQuAD v1.1 train's and v2.0's SHA-1s from GluonNLP's registry) or none at all
(MNLI, QNLI, QQP, AG News train, whose URL names a repository's moving ``master`` branch): the registry
then checks nothing, as :func:`genfeat.data.registry.verify` documents.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from ..data.registry import DatasetSpec, FileSpec, register
from ..errors import DataError
from .spec import SplitSpec, TaskSpec

# the exact bytes of shared/data/glue (F0restL1n/BERT at the commit its PROVENANCE names)
_GLUE_RAW = "https://raw.githubusercontent.com/F0restL1n/BERT/0d0288be08079531c7b3a85af3d532f9adb0f13a/glue_data"
_GLUE_ZIP = "https://dl.fbaipublicfiles.com/glue/data"
_GLUE_SHA = {
    "CoLA": {"train": "cb368ebeb9f27d7ad03720d27ddc95687a311bdb100781a2fe59a5f5b1bc0624",
             "dev": "8c013e21dc39957cac37378d87bebe225b694a0d5fe13eded66c2856628833fd",
             "test": "3b4df85f7a9a0633574b38d181e18090ac961a24b18fb6bcd74999ddea8ad0b8"},
    "SST-2": {"train": "48eac26399f8456935f81dd9e3a745c1430adb6c62e233ccfe22db4a0d15d1d1",
              "dev": "54a9c12c77e402fc14d6a66a506f24d999f596b0176eb777c972cccc2f9cc4b0",
              "test": "69a938605609b3e6663b4487918fe1565eb293734e6e520d0366d1d412fd2a13"},
    "MRPC": {"train": "f178bcc72ab4c2c1c778b480912e0c8e1dba3ead150dc1d490d70682ab888c1e",
             "dev": "9e8f284788040f7c9ecde2e1b3c07237c756f926bd9ef8548ef5d34b56f69f17",
             "test": "aee460ceda833926b8ab2ad952d399f5cf8bc9335cff19afcac03dc449558622"},
    "RTE": {"train": "41e3a9b063433392343fad9e962cf2f58b681c78d8f71592f4186f0837246c5c",
            "dev": "80230dfa1347282e7b532b06a1004a76a710087541189bf874223ddf0e3819fb",
            "test": "6e33f09b5c2bfd5fd5fde217070f3dd49e484e33b9752b5864cf36fc421a213f"},
    "STS-B": {"train": "41c4d978b6162abdcada7e49a982211954cca5459c228db478af333124b257a2",
              "dev": "fe7dc0632a5033562f3cadff991f6e8d9b9b6311861660e78c3c82eb7db67f59",
              "test": "16b4223d7d44a644fbc10f1b449472cfe81e1715fb07cf44023b0aa88ce856eb"},
    "WNLI": {"train": "9a88e9d54b6861cc796a088e9acf4f5f65064a9ef65ae6fa7a688b28391e5c9a",
             "dev": "cba00490596dd14be8cf53b4f53bb744abe3a7b89f81ab210528d80225338ed5",
             "test": "ff0296817e235bf6f7a230c5f6781bd6ee228a45445f6510831fdef6f2a04766"},
}
for _task, _files in _GLUE_SHA.items():
    register(DatasetSpec(f"glue_{_task.lower().replace('-', '')}", {
        split: FileSpec(f"glue/{_task}/{split}.tsv", f"{_GLUE_RAW}/{_task}/{split}.tsv", sha)
        for split, sha in _files.items()
    }, citation="Wang et al., GLUE, ICLR 2019", note="MRPC train lacks one of the 3,668 official rows "
                "(shared/data/glue/PROVENANCE.md)" if _task == "MRPC" else ""))
# Not in shared/data; no digest of these files is established, so none is checked.
for _task, _zip, _files in (("MNLI", "MNLI", ("train", "dev_matched", "dev_mismatched", "test_matched",
                                               "test_mismatched")),
                            ("QNLI", "QNLIv2", ("train", "dev", "test")),
                            ("QQP", "QQP-clean", ("train", "dev", "test"))):
    register(DatasetSpec(f"glue_{_task.lower()}", {
        split: FileSpec(f"glue/{_task}/{split}.tsv", f"{_GLUE_ZIP}/{_zip}.zip", None,
                        archive_member=f"{_task}/{split}.tsv") for split in _files
    }, citation="Wang et al., GLUE, ICLR 2019", note="no checksum recorded: the files are not in shared/data"))

IMDB_URL = "https://ai.stanford.edu/~amaas/data/sentiment/aclImdb_v1.tar.gz"
IMDB_REVIEWS = {"neg": 12_500, "pos": 12_500, "unsup": 50_000}
"""Reviews in each folder of the complete IMDB archive: ``aclImdb/{train,test}/{neg,pos}`` and ``aclImdb/train/unsup``."""
register(DatasetSpec("imdb", {
    # shared/data's file is a repack of the official review files (same member names as the official
    # aclImdb_v1.tar.gz, which the loader reads as well); the official archive's own digest is not
    # recorded here, so a downloaded copy is not checked, only its review counts (check_imdb_reviews)
    "labeled": FileSpec("imdb/aclImdb_v1_labeled.tar.gz", IMDB_URL, None),
}, citation="Maas et al., ACL 2011", note="shared/data's repack has sha256 "
            "3c7d06d26560475e8a57d0901ee9561546adbf9c9530f1d1cc5345e410b9463a (imdb/PROVENANCE.md)"))


def check_imdb_reviews(path: Path, split: str, found: Mapping[str, int]) -> None:
    """Refuse a partial copy of an IMDB archive of the registry: ``found`` maps each folder of
    ``aclImdb/<split>/`` that was read to the reviews in it, which must be :data:`IMDB_REVIEWS`'s count.
    The counts come from the reader's own pass over the archive, so checking them costs nothing.

    Raises:
        DataError: naming the archive, what it holds and what the complete one holds.
    """
    short = "; ".join(f"aclImdb/{split}/{folder} holds {n:,} of its {IMDB_REVIEWS[folder]:,} reviews"
                      for folder, n in found.items() if n != IMDB_REVIEWS[folder])
    if short:
        raise DataError(f"'{path}' is a partial copy of the IMDB archive: {short}",
                        f"replace it with the complete archive (download {IMDB_URL}, or copy shared/data's file of "
                        "this name), or delete it so genfeat downloads it")
register(DatasetSpec("race", {
    # shared/data's repack of the official train/*.txt files (race/PROVENANCE.md), published nowhere: the URL
    # is the official archive its files come from, which the RACE reader never downloads to this name (it says
    # to unpack the archive to race/RACE/ instead). dev and test are read as the official per-passage files
    # under race/RACE/{dev,test}/{high,middle}/
    "train": FileSpec("race/RACE_train.tar.xz", "http://www.cs.cmu.edu/~glai1/data/race/RACE.tar.gz",
                      "09c0aadff6fb6132347182bccfcedb11b9a2b840aca9679b236f4c0c62501af2", size=14556780),
}, citation="Lai et al., EMNLP 2017", note="non-commercial research use only; the official RACE.tar.gz unpacked "
            "to race/RACE/ is read instead of the repack"))
_SQUAD = "https://rajpurkar.github.io/SQuAD-explorer/dataset"
register(DatasetSpec("squad_v1.1", {
    "train": FileSpec("squad/train-v1.1.json", f"{_SQUAD}/train-v1.1.json", None,
                      sha1="1faea1252438a64f9718412a55036b786cfcc636"),
    "dev": FileSpec("squad/dev-v1.1.json", f"{_SQUAD}/dev-v1.1.json",
                    "95aa6a52d5d6a735563366753ca50492a658031da74f301ac5238b03966972c9", size=4854279),
}, citation="Rajpurkar et al., EMNLP 2016", note="train: SHA-1 from GluonNLP's registry (no sha256 recorded)"))
register(DatasetSpec("squad_v2.0", {
    "train": FileSpec("squad/train-v2.0.json", f"{_SQUAD}/train-v2.0.json", None,
                      sha1="ceb2acdea93b9d82ab1829c7b1e03bee9e302c99"),
    "dev": FileSpec("squad/dev-v2.0.json", f"{_SQUAD}/dev-v2.0.json", None,
                    sha1="846082d15ed71cb5220645b9d473441e00070778"),
}, citation="Rajpurkar, Jia & Liang, ACL 2018", note="SHA-1s from GluonNLP's registry (no sha256 recorded)"))
register(DatasetSpec("ag_news", {
    "test": FileSpec("ag_news/test.csv", "https://raw.githubusercontent.com/suuuch/TransformerClassification/"
                     "ba663f263ca24ed7efd6ccf6572418775c1f2da0/data/ag_news_csv/test.csv",
                     "521465c2428ed7f02f8d6db6ffdd4b5447c1c701962353eb2c40d548c3c85699", size=1857427),
    # not in shared/data; no digest established
    "train": FileSpec("ag_news/train.csv", "https://raw.githubusercontent.com/mhjabreel/CharCnn_Keras/master/data/"
                      "ag_news_csv/train.csv", None),
}, citation="Zhang, Zhao & LeCun, NIPS 2015"))


def _glue(name: str, dataset: str, transform: str, cols: list[int], label: int | None, metrics: list[str],
          labels: tuple[str, ...] = (), regression: bool = False, test_cols: list[int] | None = None,
          header: bool = True, dev: tuple[str, ...] = ("dev",), tests: tuple[str, ...] = ("test",),
          names: tuple[str, ...] = ()) -> TaskSpec:
    splits = {"train": SplitSpec("train", header, cols, label)}
    splits.update({split: SplitSpec(split, header, cols, label) for split in dev})
    splits.update({split: SplitSpec(split, True, test_cols or cols, None) for split in tests})
    return TaskSpec(name, dataset, "tsv", transform, splits, metrics, list(labels), regression, label_names=list(names))


TASKS: dict[str, TaskSpec] = {t.name: t for t in (
    # CoLA train/dev have no header: source, label, original label, sentence; test: index, sentence
    _glue("cola", "glue_cola", "single", [3], 1, ["matthews", "accuracy"], ["0", "1"], header=False,
          test_cols=[1], names=("unacceptable", "acceptable")),
    _glue("sst2", "glue_sst2", "single", [0], 1, ["accuracy"], ["0", "1"], test_cols=[1], names=("negative", "positive")),
    _glue("mrpc", "glue_mrpc", "similarity", [3, 4], 0, ["f1", "accuracy"], ["0", "1"],
          names=("not_equivalent", "equivalent")),
    _glue("rte", "glue_rte", "pair", [1, 2], 3, ["accuracy"], ["entailment", "not_entailment"]),
    _glue("stsb", "glue_stsb", "similarity", [7, 8], 9, ["pearson", "spearman"], regression=True),
    _glue("wnli", "glue_wnli", "pair", [1, 2], 3, ["accuracy"], ["0", "1"], names=("not_entailment", "entailment")),
    _glue("mnli", "glue_mnli", "pair", [8, 9], -1, ["accuracy"], ["contradiction", "entailment", "neutral"],
          dev=("dev_matched", "dev_mismatched"), tests=("test_matched", "test_mismatched")),
    _glue("qnli", "glue_qnli", "pair", [1, 2], 3, ["accuracy"], ["entailment", "not_entailment"]),
    _glue("qqp", "glue_qqp", "similarity", [3, 4], 5, ["accuracy", "f1"], ["0", "1"], test_cols=[1, 2],
          names=("not_duplicate", "duplicate")),
    TaskSpec("imdb", "imdb", "imdb", "single", {"train": SplitSpec("labeled"), "test": SplitSpec("labeled")},
             ["accuracy"], ["neg", "pos"], label_names=["negative", "positive"]),
    TaskSpec("ag_news", "ag_news", "csv", "single",
             {split: SplitSpec(split, False, [1, 2], 0) for split in ("train", "test")},
             ["accuracy"], ["1", "2", "3", "4"], label_names=["World", "Sports", "Business", "Sci/Tech"]),
    # RACE reads race/RACE/<split>/ when present; the registry file (train only) when it is not
    TaskSpec("race", "race", "race", "multiple_choice",
             {split: SplitSpec("train") for split in ("train", "dev", "test")}, ["accuracy"], ["A", "B", "C", "D"]),
    TaskSpec("squad_v1.1", "squad_v1.1", "squad", "span", {"train": SplitSpec("train"), "dev": SplitSpec("dev")},
             ["exact_match", "squad_f1"]),
    # the official train file is not in shared/data: train, dev and test are articles of the dev file
    TaskSpec("squad_split", "squad_v1.1", "squad", "span",
             {split: SplitSpec("dev") for split in ("train", "dev", "test")}, ["exact_match", "squad_f1"],
             article_split=True),
    TaskSpec("squad_v2.0", "squad_v2.0", "squad", "span", {"train": SplitSpec("train"), "dev": SplitSpec("dev")},
             ["exact_match", "squad_f1"], unanswerable=True),
)}


def get_task(name: str) -> TaskSpec:
    """The spec of task ``name``; an unknown name is a DataError listing the known ones."""
    if name not in TASKS:
        raise DataError(f"unknown task '{name}'", f"use one of: {', '.join(sorted(TASKS))}")
    return TASKS[name]
