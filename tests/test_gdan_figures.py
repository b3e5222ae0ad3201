"""G from a GDAN run's checkpoint (genfeat.methods.question_gen.load_generator) and scripts/gdan_figures.py:
the Table 3.3 analogue's table and the Fig. 3.8 analogue's D-step axis and curves."""

import importlib.util
import json
from pathlib import Path

import pytest
import torch
from torch import nn

from genfeat.config import to_dict
from genfeat.data.gdan import SPECIALS, Paragraph, QAExample
from genfeat.data.question_gen import collate_qg
from genfeat.data.vocab import SymbolVocab
from genfeat.errors import CheckpointError
from genfeat.framework.checkpoint import save_checkpoint
from genfeat.hub import VOCAB_FILE
from genfeat.methods.question_gen import generated_examples, load_generator, new_generator
from genfeat.models.ga_reader import GAReader, GAReaderConfig
from genfeat.models.question_gen import QuestionGenConfig

ROOT = Path(__file__).resolve().parents[1]
spec = importlib.util.spec_from_file_location("gdan_figures", ROOT / "scripts" / "gdan_figures.py")
gdan_figures = importlib.util.module_from_spec(spec)
spec.loader.exec_module(gdan_figures)

WORDS = "what who is was the team won city river founded ? .".split()


def _vocab():
    return SymbolVocab(list(SPECIALS) + WORDS, "word", "<unk>", add_eos=False)


def _example(uid="x"):
    p = Paragraph.of(uid, "the team won the city river cup in 1848 .")
    return QAExample(uid, p, (), 1, 1, ("team",))


def _gdan_checkpoint(path, setting="gdan", t_d=1, t_g=1):
    """What methods.gdan writes to OUT/last: the (D, G) pair, config.json with the reader and recipe, vocab.json."""
    vocab = _vocab()
    torch.manual_seed(0)
    reader = GAReaderConfig(vocab_size=len(vocab), embed_dim=8, hidden=4, layers=2)
    generator = QuestionGenConfig(d_embed=8, d_hidden=12, d_answer=4, dropout=0.0)
    pair = nn.ModuleDict({"d": GAReader(reader), "g": new_generator(generator, vocab)})
    recipe = {"setting": setting, "generator": to_dict(generator), "t_d": t_d, "t_g": t_g, "max_question_words": 5}
    save_checkpoint(path, pair, None, {"architecture": "gdan", "reader": to_dict(reader), "recipe": recipe},
                    lambda d: vocab.save(Path(d) / VOCAB_FILE))
    return pair.g, vocab


def test_load_generator_takes_g_out_of_a_gdan_checkpoint(tmp_path):
    g, vocab = _gdan_checkpoint(tmp_path / "last")
    loaded, loaded_vocab = load_generator(tmp_path / "last")
    assert loaded_vocab.symbols == vocab.symbols and not loaded.training
    assert all(torch.equal(a, b) for a, b in zip(g.state_dict().values(), loaded.state_dict().values()))
    batch = collate_qg([_example()], vocab)
    assert torch.equal(g.eval().beam_search(*batch.model_inputs(), max_len=6, beam=2)[0],
                       loaded.beam_search(*batch.model_inputs(), max_len=6, beam=2)[0])


def test_load_generator_refuses_a_setting_without_g(tmp_path):
    _gdan_checkpoint(tmp_path / "last", setting="sl")
    with pytest.raises(CheckpointError, match="no question generator"):
        load_generator(tmp_path / "last")


def test_questions_table_pairs_both_generators_on_the_same_answers(tmp_path, monkeypatch):
    _gdan_checkpoint(tmp_path / "a")
    _gdan_checkpoint(tmp_path / "b")
    examples = [_example("x"), _example("y")]
    monkeypatch.setattr(gdan_figures, "pick_examples", lambda args, recipe: examples)
    out = tmp_path / "t.md"
    gdan_figures.main(["questions", "--mle", str(tmp_path / "a"), "--rl", str(tmp_path / "b"), "--out", str(out),
                       "--beam", "2", "--window", "2"])
    lines = out.read_text().splitlines()
    assert lines[0] == "| # | paragraph (answer in bold) | answer | G after MLE | G after RL |" and len(lines) == 4
    g, vocab = load_generator(tmp_path / "a")
    question = " ".join(generated_examples(g, examples[:1], vocab, "beam", 6, 2)[0][0].question) or "(empty)"
    cells = [c.strip() for c in lines[2].split(" | ")]
    assert cells[1] == "the **team** won the …" and cells[2] == "team" and cells[3] == cells[4].rstrip(" |") == question


def test_d_steps_count_only_the_d_steps_of_each_round():
    # T_D = 2, T_G = 1: phase steps D D G D D G ...
    assert [gdan_figures.d_steps(s, 2, 1, True) for s in range(1, 8)] == [1, 2, 2, 3, 4, 4, 5]
    assert gdan_figures.d_steps(7, 2, 1, False) == 7


def test_curve_reads_the_generated_term_of_the_training_phase(tmp_path):
    _gdan_checkpoint(tmp_path / "run" / "last", t_d=1, t_g=1)
    records = [{"step": 2, "phase": "g_mle", "phase_step": 2, "qg_mle": 5.0},
               {"step": 4, "phase": "train", "phase_step": 4, "qa": 3.0, "qa_gen": 2.5},
               {"step": 8, "phase": "train", "phase_step": 8, "qa": 2.0, "qa_gen": 1.5},
               {"step": 8, "phase": "train", "event": "eval", "dev_f1": 0.1}]
    (tmp_path / "run" / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    assert gdan_figures.curve(tmp_path / "run", "qa_gen") == ([2, 4], [2.5, 1.5], "gdan")
    out = tmp_path / "f.png"
    gdan_figures.main(["d-loss", "--run", f"RL={tmp_path / 'run'}", "--out", str(out)])
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    with pytest.raises(SystemExit, match="no 'qg_reinforce'"):
        gdan_figures.main(["d-loss", "--run", f"RL={tmp_path / 'run'}", "--out", str(out), "--key", "qg_reinforce"])
