import math

import pytest
import torch

from genfeat.eval.lm import evaluate_lm, score_lm, token_losses
from genfeat.models.transformer_xl import TransformerXLConfig, TransformerXLLMHeadModel

from _txl_fixtures import tiny


@pytest.fixture(scope="module")
def model():
    torch.manual_seed(0)
    cfg = TransformerXLConfig(n_token=40, d_model=16, n_head=2, d_head=8, d_inner=32, n_layer=2, mem_len=8,
                              dropout=0.0)
    return TransformerXLLMHeadModel(cfg)


@pytest.fixture(scope="module")
def tokens():
    return torch.randint(0, 40, (61,), generator=torch.Generator().manual_seed(1))


@torch.no_grad()
def full_context_nll(model, tokens):
    x = tokens[None, :-1]
    return -model.eval()(x, labels=tokens[None, 1:], mem_len=0).target_log_probs[0].double()


def test_segments_with_memory_equal_one_full_pass(model, tokens):
    # Memory longer than the data: every prediction sees all earlier tokens, as one long forward does.
    res = evaluate_lm(model, tokens, tgt_len=7, mem_len=64)
    ref = full_context_nll(model, tokens)
    assert res["tokens"] == len(tokens) - 1
    assert res["loss_sum"] == pytest.approx(float(ref.sum()), abs=1e-4)
    assert res["loss"] == pytest.approx(float(ref.mean()), abs=1e-6)
    assert res["ppl"] == pytest.approx(math.exp(res["loss"]), rel=1e-9)
    assert res["bpc"] == pytest.approx(res["loss"] / math.log(2), rel=1e-9)
    assert res["seconds"] >= 0


def test_ext_len_model_and_clamp_len_override(tokens):
    # a model trained with ext_len leaves its last positions out of the memory only where a stream
    # feeds them again; evaluation feeds nothing twice, so it must still see every earlier token
    model, ext = tiny(), tiny(ext_len=3)  # the same weights (far from uniform, so context matters)
    res = evaluate_lm(ext, tokens, tgt_len=7, mem_len=64)
    assert res["loss_sum"] == pytest.approx(float(full_context_nll(model, tokens).sum()), abs=1e-4)
    # clamp_len reaches the model: clamped distances as in one full clamped pass, and not unclamped
    clamped = evaluate_lm(model, tokens, tgt_len=7, mem_len=64, clamp_len=3)["loss_sum"]
    with torch.no_grad():
        ref = -model(tokens[None, :-1], labels=tokens[None, 1:], mem_len=0, clamp_len=3).target_log_probs.sum()
    assert clamped == pytest.approx(float(ref), abs=1e-4)
    assert abs(clamped - res["loss_sum"]) > 1.0


def test_no_memory_loses_context(model, tokens):
    with_mem = score_lm(model, tokens, tgt_len=6, mem_len=64)[0]
    without = score_lm(model, tokens, tgt_len=6, mem_len=0)[0]
    # The first segment is identical; later segments differ once earlier tokens are dropped.
    assert torch.allclose(with_mem[:6], without[:6], atol=1e-5)
    assert not torch.allclose(with_mem[6:], without[6:], atol=1e-3)


def test_streams_cover_every_token_after_the_first_of_each(model, tokens):
    res = evaluate_lm(model, tokens, tgt_len=5, mem_len=5, batch_size=3)
    assert res["tokens"] == 3 * (len(tokens) // 3 - 1)


def test_eval_restores_training_mode(model, tokens):
    model.train()
    evaluate_lm(model, tokens[:20], tgt_len=5, mem_len=5)
    assert model.training
    model.eval()


@pytest.mark.parametrize("c,seg", [(12, 4), (5, 8)])
def test_token_losses_context_window(model, tokens, c, seg):
    got = token_losses(model, tokens, c, seg_len=seg)
    tgt = min(seg, c)
    assert got.shape == (len(tokens) - 1,)
    for j in (0, 3, 17, 30, 59):
        # Input j sits in segment j // tgt; it sees its segment so far plus c - tgt memory positions.
        lo = max(0, (j // tgt) * tgt - (c - tgt))
        ref = full_context_nll(model, tokens[lo:j + 2])[-1]
        assert float(got[j]) == pytest.approx(float(ref), abs=1e-4)
    with pytest.raises(ValueError):
        token_losses(model, tokens, 0)


def test_a_checkpoint_without_its_vocabulary_is_refused_not_scored_with_one_rebuilt_from_the_text(tmp_path, capsys):
    """Without vocab.json, evaluate encoded the scored text with a vocabulary built from that text: 0% OOV and a
    perplexity of other ids than the model's. Every command that encodes text with a checkpoint refuses it."""
    from genfeat import cli
    from genfeat.data.vocab import SymbolVocab
    from genfeat.errors import CheckpointError
    from genfeat.hub import build_model, load_checkpoint, save_pretrained

    words = ["<unk>", "<eos>", *(f"w{i}" for i in range(95))]
    ckpt = tmp_path / "final"
    save_pretrained(tiny(0.0), ckpt, SymbolVocab(words, "word", unk="<unk>"))
    w2v = tmp_path / "w2v"
    save_pretrained(build_model("word2vec", {"vocab_size": 3, "dim": 2}), w2v, SymbolVocab(["a", "b", "c"], "word"))
    (ckpt / "vocab.json").unlink()
    (w2v / "vocab.json").unlink()
    text = tmp_path / "text.txt"
    text.write_text("w1 w2 w3 w4\n" * 20)
    assert load_checkpoint(ckpt)[1] is None         # a checkpoint without vocabulary still loads as a model
    with pytest.raises(CheckpointError, match="vocab.json"):
        load_checkpoint(ckpt, require_vocab=True)
    for argv in (["evaluate", "--checkpoint", str(ckpt), "--data", str(text), "--tgt-len", "4", "--mem-len", "4"],
                 ["generate", "--checkpoint", str(ckpt), "--length", "3"],
                 ["recl", "--model", f"a={ckpt}", "--data", str(text), "--contexts", "4", "8"],
                 ["neighbours", "--checkpoint", str(w2v), "--word", "a"]):
        code = cli.main(argv)
        out, err = capsys.readouterr()
        assert code == 2 and out == "" and len(err.strip().splitlines()) == 1, argv
        assert "no vocab.json" in err and "fix: copy the run's vocab.json next to the weights" in err, argv


def test_a_truncated_checkpoint_outside_training_is_called_damaged_not_to_be_deleted(tmp_path, capsys):
    from genfeat import cli
    from genfeat.data.vocab import SymbolVocab
    from genfeat.hub import save_pretrained

    ckpt = tmp_path / "final"
    save_pretrained(tiny(0.0), ckpt, SymbolVocab(["<unk>", "<eos>", *(f"w{i}" for i in range(95))], "word", unk="<unk>"))
    weights = ckpt / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:1000])
    text = tmp_path / "text.txt"
    text.write_text("w1 w2 w3 w4\n" * 20)
    for argv in (["evaluate", "--checkpoint", str(ckpt), "--data", str(text), "--tgt-len", "4", "--mem-len", "4"],
                 ["generate", "--checkpoint", str(ckpt), "--length", "3"]):
        code = cli.main(argv)
        _, err = capsys.readouterr()
        assert code == 2 and len(err.strip().splitlines()) == 1 and "corrupt or truncated" in err, argv
        fix = err.split("fix:", 1)[1]
        assert "damaged" in fix and "delete" not in fix and "--resume" not in fix, argv
