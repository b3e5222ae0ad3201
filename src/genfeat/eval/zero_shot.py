"""Zero-shot heuristics of GPT-1 (seed paper §5, "Zero-shot Behaviors", Fig. 2 right).

A causal language model, never trained on the task, answers it through its next-token distribution.
For SST-2 the paper appends the token "very" to each sentence and restricts the LM's output
distribution to the words "positive" and "negative": the prediction is the word of higher
probability. Here a label word may take several tokens of the checkpoint's tokenizer; its score is
the log-probability of all of them after the cue, log p(w_1 .. w_n | text, cue) = sum_i log p(w_i |
text, cue, w_<i), which for one-token words is the paper's comparison exactly.

Any model of the causal LM protocol (genfeat.objectives.causal_lm: ``model(input_ids,
labels=targets).target_log_probs``) can be scored: GPT-1, the LSTM LM, Transformer-XL, and a
Hugging Face OpenAI GPT directory through genfeat.hub. Texts longer than the model's
``max_position`` lose their beginning (the cue and the label word are kept).

``genfeat zero-shot --checkpoint DIR --task sst2 --json`` scores a checkpoint; the ``gpt``
pretraining method scores it at every evaluation (``zero_shot.task``), and
:func:`plot_zero_shot_curves` draws the accuracy over pretraining steps from the runs' metrics.jsonl.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

import torch
from torch import Tensor, nn

from ..errors import DataError
from ..models.gpt import GPTLMHeadModel
from ..models.lstm_lm import LSTMLMHeadModel


@dataclass(frozen=True)
class ZeroShotTask:
    """A zero-shot heuristic: the cue appended to the text and the label words, in class-id order."""

    cue: str
    words: tuple[str, ...]


ZERO_SHOT_TASKS: dict[str, ZeroShotTask] = {
    # SST-2's class 0 is negative, 1 positive (genfeat.tasks: labels "0", "1")
    "sst2": ZeroShotTask("very", ("negative", "positive")),
}
CAUSAL_ARCHITECTURES = ("gpt", "lstm_lm", "transformer_xl")
"""genfeat.hub architectures whose models follow the causal LM protocol."""


def candidate_rows(vocab, text: str, task: ZeroShotTask, max_len: int | None = None) -> list[tuple[list[int], int]]:
    """For each label word, the ids of ``text cue word`` and how many of the last ids are the word's.

    The word's ids are what the tokenizer gives after the text and the cue (the same split as in
    running text); with ``max_len`` the text loses its beginning so the model's input (all ids but
    the last) fits.

    Raises:
        DataError: a label word the vocabulary cannot spell without its unknown token.
    """
    context = vocab.encode(f"{text} {task.cue}")
    rows = []
    for word in task.words:
        full = vocab.encode(f"{text} {task.cue} {word}")
        tail = full[len(context):] if full[:len(context)] == context else vocab.encode(word)
        if not tail or (vocab.unk_id is not None and vocab.unk_id in tail):
            raise DataError(f"the checkpoint's vocabulary cannot spell the label word '{word}'",
                            "use a checkpoint whose tokenizer covers the task's label words")
        ids = context + tail
        if max_len is not None and len(ids) - 1 > max_len:
            if len(tail) + 1 > max_len:
                raise DataError(f"the label word '{word}' alone is longer than the model's {max_len} positions",
                                "use a model with more positions")
            ids = ids[len(ids) - 1 - max_len:]
        rows.append((ids, len(tail)))
    return rows


@torch.no_grad()
def score_rows(model: nn.Module, rows: Sequence[tuple[list[int], int]], batch_size: int = 32) -> Tensor:
    """Sum of log p of the last ``n`` ids of each row given the ids before them, batched.

    A GPT-1 or LSTM LM applies its tied head only where a word is scored (over the whole vocabulary
    at every position it would cost about as much as the network), so rows with the same input
    (one-token label words after the same text) share one forward pass; another model of the causal
    LM protocol scores every row with its labels. Inputs are padded on the right (a causal model's
    real positions never see the padding) and batched by length.
    Shapes: ``len(rows)`` rows -> [len(rows)] fp32.
    """
    device = next(model.parameters()).device
    was_training = model.training
    model.eval()
    fused = isinstance(model, (GPTLMHeadModel, LSTMLMHeadModel))
    groups: dict[Any, list[int]] = {}  # input -> the rows reading it
    for r, (ids, _) in enumerate(rows):
        groups.setdefault(tuple(ids[:-1]) if fused else r, []).append(r)
    inputs = sorted(groups, key=lambda key: len(rows[groups[key][0]][0]))
    scores = torch.zeros(len(rows))
    for start in range(0, len(inputs), batch_size):
        chunk = inputs[start:start + batch_size]
        t = max(len(rows[groups[key][0]][0]) for key in chunk) - 1
        x = torch.zeros(len(chunk), t, dtype=torch.long)
        labels = torch.zeros(len(chunk), t, dtype=torch.long)
        where = []  # (row, input in chunk, scored positions, their targets)
        for i, key in enumerate(chunk):
            for r in groups[key]:
                ids, n = rows[r]
                x[i, :len(ids) - 1] = torch.tensor(ids[:-1])
                labels[i, :len(ids) - 1] = torch.tensor(ids[1:])
                where.append((r, i, list(range(len(ids) - 1 - n, len(ids) - 1)), ids[len(ids) - n:]))
        x = x.to(device)
        if fused:
            hidden = model(x, return_logits=False).hidden
            index = [(i, p) for _, i, positions, _ in where for p in positions]
            picked = hidden[[i for i, _ in index], [p for _, p in index]]  # [scored tokens, d]
            targets = torch.tensor([tok for *_, tail in where for tok in tail], device=device)
            flat = model.target_log_probs(picked, targets).float().cpu().split([len(w[2]) for w in where])
            for (r, *_), lp in zip(where, flat):
                scores[r] = lp.sum()
        else:
            log_probs = model(x, labels=labels.to(device)).target_log_probs.float().cpu()
            for r, i, positions, _ in where:
                scores[r] = log_probs[i, positions].sum()
    model.train(was_training)
    return scores


class ZeroShotEvaluator:
    """Scores a model on ``task``'s heuristic over the examples of ``split`` (the first ``limit``; 0: all),
    tokenised once: ``evaluator(model) -> {zero_shot_accuracy, zero_shot_positive_rate, zero_shot_examples}``.

    ``zero_shot_positive_rate`` is the share of examples given the last label word ("positive"), which
    shows a model that answers one word whatever the text.
    """

    def __init__(self, vocab, task: str, split: str = "dev", *, limit: int = 0, max_len: int | None = None,
                 batch_size: int = 32):
        from ..tasks import load_task

        if task not in ZERO_SHOT_TASKS:
            raise DataError(f"task '{task}' has no zero-shot heuristic", f"use one of {sorted(ZERO_SHOT_TASKS)}")
        self.task = ZERO_SHOT_TASKS[task]
        examples = load_task(task, split)
        examples = examples[:limit] if limit else examples
        if not examples or any(e.label is None for e in examples):
            raise DataError(f"split '{split}' of task '{task}' has no labels to score against",
                            "use a labelled split (dev)")
        self.labels = torch.tensor([int(e.label) for e in examples])
        self.rows = [row for e in examples for row in candidate_rows(vocab, e.texts[0], self.task, max_len)]
        self.batch_size = batch_size

    def scores(self, model: nn.Module) -> Tensor:
        """[n, k] log p(label word k | text, cue) of each example."""
        return score_rows(model, self.rows, self.batch_size).view(len(self.labels), len(self.task.words))

    def __call__(self, model: nn.Module) -> dict[str, float]:
        predictions = self.scores(model).argmax(1)
        return {"zero_shot_accuracy": float((predictions == self.labels).float().mean()),
                "zero_shot_positive_rate": float((predictions == len(self.task.words) - 1).float().mean()),
                "zero_shot_examples": len(self.labels)}


def read_zero_shot_curve(run_dir: str | Path) -> list[tuple[int, float]]:
    """(step, zero_shot_accuracy) of every evaluation in ``run_dir``/metrics.jsonl, in step order
    (a resumed run's repeated steps: the last record)."""
    path = Path(run_dir) / "metrics.jsonl"
    if not path.is_file():
        raise DataError(f"'{path}' does not exist", "pass the output folder of a gpt run with zero_shot.task set")
    points: dict[int, float] = {}
    for line in path.read_text().splitlines():
        record = json.loads(line)
        if record.get("event") == "eval" and "zero_shot_accuracy" in record:
            points[int(record["step"])] = float(record["zero_shot_accuracy"])
    if not points:
        raise DataError(f"'{path}' holds no zero_shot_accuracy", "run the gpt method with zero_shot.task set")
    return sorted(points.items())


def plot_zero_shot_curves(curves: dict[str, list[tuple[int, float]]], out: str | Path, chance: float = 0.5) -> Path:
    """Draw zero-shot accuracy over pretraining steps, one line per run (seed paper Fig. 2 right), as a PNG."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from ..io import atomic_path

    fig, ax = plt.subplots(figsize=(5, 3.5))
    styles = ("-o", "--s", ":^", "-.v")  # curves that coincide stay visible
    for (name, points), style in zip(curves.items(), styles * len(curves)):
        steps, acc = zip(*points)
        ax.plot(steps, acc, style, markersize=4, label=name, fillstyle="none")
    ax.axhline(chance, color="grey", linestyle="--", linewidth=1, label="chance")
    # a fixed scale from below chance: a few examples' difference does not fill the plot
    top = max(acc for points in curves.values() for _, acc in points)
    ax.set_ylim(chance - 0.1, max(chance + 0.3, top + 0.05))
    ax.set_xlabel("pretraining steps")
    ax.set_ylabel("zero-shot accuracy")
    ax.legend()
    fig.tight_layout()
    out = Path(out)
    with atomic_path(out) as tmp:
        fig.savefig(tmp, format="png", dpi=120)
    plt.close(fig)
    return out
