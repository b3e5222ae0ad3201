"""Prediction files, one prediction per example, written atomically (:mod:`genfeat.io`).

- GLUE tasks (TSV reader): the GLUE submission format, ``index<TAB>prediction`` with a header, the
  index counting the split's rows from 0 (the ``index`` column of GLUE's test files), classes as
  their label strings (``entailment``, ``1``) and STS-B scores with three decimals;
- SQuAD (span tasks): the official evaluation's JSON object ``{question id: answer text}``;
- other tasks: ``uid<TAB>prediction`` with a header.
"""

from __future__ import annotations

import json
import operator
from pathlib import Path
from typing import Sequence

from ..errors import DataError
from ..io import write_text_atomic
from .spec import Example, TaskSpec


def _label_text(spec: TaskSpec, prediction) -> str:
    if spec.regression:
        return f"{float(prediction):.3f}"
    try:
        index = operator.index(prediction)  # int, numpy or 0-d torch integers
    except TypeError:
        index = -1
    if not 0 <= index < len(spec.labels):
        raise DataError(f"prediction {prediction!r} is not a class id of task '{spec.name}' (0..{len(spec.labels) - 1})",
                        "predict with a head of as many outputs as the task has labels")
    return spec.labels[index]


def write_predictions(spec: TaskSpec, examples: Sequence[Example], predictions: Sequence, path: str | Path) -> None:
    """Write ``predictions`` (class ids, scores, or answer texts for span tasks) of ``examples`` to ``path``.

    Raises:
        DataError: a prediction count that differs from the example count, or a class id outside
            the task's label set.
    """
    if len(predictions) != len(examples):
        raise DataError(f"{len(predictions)} predictions for {len(examples)} examples of task '{spec.name}'",
                        "predict every example of the split once")
    if spec.transform == "span":
        text = json.dumps({e.uid: str(p) for e, p in zip(examples, predictions)}, indent=1, ensure_ascii=False) + "\n"
    elif spec.reader == "tsv":
        text = "index\tprediction\n" + "".join(f"{i}\t{_label_text(spec, p)}\n" for i, p in enumerate(predictions))
    else:
        text = "uid\tprediction\n" + "".join(f"{e.uid}\t{_label_text(spec, p)}\n" for e, p in zip(examples, predictions))
    write_text_atomic(path, text)
