"""GDAN generator figures (thesis §3.2; Yang et al., ACL 2017), from finished runs.

``questions`` (Table 3.3 analogue): the questions two question generators G write, by beam search, for the
same paragraphs and answers, as a Markdown table; meant for G after MLE pretraining beside G after the
REINFORCE steps of Algorithm 1. Each checkpoint is a ``question_gen`` checkpoint or a GDAN run's ``OUT/last``
(:func:`genfeat.methods.question_gen.load_generator`); both must share one vocabulary. The answers are
answer chunks extracted from unlabelled paragraphs of the GDAN split (``--source unlabelled``, what G writes
questions for in training) or the human answers of dev questions, with the human question beside them
(``--source dev``).

``d-loss`` (Fig. 3.8 analogue): D's loss on the generated pairs, −J(U_G, d_gen, D) per question (the mean
span negative log-likelihood the trainer logs as ``qa_gen``), over D's training steps, for GDAN runs (e.g.
``gen_domain``, whose G stays as MLE pretraining left it, beside ``gdan``, whose G takes REINFORCE steps), as a
PNG. Only D steps are counted on the x axis (Algorithm 1 interleaves T_D D steps with T_G G steps).

    python scripts/gdan_figures.py questions --mle runs/A/last --rl runs/B/last --out table.md
    python scripts/gdan_figures.py d-loss --run "MLE G=runs/A" --run "RL G=runs/B" --out fig.png
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from genfeat.config import from_dict
from genfeat.data.answer_chunks import ChunkConfig
from genfeat.data.gdan import GDANDataConfig, QAExample, load_gdan_data
from genfeat.data.question_gen import answer_examples
from genfeat.errors import DataError, GenfeatError
from genfeat.framework.checkpoint import read_config
from genfeat.framework.schedule import stage_steps
from genfeat.framework.trainer import METRICS_FILE
from genfeat.io import atomic_path
from genfeat.methods.question_gen import generated_examples, load_generator


def excerpt(ex: QAExample, window: int) -> str:
    """The paragraph's words within ``window`` words of the answer, the answer in bold, cuts marked by …."""
    words = list(ex.paragraph.tokens)
    lo, hi = max(0, ex.start - window), min(len(words), ex.end + 1 + window)
    text = " ".join(words[lo:ex.start] + ["**" + " ".join(words[ex.start:ex.end + 1]) + "**"] + words[ex.end + 1:hi])
    return ("… " if lo > 0 else "") + text + (" …" if hi < len(words) else "")


def cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ") or "(empty)"


def pick_examples(args: argparse.Namespace, recipe: dict) -> list[QAExample]:
    """The (paragraph, answer) pairs to write questions for (see the module docstring)."""
    data = load_gdan_data(from_dict(GDANDataConfig, recipe.get("data"), "data"), args.seed)
    if args.source == "dev":
        firsts: dict[str, QAExample] = {}
        for ex in data.dev:
            firsts.setdefault(ex.paragraph.uid, ex)
        return list(firsts.values())[args.skip:args.skip + args.paragraphs]
    chunks = from_dict(ChunkConfig, recipe.get("chunks"), "chunks")
    paragraphs = data.unlabelled[args.skip:args.skip + args.paragraphs]
    return answer_examples(paragraphs, chunks, args.per_paragraph, args.seed)


def questions(args: argparse.Namespace) -> dict:
    mle, vocab = load_generator(args.mle)
    rl, rl_vocab = load_generator(args.rl)
    if vocab.symbols != rl_vocab.symbols:
        raise DataError(f"'{args.mle}' and '{args.rl}' have different vocabularies",
                        "compare generators trained on the same split, labelling rate and min_freq")
    config = read_config(args.rl)
    examples = pick_examples(args, config.get("recipe", {}))
    if not examples:
        raise DataError("no paragraph with an answer was picked", "raise --paragraphs or lower --skip")
    max_len = config.get("recipe", {}).get("max_question_words", 30) + 1
    by_mle = generated_examples(mle, examples, vocab, "beam", max_len, args.beam)
    by_rl = generated_examples(rl, examples, vocab, "beam", max_len, args.beam)
    human = args.source == "dev"
    head = "| # | paragraph (answer in bold) | answer | " + ("human | " if human else "") + "G after MLE | G after RL |"
    lines = [head, "|" + "---|" * (head.count("|") - 1)]
    for i, (ex, (a, _), (b, _)) in enumerate(zip(examples, by_mle, by_rl), 1):
        row = [str(i), excerpt(ex, args.window), ex.answers[0]] + ([" ".join(ex.question)] if human else [])
        lines.append("| " + " | ".join(cell(c) for c in row + [" ".join(a.question), " ".join(b.question)]) + " |")
    with atomic_path(args.out) as tmp:
        tmp.write_text("\n".join(lines) + "\n", encoding="utf-8")
    same = sum(a.question == b.question for (a, _), (b, _) in zip(by_mle, by_rl))
    return {"out": str(args.out), "rows": len(examples), "identical_questions": same}


def d_steps(phase_step: int, t_d: int, t_g: int, adversarial: bool) -> int:
    """D steps done after ``phase_step`` steps of the training phase (T_D D steps, then T_G G steps, per round)."""
    return stage_steps([t_d, t_g], phase_step)[0] if adversarial else phase_step


def curve(run: Path, key: str) -> tuple[list[int], list[float], str]:
    """(D steps, logged ``key`` values, setting) of a GDAN run directory."""
    recipe = read_config(run / "last").get("recipe", {})
    t_d, t_g, setting = recipe.get("t_d", 1), recipe.get("t_g", 1), recipe.get("setting", "")
    adversarial = setting in ("gdan", "gen_gan", "gen_dual")
    xs, ys = [], []
    for line in (run / METRICS_FILE).read_text().splitlines():
        record = json.loads(line)
        if record.get("phase") == "train" and key in record:
            xs.append(d_steps(record["phase_step"], t_d, t_g, adversarial))
            ys.append(record[key])
    if not xs:
        raise DataError(f"'{run / METRICS_FILE}' has no '{key}' of the training phase",
                        "pass the directory of a GDAN run with a generator setting")
    return xs, ys, setting


def d_loss(args: argparse.Namespace) -> dict:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 4))
    summary = {}
    for spec in args.run:
        label, _, path = spec.rpartition("=")
        xs, ys, setting = curve(Path(path), args.key)
        ax.plot(xs, ys, marker="o", markersize=3, label=f"{label or setting} ({setting})")
        summary[label or setting] = {"first": ys[0], "last": ys[-1], "points": len(xs), "d_steps": xs[-1]}
    ax.set_xlabel("D training steps")
    ax.set_ylabel(f"D loss on generated pairs ({args.key}, nats per span end)")
    ax.set_title(args.title)
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    with atomic_path(args.out) as tmp:
        fig.savefig(tmp, format="png", dpi=120)
    plt.close(fig)
    return {"out": str(args.out), "runs": summary}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    q = sub.add_parser("questions", help="Table 3.3 analogue: questions of two generators side by side (Markdown)")
    q.add_argument("--mle", required=True, help="checkpoint of G after MLE pretraining")
    q.add_argument("--rl", required=True, help="checkpoint of G after RL (its recipe gives the data and chunks)")
    q.add_argument("--out", required=True, help="Markdown file to write")
    q.add_argument("--source", choices=("unlabelled", "dev"), default="unlabelled")
    q.add_argument("--paragraphs", type=int, default=6, help="paragraphs to use (default 6)")
    q.add_argument("--skip", type=int, default=0, help="paragraphs to skip first (default 0)")
    q.add_argument("--per-paragraph", type=int, default=2, help="answer chunks per unlabelled paragraph (default 2)")
    q.add_argument("--beam", type=int, default=5)
    q.add_argument("--window", type=int, default=12, help="paragraph words shown on each side of the answer")
    q.add_argument("--seed", type=int, default=0, help="split seed of the runs and chunk draw (default 0)")
    q.set_defaults(fn=questions)
    d = sub.add_parser("d-loss", help="Fig. 3.8 analogue: D's loss on generated pairs over training (PNG)")
    d.add_argument("--run", action="append", required=True, help="LABEL=RUN_DIR of a GDAN run (repeatable)")
    d.add_argument("--out", required=True, help="PNG file to write")
    d.add_argument("--key", default="qa_gen", help="logged term to plot (default qa_gen: D on generated pairs)")
    d.add_argument("--title", default="D's loss on generated QA pairs (Fig. 3.8 analogue)")
    d.set_defaults(fn=d_loss)
    args = parser.parse_args(argv)
    try:
        print(json.dumps(args.fn(args)))
    except GenfeatError as e:
        sys.exit(f"error: {e}")


if __name__ == "__main__":
    main()
