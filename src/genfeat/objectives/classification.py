"""Generic supervised classification objective (the target loss L_t of thesis §1.4).

Works with any model whose output has a ``logits`` attribute of shape (b, k): the batch is a
mapping holding ``labels`` (b,) and the model's keyword inputs. A model whose output also has
``aux_logits`` (a tuple of (b, k) logits of intermediate classifiers, e.g. Planetoid's per-branch
softmax layers) can have a cross-entropy on each added with ``aux_weight``.
"""

from __future__ import annotations

from typing import Any, Mapping

import torch.nn.functional as F
from torch import Tensor, nn

from ..framework.objective import LossOutput, Objective


class ClassificationObjective(Objective):
    """Summed cross-entropy −Σ log p(y_i | x_i), with the number of examples and of correct predictions.

    Args:
        label_key: batch key holding the labels (default ``labels``); every other key is passed to
            the model as a keyword argument.
        ignore_index: label value excluded from loss and counts (default -1).
        aux_weight: weight of the cross-entropy on each of the output's ``aux_logits`` (default 0.0: off).
    Shapes:
        model(**inputs).logits: (b, k); batch[label_key]: (b,) int64.
    """

    name = "cls"

    def __init__(self, label_key: str = "labels", ignore_index: int = -1, aux_weight: float = 0.0):
        self.label_key = label_key
        self.ignore_index = ignore_index
        self.aux_weight = aux_weight

    def __call__(self, model: nn.Module, batch: Mapping[str, Any]) -> LossOutput:
        out = model(**{k: v for k, v in batch.items() if k != self.label_key})
        return self.score(out, batch[self.label_key])

    def score(self, out: Any, labels: Tensor) -> LossOutput:
        """The loss of a model output ``out`` (its ``logits`` (b, k), ``aux_logits``) against ``labels`` (b,)."""
        logits = out.logits
        keep = labels != self.ignore_index
        loss_sum = F.cross_entropy(logits[keep], labels[keep], reduction="sum")
        if self.aux_weight:
            for aux in getattr(out, "aux_logits", ()):
                loss_sum = loss_sum + self.aux_weight * F.cross_entropy(aux[keep], labels[keep], reduction="sum")
        correct = (logits[keep].argmax(-1) == labels[keep]).sum()
        return LossOutput(loss_sum, int(keep.sum()), {"correct": float(correct)})
