"""The floor users check first: TF-IDF features and a linear model (scikit-learn), on the task splits the
fine-tuning runner uses (genfeat.tasks), scored with the same metrics.

Recipe: ``method: tfidf`` plus the fields of :class:`TfidfRecipe`. Features: TF-IDF of word n-grams fitted on
the training texts; a single-text task uses the text's vector x_A; a pair or similarity task the
concatenation [x_A, x_B, x_A ⊙ x_B] (the element-wise product marks the n-grams the two texts share, which
a linear model over the two vectors alone cannot see). Classification: logistic regression (L2, ``c`` the
inverse regularisation strength); regression (STS-B): ridge regression (``alpha``).
Multiple-choice and span tasks are not served (no linear floor of this form fits them).

Result: ``dev_<metric>`` (and ``test_<metric>`` for a labelled test split), ``features``, ``seconds``.
Nothing is trained step by step, so there is no checkpoint and no ``--resume``; with ``--out`` the figures go
to OUT/results.json.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path

from ..config import Config
from ..errors import ConfigError
from ..io import write_json_atomic
from ..runner import register_method
from ..tasks import get_task, load_task
from .finetune import scores


@dataclass
class TfidfRecipe(Config):
    """TF-IDF + a linear model on a task."""

    task: str = "sst2"
    """Task name (genfeat.tasks.TASKS); single-text, pair or similarity tasks."""
    train_split: str = "train"
    dev_split: str = "dev"
    test_split: str | None = None
    """Split reported as ``test_*`` when it is labelled (None: none)."""
    ngram_max: int = 2
    """Word n-grams of length 1 .. ngram_max."""
    min_df: int = 2
    """Keep n-grams seen in at least this many training texts."""
    max_features: int = 200000
    """Keep at most this many n-grams (the most frequent)."""
    lowercase: bool = True
    """Lower-case the texts first."""
    c: float = 1.0
    """Logistic regression: inverse L2 regularisation strength."""
    alpha: float = 1.0
    """Ridge regression (regression tasks): L2 strength."""

    def __post_init__(self):
        if self.ngram_max < 1 or self.min_df < 1 or self.max_features < 1:
            raise ValueError("ngram_max, min_df and max_features must be >= 1")
        if self.c <= 0 or self.alpha <= 0:
            raise ValueError(f"c ({self.c}) and alpha ({self.alpha}) must be positive")


def _features(vectorizer, examples, pair: bool):
    from scipy.sparse import hstack

    a = vectorizer.transform([ex.texts[0] for ex in examples])
    if not pair:
        return a
    b = vectorizer.transform([ex.texts[1] for ex in examples])
    return hstack([a, b, a.multiply(b)]).tocsr()


@register_method("tfidf", TfidfRecipe)
def run(cfg: TfidfRecipe, *, seed: int, out_dir: Path | None, progress: bool = True,
        resume: bool = False) -> dict[str, float]:
    from sklearn.feature_extraction.text import TfidfVectorizer
    from sklearn.linear_model import LogisticRegression, Ridge

    if resume:
        raise ConfigError("method tfidf keeps no checkpoint, so there is nothing to resume", "run it again without --resume")
    spec = get_task(cfg.task)
    if spec.transform not in ("single", "pair", "similarity"):
        raise ConfigError(f"task '{spec.name}' is a {spec.transform} task, which the TF-IDF floor does not serve",
                          "use a single-text, pair or similarity task (GLUE, IMDB, AG News)")
    t0 = time.time()
    train = load_task(spec, cfg.train_split)
    pair = spec.transform != "single"
    vectorizer = TfidfVectorizer(ngram_range=(1, cfg.ngram_max), min_df=cfg.min_df, max_features=cfg.max_features,
                                 lowercase=cfg.lowercase, sublinear_tf=True)
    vectorizer.fit([t for ex in train for t in ex.texts])
    if spec.regression:
        model = Ridge(alpha=cfg.alpha)
    else:
        model = LogisticRegression(C=cfg.c, max_iter=2000, random_state=seed)
    model.fit(_features(vectorizer, train, pair), [ex.label for ex in train])
    figures: dict[str, float] = {"train_examples": len(train), "features": len(vectorizer.vocabulary_)}
    for prefix, split in (("dev", cfg.dev_split), ("test", cfg.test_split)):
        if split is None:
            continue
        examples = load_task(spec, split)
        preds = model.predict(_features(vectorizer, examples, pair)).tolist()
        figures.update({f"{prefix}_{k}": v for k, v in scores(spec, examples, preds).items()})
        figures[f"{prefix}_examples"] = len(examples)
    figures["seconds"] = time.time() - t0
    if out_dir is not None:
        write_json_atomic(Path(out_dir) / "results.json", figures)
    return figures
