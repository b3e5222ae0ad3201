import pytest
import torch

from genfeat import generation
from genfeat.generation import generate, sample_top_k
from genfeat.models.transformer_xl import TransformerXLConfig, TransformerXLLMHeadModel


def model(mem_len=64, **kw):
    torch.manual_seed(0)
    m = TransformerXLLMHeadModel(TransformerXLConfig(n_token=50, cutoffs=[10], d_model=32, n_head=2, d_head=16,
                                                     d_inner=64, n_layer=2, mem_len=mem_len, dropout=0.0, **kw))
    with torch.no_grad():
        for p in m.parameters():
            p.add_(0.3 * torch.randn_like(p))
    return m.eval()


@pytest.mark.parametrize("kw", [{}, {"ext_len": 2}])
def test_top1_equals_greedy_decoding_with_full_recomputation(kw):
    # a model trained with ext_len still keeps every fed token in memory while generating
    m = model(**kw)
    context = torch.tensor([3, 7, 1, 4])
    sampled = generate(m, context, 12, top_k=1)
    seq = context.clone()
    with torch.no_grad():
        for _ in range(12):
            lp = m(seq[None], return_log_probs=True).log_probs[0, -1]
            seq = torch.cat([seq, lp.argmax()[None]])
    assert sampled.tolist() == seq[4:].tolist()


def test_samples_stay_in_top_k_and_are_reproducible():
    m = model()
    context = torch.tensor([[5, 2], [9, 9]])
    a = generate(m, context, 6, top_k=3, generator=torch.Generator().manual_seed(0))
    b = generate(m, context, 6, top_k=3, generator=torch.Generator().manual_seed(0))
    assert torch.equal(a, b) and a.shape == (2, 6)
    seq = context
    with torch.no_grad():
        for step in range(6):
            lp = m(seq, return_log_probs=True).log_probs[:, -1]
            top = lp.topk(3, dim=-1).indices
            assert all(a[i, step] in top[i] for i in range(2))
            seq = torch.cat([seq, a[:, step:step + 1]], 1)


@pytest.mark.parametrize("kw", [{}, {"attn_type": "shaw"}, {"attn_type": "absolute_sinusoid"},
                                {"attn_type": "absolute_learned"}, {"attn_type": "absolute_learned", "max_klen": 4},
                                {"same_length": True}, {"pre_lnorm": True}])
@pytest.mark.parametrize("mem_len", [64, 4])
def test_prompts_of_different_lengths_generate_in_one_left_padded_batch_as_each_alone(kw, mem_len, monkeypatch):
    # Every step's next-token distribution of each row equals its prompt's alone (greedy tokens of random
    # models repeat one id, so the distributions are compared). mem_len 4 is shorter than the prompts: the
    # memory drops padding and prompt tokens as it slides.
    m = model(mem_len=mem_len, **kw)
    seen = []

    def recording(logits, top_k, temperature, generator):
        seen.append(logits.clone())
        return sample_top_k(logits, top_k, temperature, generator)

    monkeypatch.setattr(generation, "sample_top_k", recording)
    g = torch.Generator().manual_seed(3)
    prompts = [torch.randint(0, 50, (t,), generator=g) for t in (7, 2, 5, 1)]
    alone = []
    for p in prompts:
        seen.clear()
        alone.append((generate(m, p, 12, top_k=1), torch.cat(seen)))               # [12], [12, V]
    width = max(len(p) for p in prompts)
    context = torch.full((4, width), 9)                                    # the pad id is never read
    mask = torch.zeros(4, width, dtype=torch.long)
    for i, p in enumerate(prompts):
        context[i, width - len(p):], mask[i, width - len(p):] = p, 1
    seen.clear()
    batch = generate(m, context, 12, top_k=1, attention_mask=mask)
    steps = torch.stack(seen, 1)                                           # [4, 12, V]
    assert batch.shape == (4, 12)
    for i, (tokens, log_probs) in enumerate(alone):
        assert torch.equal(batch[i], tokens)
        torch.testing.assert_close(steps[i], log_probs, rtol=1e-5, atol=1e-5)
    # without the mask the padding is read as tokens: other distributions (the check can fail)
    seen.clear()
    generate(m, context, 12, top_k=1)
    assert (torch.stack(seen, 1)[1] - alone[1][1]).abs().max() > 1e-2


def test_left_padding_is_checked():
    m, context = model(), torch.tensor([[1, 2, 3], [4, 5, 6]])
    mask = torch.tensor([[0, 1, 1], [1, 1, 1]])
    for bad in (mask.flip(1), torch.tensor([[0, 0, 0], [1, 1, 1]]), mask[:, 1:], 2 * mask):
        with pytest.raises(ValueError, match="attention_mask"):
            generate(m, context, 2, attention_mask=bad)
    with pytest.raises(ValueError, match="padded on the left"):
        generate(m, context, 2, attention_mask=mask.flip(1))
    assert generate(m, context[0], 3, top_k=1, attention_mask=torch.tensor([0, 1, 1])).tolist() == \
        generate(m, context[0, 1:], 3, top_k=1).tolist()
    with pytest.raises(ValueError, match=r"key_padding has shape \(2, 2\), expected \[b, m \+ t\] = \[2, 3\]"):
        m(context, key_padding=torch.zeros(2, 2, dtype=torch.bool))


def test_bad_arguments():
    with pytest.raises(ValueError):
        generate(model(), torch.tensor([], dtype=torch.long), 3)
    with pytest.raises(ValueError):
        generate(model(), torch.tensor([1]), 3, top_k=0)
    with pytest.raises(ValueError, match="a length of 0 or more new tokens, got -3"):
        generate(model(), torch.tensor([1]), -3)


def chi_square_p(counts: torch.Tensor, probs: torch.Tensor) -> float:
    """p-value of Pearson's chi-square test of ``counts`` against ``probs`` (cells expecting < 5 pooled)."""
    n = counts.sum()
    expected = probs.double() * n
    big = expected >= 5
    obs = torch.cat([counts[big].double(), counts[~big].double().sum()[None]])
    exp = torch.cat([expected[big], expected[~big].sum()[None]])
    keep = exp > 0
    stat = ((obs - exp) ** 2 / exp)[keep].sum()
    df = int(keep.sum()) - 1
    return float(torch.special.gammaincc(torch.tensor(df / 2, dtype=torch.double), stat / 2))


@pytest.mark.parametrize("temperature, top_k", [(1.0, 50), (2.0, 50), (0.5, 5)])
def test_temperature_reshapes_the_sampling_distribution(temperature, top_k):
    # 20,000 one-token continuations of the same context, against softmax(log p / T) over the top k
    m = model()
    context = torch.tensor([3, 7, 1, 4])
    with torch.no_grad():
        lp = m(context[None], return_log_probs=True).log_probs[0, -1]
    n = 20000
    samples = generate(m, context.expand(n, 4), 1, top_k=top_k, temperature=temperature,
                       generator=torch.Generator().manual_seed(0))
    counts = torch.bincount(samples.flatten(), minlength=50)

    def target(t):
        keep = lp >= lp.topk(top_k).values[-1]
        return torch.softmax((lp / t).masked_fill(~keep, float("-inf")), -1)

    assert chi_square_p(counts, target(temperature)) > 1e-3
    # the test tells temperatures apart: the untempered (or tempered twice) distribution is rejected
    wrong = 1.0 if temperature != 1.0 else 2.0
    assert chi_square_p(counts, target(wrong)) < 1e-6
    assert not counts[~(target(temperature) > 0)].any(), "only the top k are ever drawn"


def test_low_temperature_is_greedy_and_high_temperature_is_uniform():
    m = model()
    context = torch.tensor([3, 7, 1, 4])
    with torch.no_grad():
        lp = m(context[None], return_log_probs=True).log_probs[0, -1]
    n = 5000
    cold = generate(m, context.expand(n, 4), 1, top_k=50, temperature=1e-4, generator=torch.Generator().manual_seed(0))
    assert (cold == lp.argmax()).all()
    hot = generate(m, context.expand(n, 4), 1, top_k=50, temperature=1e4, generator=torch.Generator().manual_seed(0))
    counts = torch.bincount(hot.flatten(), minlength=50)
    assert chi_square_p(counts, torch.full((50,), 1 / 50)) > 1e-3
    assert chi_square_p(counts, torch.softmax(lp, -1)) < 1e-6
    with pytest.raises(ValueError):
        generate(m, context, 3, temperature=0.0)
    # a temperature so small that log p / T overflows fp32 is still greedy (no inf - inf, no NaN)
    for t in (1e-40, 1e-46):   # the second is 0 in fp32: the largest logit's gap 0 / 0
        frozen = generate(m, context.expand(3, 4), 1, top_k=50, temperature=t, generator=torch.Generator().manual_seed(0))
        assert (frozen == lp.argmax()).all()


def test_cli_samples_gpt_with_its_cache_and_transformer_xl_with_memory(tmp_path, capsys):
    """``genfeat generate`` serves both causal LMs through one path; other models and a GPT's limits are one line."""
    import json

    from genfeat import cli
    from genfeat.data.tokenizers import TokenizerConfig, train_tokenizer
    from genfeat.data.vocab import SymbolVocab
    from genfeat.hub import load_checkpoint, save_pretrained
    from genfeat.models.bert import BertConfig, BertForMaskedLM
    from genfeat.models.gpt import GPTConfig, GPTLMHeadModel

    def run(*argv):
        code = cli.main(["generate", *argv])
        out, err = capsys.readouterr()
        return code, (json.loads(out.splitlines()[-1]) if code == 0 else err)

    corpus = tmp_path / "corpus.txt"
    corpus.write_text("the model learns features from text and the classifier reads them\n" * 20
                      + "margins widen while the learner samples new words\n" * 20)
    bpe = train_tokenizer(TokenizerConfig("bpe", 80), corpus, tmp_path / "tok")
    torch.manual_seed(0)
    gpt = GPTLMHeadModel(GPTConfig(n_token=len(bpe), d_model=16, n_layer=2, n_head=2, d_inner=32, max_position=24))
    with torch.no_grad():                              # a peaked, context-dependent distribution
        for p in gpt.parameters():
            p.add_(0.3 * torch.randn_like(p))
    save_pretrained(gpt.eval(), tmp_path / "gpt", bpe)
    prompt = "the model learns"
    ids = bpe.encode(prompt)
    code, out = run("--checkpoint", str(tmp_path / "gpt"), "--prompt", prompt, "--length", "8", "--top-k", "1",
                    "--json")
    assert code == 0 and out["tokens"] == 8
    assert out["text"] == bpe.decode(gpt.generate(torch.tensor(ids), 8, top_k=1, use_cache=False).tolist())
    code, out = run("--checkpoint", str(tmp_path / "gpt"), "--prompt", prompt, "--seed", "3", "--json")
    assert code == 0 and out["tokens"] == 24 - len(ids), "by default a GPT samples the positions the prompt leaves"
    for argv, needle in [(["--length", "30"], f"pass --length {24 - len(ids)} or less"),
                         (["--mem-len", "4"], "fix: drop --mem-len")]:
        code, err = run("--checkpoint", str(tmp_path / "gpt"), "--prompt", prompt, *argv)
        assert code == 2 and len(err.strip().splitlines()) == 1 and needle in err, err
    # `evaluate --data` scores Transformer-XL LMs: a GPT is told so, not asked for --mem-len it could not use
    assert cli.main(["evaluate", "--checkpoint", str(tmp_path / "gpt"), "--data", str(corpus), "--tgt-len", "8"]) == 2
    assert "holds a gpt model, not transformer_xl" in capsys.readouterr().err
    # a Transformer-XL checkpoint takes the same path, with its memory
    words = SymbolVocab(["<eos>"] + [f"w{i}" for i in range(49)], "word")
    txl = model(mem_len=8)
    save_pretrained(txl, tmp_path / "txl", words)
    code, out = run("--checkpoint", str(tmp_path / "txl"), "--prompt", "w3 w7 w1", "--length", "6", "--top-k", "1",
                    "--json")
    assert code == 0 and out["text"] == words.decode(generate(txl, torch.tensor(words.encode("w3 w7 w1")), 6,
                                                              top_k=1).tolist())
    # no prompt: the sample starts after a new line (the word vocabulary's <eos>), not from an arbitrary id 0
    code, out = run("--checkpoint", str(tmp_path / "txl"), "--length", "6", "--top-k", "1", "--json")
    assert code == 0 and out["text"] == words.decode(generate(txl, torch.tensor([words.lookup("<eos>")]), 6,
                                                              top_k=1).tolist())
    chars = SymbolVocab([chr(97 + i) for i in range(26)], "char")   # letters alone: no newline to start after
    save_pretrained(TransformerXLLMHeadModel(TransformerXLConfig(n_token=26, d_model=16, n_head=2, d_head=8, d_inner=32,
                                                                 n_layer=1, mem_len=4)), tmp_path / "chars", chars)
    cli.main(["generate", "--checkpoint", str(tmp_path / "chars"), "--length", "3", "--top-k", "1", "--json"])
    out, err = capsys.readouterr()
    assert "no token for a new line: the sample starts from id 0 ('a')" in err, err
    assert json.loads(out.splitlines()[-1])["text"] == chars.decode(
        generate(load_checkpoint(tmp_path / "chars")[0], torch.tensor([0]), 3, top_k=1).tolist())
    save_pretrained(BertForMaskedLM(BertConfig(n_token=50, d_model=16, n_layer=1, n_head=2, d_inner=32)),
                    tmp_path / "bert", words)
    code, err = run("--checkpoint", str(tmp_path / "bert"))
    assert code == 2 and len(err.strip().splitlines()) == 1
    assert "holds a bert model, not transformer_xl or gpt. fix: pass a transformer_xl or gpt checkpoint" in err


def test_a_learned_position_model_reads_a_long_prompt_as_segments_with_memory(monkeypatch):
    """attn_type absolute_learned has max_klen positions: a longer prompt is fed max_klen tokens at a time, cut from
    the right (a left-padded batch then cuts every row as its prompt alone), the earlier segments as memory; every
    step's distribution equals that reading. (max_klen 4 in the left-padded test above: a batch wider than it.)"""
    m = model(mem_len=64, attn_type="absolute_learned", max_klen=8)
    seen = []
    monkeypatch.setattr(generation, "sample_top_k",
                        lambda logits, *a: (seen.append(logits.clone()), sample_top_k(logits, *a))[1])
    prompt = torch.randint(0, 50, (20,), generator=torch.Generator().manual_seed(1))
    out = generate(m, prompt, 4, top_k=1)
    with torch.no_grad():
        mems, expected = None, []
        for start, end in ((0, 3), (3, 11), (11, 19)):            # 19 = all but the last prompt token
            mems = m(prompt[None, start:end], mems=mems, mem_len=64, ext_len=0).mems
        token = prompt[None, -1:]
        for _ in range(4):
            step = m(token, mems=mems, mem_len=64, ext_len=0, return_log_probs=True)
            mems, lp = step.mems, step.log_probs[:, -1]
            expected.append(lp)
            token = lp.argmax(-1, keepdim=True)
    torch.testing.assert_close(torch.cat(seen), torch.cat(expected), rtol=1e-5, atol=1e-5)
    assert out.tolist() == [int(e.argmax()) for e in expected]
