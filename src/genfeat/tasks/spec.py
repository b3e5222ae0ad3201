"""Task specifications: which files, which text fields, which labels, which metric and which input
transformation (GPT-1 Fig. 1) a target task uses.

A :class:`TaskSpec` is data, not code: the readers in :mod:`genfeat.tasks.loaders` turn the files it
names into :class:`Example` records, and :mod:`genfeat.tasks.transforms` turns an example into the
token sequences of one backbone according to ``transform``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from ..config import Config
from ..errors import ConfigError, DataError

Transform = Literal["single", "pair", "similarity", "multiple_choice", "span"]
Reader = Literal["tsv", "csv", "imdb", "race", "squad"]
Metric = Literal["accuracy", "f1", "matthews", "pearson", "spearman", "exact_match", "squad_f1"]
# texts an example of each transformation holds: (A,), (A, B), (passage, question), (question, context)
N_TEXTS = {"single": 1, "pair": 2, "similarity": 2, "multiple_choice": 2, "span": 2}


@dataclass
class SplitSpec(Config):
    """One split of a task: the registry file it is read from and, for delimited files, its columns."""

    file: str = ""
    """Key of the file in the task's registry dataset (see :mod:`genfeat.data.registry`)."""
    header: bool = True
    """The first line of a TSV/CSV file is a header (CoLA's train/dev files have none)."""
    text_columns: list[int] = field(default_factory=list)
    """0-based columns of the text fields, in the order the transformation takes them (TSV/CSV only;
    a single-text task may name several, joined with a space: AG News title and description)."""
    label_column: int | None = None
    """0-based column of the label (negative counts from the end); None: the split has no labels (GLUE test)."""

    def __post_init__(self):
        if not self.file:
            raise ConfigError("SplitSpec.file is empty", "name a file key of the task's dataset")


def _label_key(text: str) -> str:
    """A label or label name as names are compared: case and ``-`` / ``_`` / space aside."""
    return text.strip().lower().replace("-", "_").replace(" ", "_")


@dataclass
class TaskSpec(Config):
    """A target task. Classification when ``labels`` is given, regression when ``regression`` is set,
    span extraction for ``transform: span`` (no label set: the label is the answer span)."""

    name: str = ""
    """Task name, as ``--task`` takes it (e.g. ``sst2``)."""
    dataset: str = ""
    """Registry dataset holding the files (:func:`genfeat.data.registry.get_dataset`)."""
    reader: Reader = "tsv"
    """File format: ``tsv`` (GLUE), ``csv`` (AG News), ``imdb`` (review files in a tar.gz), ``race``
    (one JSON passage per file), ``squad`` (SQuAD JSON)."""
    transform: Transform = "single"
    """Input transformation (GPT-1 Fig. 1): single text, pair (entailment), similarity (both orders),
    multiple choice (context + question + each answer), span (extraction with a document stride)."""
    splits: dict[str, SplitSpec] = field(default_factory=dict)
    """split name (train, dev, test...) -> where it is read from."""
    metrics: list[Metric] = field(default_factory=lambda: ["accuracy"])
    """Metrics reported on a labelled split, the first one being the task's main metric."""
    labels: list[str] = field(default_factory=list)
    """Label strings as written in the files; a label's class id is its position. Empty for regression and span."""
    regression: bool = False
    """The label is a real number (STS-B similarity in [0, 5])."""
    article_split: bool = False
    """The splits are parts (train/dev/test) of a seeded article-level split of one file (SQuAD v1.1
    dev, whose train file is not in shared/data; see :mod:`genfeat.tasks.loaders`)."""
    unanswerable: bool = False
    """Span tasks: a question may have no answer in its context (SQuAD 2.0). Fine-tuning then trains an
    answerability head, and a model's answerability head may leave a question unanswered (""). False: every
    question is answered, whatever an answerability head says (a Hugging Face XLNetForQuestionAnswering trained
    on SQuAD 1.1 carries an untrained one)."""
    label_names: list[str] = field(default_factory=list)
    """What the labels mean, in the same order, where the files write numbers (SST-2's 0 / 1: negative /
    positive, GLUE's and the ``datasets`` library's names); empty: the labels are their names. A Hugging Face
    task model's ``id2label`` is matched against both (genfeat.methods.finetune.align_labels) and genfeat's
    export writes the names."""

    def __post_init__(self):
        if not self.name or not self.dataset:
            raise ConfigError("TaskSpec.name or TaskSpec.dataset is empty", "name the task and its registry dataset")
        if not self.splits:
            raise ConfigError(f"task '{self.name}' has no splits", "give TaskSpec.splits at least one split")
        if not self.metrics:
            raise ConfigError(f"task '{self.name}' has no metric", "give TaskSpec.metrics at least one metric")
        if self.regression and self.labels:
            raise ConfigError(f"task '{self.name}' is a regression task with a label set",
                              "set TaskSpec.labels empty or TaskSpec.regression false")
        needs_labels = self.transform != "span" and not self.regression
        if needs_labels and len(self.labels) < 2:
            raise ConfigError(f"task '{self.name}' has {len(self.labels)} labels, a classifier needs at least 2",
                              "list the label strings in TaskSpec.labels, or set regression")
        if self.unanswerable and self.transform != "span":
            raise ConfigError(f"task '{self.name}' is marked unanswerable but is not a span task",
                              "set TaskSpec.unanswerable only for span extraction (SQuAD 2.0-style)")
        if self.article_split and set(self.splits) != {"train", "dev", "test"}:
            raise ConfigError(f"task '{self.name}' splits its articles but names splits {list(self.splits)}",
                              "name exactly the splits train, dev and test")
        if len(set(self.labels)) != len(self.labels):
            raise ConfigError(f"task '{self.name}' lists a label twice: {self.labels}", "list each label once")
        if self.label_names and (len(self.label_names) != len(self.labels)
                                 or len(set(self.label_names)) != len(self.label_names)):
            raise ConfigError(f"task '{self.name}' names its {len(self.labels)} labels {self.labels} as "
                              f"{self.label_names}", "give one distinct name per label, in the labels' order, or none")
        for j, name in enumerate(self.label_names):
            if any(k != j and _label_key(name) == _label_key(label) for k, label in enumerate(self.labels)):
                raise ConfigError(f"task '{self.name}' names label {self.labels[j]!r} {name!r}, which is another of "
                                  "its labels", "give each label a name that is not another label")
        if self.reader in ("tsv", "csv"):
            for split, s in self.splits.items():
                n = len(s.text_columns)
                if n != N_TEXTS[self.transform] and not (self.transform == "single" and n > 1):
                    raise ConfigError(f"task '{self.name}' split '{split}' has {len(s.text_columns)} text columns, "
                                      f"the {self.transform} transformation takes {N_TEXTS[self.transform]}",
                                      "set SplitSpec.text_columns to one column per text field")

    @property
    def class_names(self) -> list[str]:
        """What each class means, in class-id order: ``label_names``, else the labels."""
        return list(self.label_names or self.labels)

    def class_of(self, name: str) -> int | None:
        """The class id whose label (as the files write it) or label name ``name`` spells, case and ``-`` / ``_`` /
        space aside; None for a name that is neither."""
        for j, label in enumerate(self.labels):
            if _label_key(name) in (_label_key(label), _label_key(self.label_names[j]) if self.label_names else None):
                return j
        return None

    def check_split(self, split: str, labelled: bool = False, role: str = "") -> None:
        """Refuse a split the task has not, or (``labelled``) one whose examples carry no labels (a delimited file
        without a label column: GLUE's test files); ``role`` names the setting that chose it (for the fix).

        Raises:
            DataError: the split is unknown or unlabelled.
        """
        if split not in self.splits:
            raise DataError(f"task '{self.name}' has no split '{split}'", f"use one of: {', '.join(self.splits)}")
        if labelled and self.reader in ("tsv", "csv") and self.splits[split].label_column is None:
            labelled_splits = [name for name, s in self.splits.items() if s.label_column is not None]
            raise DataError(f"task '{self.name}' split '{split}' has no labels",
                            f"set {role or 'the split'} to a labelled split ({', '.join(labelled_splits)})")

    def check_run_splits(self, train: str, dev: str, test: str | None, section: str = "") -> None:
        """:meth:`check_split` for a run's splits: the training and dev ones labelled, a test one (optional) known;
        ``section``: where the run's settings name them (``data.``), for the fix.

        Raises:
            DataError: a split is unknown, or the training or dev split unlabelled.
        """
        self.check_split(train, labelled=True, role=f"{section}train_split")
        self.check_split(dev, labelled=True, role=f"{section}dev_split")
        if test is not None:
            self.check_split(test)

    @property
    def n_labels(self) -> int:
        """Output size of the task's head: number of classes, 1 for regression (span: 0, start/end per token)."""
        return 1 if self.regression else len(self.labels)


@dataclass(frozen=True)
class Example:
    """One example of a task.

    Attributes:
        uid: identifier (file and line, review file name, RACE passage id and question index, SQuAD id).
        texts: the text fields in the order the transformation takes them: (A,) single; (A, B) pair
            and similarity; (passage, question) multiple choice; (question, context) span.
        label: class id (position in ``TaskSpec.labels``), a float for regression, None when the
            split has no labels; for span tasks None (see ``answers``).
        choices: the candidate answers of a multiple-choice example.
        answers: span tasks: the gold answers as (text, character offset in the context).
    """

    uid: str
    texts: tuple[str, ...]
    label: int | float | None = None
    choices: tuple[str, ...] = ()
    answers: tuple[tuple[str, int], ...] = ()
