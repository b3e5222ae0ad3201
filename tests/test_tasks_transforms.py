"""GPT-1's task-aware input transformations (genfeat.tasks.transforms) for BERT, XLNet and GPT:
layouts checked against the Hugging Face tokenizers' own pair templates, both orders for
similarity, one sequence per answer, longest-first truncation, span windows with a document stride
whose answer positions map back to the answer text, and padding in collate."""

import json
import os
from pathlib import Path

import pytest
import torch

from genfeat.data.tokenizers import TokenizerConfig, special_ids, train_tokenizer
from genfeat.data.vocab import BPEVocab
from genfeat.errors import ConfigError, DataError
from genfeat.tasks import Example
from genfeat.tasks.transforms import (BertFormat, GPTFormat, TaskEncoder, best_span, best_spans, char_to_token_span,
                                      end_band,
                                      collate, input_format, token_span_text, tokenize_with_offsets)

SQUAD = Path(os.environ.get("GENFEAT_DATA", "../shared/data")).resolve() / "squad" / "dev-v1.1.json"
TEXT = ["The quick brown fox jumps over the lazy dog near the river bank.",
        "A man with a hard hat is dancing while the crowd watches in silence.",
        "Officials said the company would report its earnings on Tuesday morning.",
        "Birds sing in the trees; cats sleep on warm windowsills all afternoon."] * 20


@pytest.fixture(scope="module")
def toks(tmp_path_factory):
    """A WordPiece and a sentencepiece tokenizer trained on SQuAD contexts (or TEXT without the data)."""
    root = tmp_path_factory.mktemp("tok")
    lines = TEXT
    if SQUAD.is_file():
        data = json.loads(SQUAD.read_text())["data"]
        lines = [p["context"] for a in data[:3] for p in a["paragraphs"]] + TEXT
    (root / "corpus.txt").write_text("\n".join(lines))
    wp = train_tokenizer(TokenizerConfig("wordpiece", 400), root / "corpus.txt", root / "wp")
    sp = train_tokenizer(TokenizerConfig("sentencepiece", 300), root / "corpus.txt", root / "sp")
    return {"wp": wp, "sp": sp, "wp_dir": root / "wp", "sp_dir": root / "sp"}


@pytest.mark.hf_interop
def test_bert_pair_is_hugging_face_bert_template(toks):
    from transformers import BertTokenizerFast

    hf = BertTokenizerFast.from_pretrained(str(toks["wp_dir"]))
    enc = TaskEncoder(input_format("bert", toks["wp"]), toks["wp"], 128)
    a, b = TEXT[0], TEXT[1]
    (packed,) = enc.encode(Example("x", (a, b), 1), "pair")[0].sequences
    ref = hf(a, b)
    assert packed.ids == ref["input_ids"] and packed.types == ref["token_type_ids"]
    assert packed.summary == 0 and packed.ids[0] == special_ids(toks["wp"])["cls"]
    (single,) = enc.encode(Example("x", (a,), 0), "single")[0].sequences
    assert single.ids == hf(a)["input_ids"]


@pytest.mark.hf_interop
def test_xlnet_pair_is_hugging_face_xlnet_template(toks):
    from transformers import XLNetTokenizer

    hf = XLNetTokenizer.from_pretrained(str(toks["sp_dir"]))  # transformers 5 takes no spiece.model path
    fmt = input_format("xlnet", toks["sp"])
    enc = TaskEncoder(fmt, toks["sp"], 128)
    a, b = TEXT[0], TEXT[2]
    (packed,) = enc.encode(Example("x", (a, b), 1), "pair")[0].sequences
    ref = hf(a, b, return_token_type_ids=True)  # transformers 5's XLNetTokenizer returns them only when asked
    assert packed.ids == ref["input_ids"] and packed.types == ref["token_type_ids"]  # A <sep> B <sep> <cls>
    assert packed.summary == len(packed.ids) - 1 and packed.ids[-1] == special_ids(toks["sp"])["cls"]


def test_gpt_start_delimiter_extract():
    fmt = GPTFormat(100, 101, 102)
    p = fmt.pack([[5, 6], [7]])
    assert p.ids == [100, 5, 6, 101, 7, 102] and p.types is None and p.summary == 5 and p.starts == (1, 4)
    assert fmt.pack([[5]]).ids == [100, 5, 102] and fmt.n_special(2) == 3
    with pytest.raises(ConfigError, match="3 new token ids"):
        input_format("gpt", None, [1, 2])


def test_similarity_both_orders_and_multiple_choice_per_answer(toks):
    vocab = toks["wp"]
    enc = TaskEncoder(BertFormat(cls_id=2, sep_id=3), vocab, 64)
    (sim,) = enc.encode(Example("s", ("a cat", "the dog"), 1.5), "similarity")
    ab, ba = sim.sequences
    ca, cb = vocab.encode("a cat"), vocab.encode("the dog")
    assert ab.ids == [2, *ca, 3, *cb, 3] and ba.ids == [2, *cb, 3, *ca, 3] and sim.label == 1.5
    (mc,) = enc.encode(Example("m", ("the fox ran", "Who _ away?"), 1, ("a cat", "the dog", "birds")),
                       "multiple_choice")
    assert len(mc.sequences) == 3 and mc.label == 1
    ctx = vocab.encode("the fox ran")
    assert mc.sequences[1].ids == [2, *ctx, 3, *vocab.encode("Who the dog away?"), 3]  # the cloze blank is filled
    (mc2,) = enc.encode(Example("m", ("the fox ran", "Who ran?"), 0, ("a cat", "birds")), "multiple_choice")
    assert mc2.sequences[0].ids == [2, *ctx, 3, *vocab.encode("Who ran? a cat"), 3]
    gpt = TaskEncoder(GPTFormat(500, 501, 502), vocab, 64)     # GPT-1 Fig. 1: [z; q; $; a_k]
    (g,) = gpt.encode(Example("m", ("the fox ran", "Who ran?"), 0, ("a cat", "birds")), "multiple_choice")
    assert g.sequences[1].ids == [500, *vocab.encode("the fox ran Who ran?"), 501, *vocab.encode("birds"), 502]


def test_longest_segment_is_cut_first(toks):
    vocab = toks["wp"]
    enc = TaskEncoder(BertFormat(cls_id=2, sep_id=3), vocab, 16)
    long, short = " ".join(TEXT[:3]), "a dog"
    (e,) = enc.encode(Example("t", (long, short), 0), "pair")
    p = e.sequences[0]
    assert e.truncated and len(p.ids) == 16
    assert p.ids[p.starts[1]:-1] == vocab.encode(short)           # the short segment is whole
    assert p.ids[1:p.starts[1] - 1] == vocab.encode(long)[:16 - 3 - len(vocab.encode(short))]
    (f,) = enc.encode(Example("t", ("a dog", "a cat"), 0), "pair")
    assert not f.truncated


def test_collate_pads_on_the_formats_side(toks):
    vocab = toks["sp"]
    fmt = input_format("xlnet", vocab)
    enc = TaskEncoder(fmt, vocab, 64)
    items = enc.encode_all([Example("a", (TEXT[0], TEXT[1]), 0), Example("b", ("a dog", "a cat"), 1)], "pair")
    batch = collate(items, fmt)
    b, k, t = batch["input_ids"].shape
    assert (b, k) == (2, 1) and t == len(items[0].sequences[0].ids)
    n = len(items[1].sequences[0].ids)
    assert batch["attention_mask"][1, 0].tolist() == [0] * (t - n) + [1] * n  # left padding
    assert batch["summary_index"].tolist() == [[t - 1], [t - 1]]
    assert (batch["input_ids"].gather(2, batch["summary_index"][..., None]) == fmt.cls_id).all()
    assert batch["token_type_ids"][1, 0, :t - n].eq(4).all() and batch["labels"].tolist() == [0, 1]
    bert = BertFormat(cls_id=2, sep_id=3)
    right = collate(TaskEncoder(bert, vocab, 64).encode_all([Example("a", (TEXT[0],), 0), Example("b", ("dog",), 1)],
                                                            "single"), bert)
    assert right["attention_mask"][1, 0, 0] == 1 and right["attention_mask"][1, 0, -1] == 0
    assert right["summary_index"].tolist() == [[0], [0]]
    gpt = GPTFormat(300, 301, 302)
    g = collate(TaskEncoder(gpt, vocab, 64).encode_all([Example("s", ("a", "b"), 0.5)], "similarity"), gpt)
    assert "token_type_ids" not in g and g["input_ids"].shape[:2] == (1, 2) and g["labels"].dtype == torch.float
    with pytest.raises(DataError, match=r"mixes examples of \[2, 3\] sequences"):
        mc = TaskEncoder(bert, vocab, 64)
        collate([*mc.encode(Example("a", ("x", "q"), 0, ("a", "b")), "multiple_choice"),
                 *mc.encode(Example("b", ("x", "q"), 0, ("a", "b", "c")), "multiple_choice")], bert)


def _squad_examples(n):
    data = json.loads(SQUAD.read_text())["data"]
    out = []
    for a in data[:3]:
        for p in a["paragraphs"]:
            for qa in p["qas"]:
                answers = tuple((x["text"], x["answer_start"]) for x in qa["answers"])
                out.append(Example(qa["id"], (qa["question"], p["context"]), answers=answers))
    return out[:n]


@pytest.mark.skipif(not SQUAD.is_file(), reason="needs GENFEAT_DATA with squad/dev-v1.1.json")
@pytest.mark.parametrize("backbone", ["bert", "xlnet"])
def test_span_windows_map_answers_to_tokens_and_back(toks, backbone):
    vocab = toks["wp" if backbone == "bert" else "sp"]
    fmt = input_format(backbone, vocab)
    enc = TaskEncoder(fmt, vocab, max_len=64, doc_stride=24, max_query_len=16)
    examples = _squad_examples(300)
    exact = answered = 0
    for i, ex in enumerate(examples):
        question, context = ex.texts
        windows = enc.span(ex, i)
        ids, offsets = tokenize_with_offsets(vocab, context)
        budget = 64 - 3 - min(len(vocab.encode(question)), 16)
        assert (len(windows) > 1) == (len(ids) > budget)
        # each window holds a contiguous run of the context's tokens, the runs start doc_stride apart
        # and cover the context; every token is 'max context' in exactly one window
        # (offsets are not unique: sentencepiece's NFKC turns '½' into three pieces of one character)
        best = [0] * len(ids)
        starts = list(range(0, 24 * len(windows), 24))
        for first, w in zip(starts, windows):
            assert len(w.sequences[0].ids) <= 64
            pos = [p for p, o in enumerate(w.offsets) if o is not None]
            assert len(pos) == min(budget, len(ids) - first)
            assert [w.sequences[0].ids[p] for p in pos] == ids[first:first + len(pos)]
            assert [w.offsets[p] for p in pos] == offsets[first:first + len(pos)]
            for j, p in enumerate(pos):
                best[first + j] += w.max_context[p]
        assert first + len(pos) == len(ids) and best == [1] * len(ids)
        text, start = ex.answers[0]
        s, e = char_to_token_span(offsets, start, start + len(text))
        holding = [w for w in windows if w.start != w.sequences[0].summary]
        # windows of `budget` tokens starting 24 apart hold every run of budget - 23 tokens whole
        assert bool(holding) == any(f <= s and e < f + budget for f in starts)
        assert holding or e - s + 1 > budget - 23
        for w in windows:
            if w in holding:
                got = token_span_text(context, w, w.start, w.end)
                assert text.strip() in got  # the tokens cover the answer; whole tokens may add a little
                exact += got == text
                answered += 1
                assert w.sequences[0].ids[w.start] == ids[s] and w.sequences[0].ids[w.end] == ids[e]
            else:
                assert w.start == w.end == w.sequences[0].summary
        batch = collate(windows, fmt)  # positions survive the padding (left for XLNet)
        for j, w in enumerate(windows):
            row = batch["input_ids"][j, 0]
            assert row[batch["start_positions"][j]] == w.sequences[0].ids[w.start]
            assert batch["context_mask"][j].sum() == sum(o is not None for o in w.offsets)
    print(f"{backbone}: {exact} of {answered} answer windows give the answer text exactly")
    assert exact >= 0.98 * answered, (exact, answered)  # 468/468 (WordPiece) and 470/470 (sentencepiece) here


def test_offsets_of_both_tokenizers_point_at_the_text(toks):
    text = "Café  owners said: the fox's den (near 1,066 trees)."
    for vocab in (toks["wp"], toks["sp"]):
        ids, offsets = tokenize_with_offsets(vocab, text)
        assert len(ids) == len(offsets) and all(0 <= s <= e <= len(text) for s, e in offsets)
        assert [s for s, e in offsets] == sorted(s for s, e in offsets)
        s, e = char_to_token_span(offsets, text.index("fox"), text.index("fox") + 3)
        assert "fox" in text[offsets[s][0]:offsets[e][1]]
    with pytest.raises(DataError, match="no token covers characters"):
        char_to_token_span(tokenize_with_offsets(toks["wp"], "a  b")[1], 1, 2)


def test_bad_encoder_settings(toks):
    with pytest.raises(ConfigError, match="max_len 4 leaves no room"):
        TaskEncoder(BertFormat(cls_id=2, sep_id=3), toks["wp"], 4)
    with pytest.raises(ConfigError, match="leaves no room for the context"):
        TaskEncoder(BertFormat(cls_id=2, sep_id=3), toks["wp"], 12, max_query_len=64).span(
            Example("q", (" ".join(TEXT), "a b"), answers=(("a", 0),)))
    with pytest.raises(ConfigError, match="the tokenizer has no cls, sep, pad token"):
        input_format("bert", BPEVocab.train(TEXT, 300))  # byte-level BPE: no [CLS], [SEP], [PAD]
    with pytest.raises(ConfigError, match="has no input format"):
        input_format("lstm", toks["wp"])


@pytest.mark.parametrize("backbone", ["bert", "xlnet", "gpt"])
def test_padding_leaves_the_summary_state_unchanged(toks, backbone):
    """Each backbone run on a padded batch gives every sequence the summary-token state it has
    alone (left padding for XLNet, whose <cls> is last; right padding for BERT and GPT)."""
    from genfeat.models.bert import BertConfig, BertModel
    from genfeat.models.gpt import GPTConfig, GPTLMHeadModel
    from genfeat.models.xlnet import XLNetConfig, XLNetLMHeadModel

    torch.manual_seed(0)
    vocab = toks["wp" if backbone == "bert" else "sp"]
    if backbone == "bert":
        model = BertModel(BertConfig(n_token=len(vocab), d_model=16, n_layer=2, n_head=2, d_inner=32, max_position=64))
        fmt = input_format("bert", vocab)
        run = lambda b: model(b["input_ids"], b["token_type_ids"], b["attention_mask"])  # noqa: E731
    elif backbone == "xlnet":
        model = XLNetLMHeadModel(XLNetConfig(n_token=len(vocab), d_model=16, n_layer=2, n_head=2, d_head=8,
                                             d_inner=32))
        fmt = input_format("xlnet", vocab)
        run = lambda b: model(b["input_ids"], token_type_ids=b["token_type_ids"],  # noqa: E731
                              attention_mask=b["attention_mask"]).hidden
    else:
        model = GPTLMHeadModel(GPTConfig(n_token=len(vocab), d_model=16, n_layer=2, n_head=2, d_inner=32,
                                         max_position=64))
        fmt = input_format("gpt", vocab, model.add_special_tokens(3))
        run = lambda b: model(b["input_ids"], attention_mask=b["attention_mask"]).hidden  # noqa: E731
    model.eval()
    enc = TaskEncoder(fmt, vocab, 48)
    examples = [Example("a", (TEXT[0], TEXT[1]), 0), Example("b", ("a dog", "a cat"), 1),
                Example("c", (TEXT[2], "birds"), 1)]

    def summaries(items):
        batch = collate(items, fmt)
        flat = {k: v.flatten(0, 1) for k, v in batch.items() if v.dim() == 3}
        h = run(flat)                                               # [b * k, t, d]
        return h[torch.arange(h.shape[0]), batch["summary_index"].flatten()]

    items = enc.encode_all(examples, "similarity")
    with torch.no_grad():
        together = summaries(items)
        alone = torch.cat([summaries([item]) for item in items])
    assert together.shape == (6, 16)
    torch.testing.assert_close(together, alone, atol=1e-5, rtol=1e-5)


def brute_force_span(start: list[float], end: list[float], max_len: int, allowed=lambda s, e: True):
    """The first (s, e) in (s, e) order with the largest finite start[s] + end[e], s <= e < s + max_len and
    ``allowed(s, e)``, by trying every pair; None when there is none."""
    best, arg = float("-inf"), None
    for s in range(len(start)):
        for e in range(s, min(s + max_len, len(end))):
            if allowed(s, e) and start[s] + end[e] > best:
                best, arg = start[s] + end[e], (s, e)
    return arg


def test_best_spans_respects_order_and_length():
    start = torch.tensor([[0.0, 5.0, 0.0, 0.0], [0.0, 0.0, 0.0, 9.0]])
    end = torch.tensor([[4.0, 0.0, 0.0, 1.0], [8.0, 0.0, 1.0, 0.0]])
    s, e = best_spans(start, end, max_answer_len=4)
    # row 0: end 0 precedes start 1, so (1, 3); row 1: (3, 3) scores 9, (0, 0) only 8
    assert s.tolist() == [1, 3] and e.tolist() == [3, 3]
    s, e = best_spans(start, end, max_answer_len=2)
    assert (s.tolist(), e.tolist()) == ([1, 3], [1, 3]), "spans longer than max_answer_len are excluded"
    with pytest.raises(ValueError, match="max_answer_len"):
        best_spans(start, end, 0)


def test_best_spans_equal_the_brute_force_search_with_ties_and_length_limits():
    g = torch.Generator().manual_seed(0)
    ties = 0
    for _ in range(20):
        # small integers make ties common; -inf marks positions that may not start or end a span
        start = torch.randint(-3, 4, (6, 13), generator=g).float()
        end = torch.randint(-3, 4, (6, 13), generator=g).float()
        start[torch.rand(6, 13, generator=g) < 0.2] = float("-inf")
        end[torch.rand(6, 13, generator=g) < 0.2] = float("-inf")
        start[2, 9:] = end[2, 9:] = float("-inf")                 # a padded row
        end[4] = float("-inf")                                     # a row without any span
        for max_len in (1, 2, 5, 13, 40):
            s, e = best_spans(start, end, max_len)
            for row in range(6):
                want = brute_force_span(start[row].tolist(), end[row].tolist(), max_len) or (0, 0)
                assert (s[row].item(), e[row].item()) == want, (row, max_len)
                sums = start[row, :, None] + end[row, None, :]
                band = torch.ones(13, 13).triu().tril(max_len - 1).bool()
                ties += int((sums[band] == sums[band].max()).sum() > 1 and sums[band].max() > float("-inf"))
    assert ties > 50, "the random scores must really tie"


def test_best_spans_of_end_scores_given_the_start_equal_the_brute_force_search():
    """End scores that depend on the start (a start-conditioned head), as end_band passes them: the best
    start[s] + end[s, e] over s <= e < s + max_len, -inf where s may not start or e may not end."""
    g = torch.Generator().manual_seed(2)
    for _ in range(10):
        start = torch.randint(-3, 4, (4, 11), generator=g).float()
        end = torch.randint(-3, 4, (4, 11, 11), generator=g).float()
        start[torch.rand(4, 11, generator=g) < 0.2] = float("-inf")
        end[:, :, torch.rand(11, generator=g) < 0.2] = float("-inf")
        start[3, 7:] = float("-inf")
        band = end_band(end, 6)
        assert band.shape == (4, 11, 6) and band[0, 2, 3] == end[0, 2, 5] and band[0, 9, 2] == float("-inf")
        for max_len in (1, 3, 6, 40):      # 40: the band's 6 ends from each start bound the span
            s, e = best_spans(start, band, max_len)
            for row in range(4):
                best, want = float("-inf"), (0, 0)
                for i in range(11):
                    for j in range(i, min(i + min(max_len, 6), 11)):
                        if start[row, i] + end[row, i, j] > best:
                            best, want = float(start[row, i] + end[row, i, j]), (i, j)
                assert (s[row].item(), e[row].item()) == want, (row, max_len)


@pytest.mark.parametrize("backbone", ["bert", "xlnet"])
def test_best_span_of_end_scores_given_the_start(toks, backbone):
    """best_span reads bands of end scores given the start: ones that do not depend on the start find the span
    per-position end scores find; end scores given start s that favour end s + 2 find a span of three tokens."""
    vocab = toks["wp" if backbone == "bert" else "sp"]
    fmt = input_format(backbone, vocab)
    enc = TaskEncoder(fmt, vocab, max_len=40, doc_stride=8, max_query_len=8)
    context = " ".join(TEXT[:4])
    windows = enc.span(Example("q", ("Who sleeps?", context), answers=(("the lazy dog", context.index("the lazy dog")),)))
    g = torch.Generator().manual_seed(3)
    for _ in range(5):
        rows = [len(w.offsets) for w in windows]
        start = [torch.randint(-4, 5, (n,), generator=g).float() for n in rows]
        end = [torch.randint(-4, 5, (n,), generator=g).float() for n in rows]
        same = [end_band(e.expand(len(e), -1), 30) for e in end]
        assert best_span(context, windows, start, same, fmt) == best_span(context, windows, start, end, fmt)
    start = [torch.zeros(n) for n in rows]
    start[0][[i for i, ok in enumerate(windows[0].max_context) if ok][0]] = 5.0
    s = int(start[0].argmax())
    given = [torch.where(torch.arange(n)[None] == torch.arange(n)[:, None] + 2, 3.0, 0.0) for n in rows]
    want = token_span_text(context, windows[0], s, s + 2)
    assert len(want.split()) >= 2 and best_span(context, windows, start, [end_band(x, 30) for x in given], fmt) == want


@pytest.mark.parametrize("backbone", ["bert", "xlnet"])
def test_best_span_is_the_brute_force_search_over_windows(toks, backbone):
    """Random tying logits on every window: best_span reads the text of the first best (window, s, e) with s a
    max-context token of its window, e a context token and s <= e < s + max_answer_len."""
    vocab = toks["wp" if backbone == "bert" else "sp"]
    fmt = input_format(backbone, vocab)
    enc = TaskEncoder(fmt, vocab, max_len=40, doc_stride=8, max_query_len=8)
    context = " ".join(TEXT[:4])
    windows = enc.span(Example("q", ("Who sleeps?", context), answers=(("the lazy dog", context.index("the lazy dog")),)))
    t = collate(windows, fmt)["input_ids"].shape[2]
    g = torch.Generator().manual_seed(1)
    found = 0
    for _ in range(10):
        start, end = torch.randint(-4, 5, (2, len(windows), t), generator=g).float()
        for max_len in (1, 3, 30):
            best, want = float("-inf"), ""
            for w, window in enumerate(windows):
                n = len(window.offsets)
                own = slice(t - n, t) if fmt.pad_left else slice(0, n)
                ctx = [o is not None for o in window.offsets]
                span = brute_force_span(start[w, own].tolist(), end[w, own].tolist(), max_len,
                                        lambda s, e: ctx[s] and window.max_context[s] and ctx[e])  # noqa: B023
                if span and float(start[w, own][span[0]] + end[w, own][span[1]]) > best:
                    best = float(start[w, own][span[0]] + end[w, own][span[1]])
                    want = token_span_text(context, window, *span)
            found += bool(want)   # "" only for a best span of one empty piece (sentencepiece's lone "▁")
            assert best_span(context, windows, start, end, fmt, max_len) == want
            # as fine-tuning passes them: one row per window, cut to the window's own positions
            rows = [(s[t - len(wi.offsets):] if fmt.pad_left else s[:len(wi.offsets)]) for s, wi in zip(start, windows)]
            ends = [(e[t - len(wi.offsets):] if fmt.pad_left else e[:len(wi.offsets)]) for e, wi in zip(end, windows)]
            assert best_span(context, windows, rows, ends, fmt, max_len) == want
    assert found >= 25, found


@pytest.mark.parametrize("backbone", ["bert", "xlnet"])
def test_best_span_reads_the_answer_back_from_padded_logits(toks, backbone):
    vocab = toks["wp" if backbone == "bert" else "sp"]
    fmt = input_format(backbone, vocab)
    enc = TaskEncoder(fmt, vocab, max_len=40, doc_stride=8, max_query_len=8)
    context = " ".join(TEXT[:4])
    answer = "the lazy dog"
    ex = Example("q", ("Who sleeps?", context), answers=((answer, context.index(answer)),))
    windows = enc.span(ex)
    batch = collate(windows, fmt)
    assert len(windows) > 2
    # logits that point at the gold positions of every window holding the answer
    start = torch.zeros(batch["input_ids"].shape[0], batch["input_ids"].shape[2])
    end = start.clone()
    start[torch.arange(len(windows)), batch["start_positions"]] = 5.0
    end[torch.arange(len(windows)), batch["end_positions"]] = 5.0
    assert best_span(context, windows, start, end, fmt) == answer
    # the summary token, the question and spans longer than max_answer_len never win
    summary = batch["summary_index"][:, 0]
    start2, end2 = start.clone(), end.clone()
    start2[torch.arange(len(windows)), summary] = 50.0
    end2[torch.arange(len(windows)), summary] = 50.0
    assert best_span(context, windows, start2, end2, fmt) == answer
    assert best_span(context, windows, start, end, fmt, max_answer_len=1) != answer
    # an end before the start is not a span
    backwards = best_span(context, windows, end, start, fmt)
    assert backwards != answer
    # an answer at the end of the context lies in the last window, which is shorter than the batch: with
    # logits on that window alone, they are read at positions shifted by the padding (left for XLNet)
    last = "all afternoon"
    ex = Example("q", ("When?", context), answers=((last, context.rindex(last)),))
    windows = enc.span(ex)
    batch = collate(windows, fmt)
    assert len(windows[-1].sequences[0].ids) < batch["input_ids"].shape[2]
    assert windows[-1].start != windows[-1].sequences[0].summary and windows[0].start == windows[0].sequences[0].summary
    start = torch.zeros(batch["input_ids"].shape[0], batch["input_ids"].shape[2])
    end = start.clone()
    start[-1, batch["start_positions"][-1]] = 5.0
    end[-1, batch["end_positions"][-1]] = 5.0
    assert best_span(context, windows, start, end, fmt) == last


@pytest.mark.parametrize("logit, answered", [(-1.0, False), (0.0, False), (-0.0, False), (0.5, True)])
def test_a_question_is_answered_only_where_an_answerability_logit_is_positive(toks, logit, answered):
    """SQuAD 2.0: "" exactly when no window's answerability logit is positive (0 included)."""
    from genfeat.methods.finetune import Item, predictions
    from genfeat.tasks import TASKS

    vocab = toks["wp"]
    enc = TaskEncoder(input_format("bert", vocab), vocab, max_len=32, doc_stride=16)
    example = Example("q", ("who sat", "the cat sat on the mat"), answers=(("the cat", 0),))
    (window,) = enc.span(example, 0)
    n = len(window.sequences[0].ids)
    out = {"start": torch.zeros(n), "end": torch.zeros(n), "answer": logit}
    spec = TASKS["squad_v2.0"]
    (pred,) = predictions(spec, [example], [Item(window)], [out], enc.fmt)
    assert (pred != "") == answered and spec.unanswerable


def test_gpt_multiple_choice_cuts_the_passage_before_the_question():
    """GPT-1's [z; q; $; a_k]: a passage too long for max_len is cut, the question and the answer stay whole, as in
    BERT's [CLS] z [SEP] q a_k [SEP] (cutting segment A from its end dropped the question first)."""
    class Words:
        def __init__(self):
            self.ids = {}

        def encode(self, text):
            return [self.ids.setdefault(w, 100 + len(self.ids)) for w in text.split()]

    vocab = Words()
    example = Example("x", (" ".join(f"p{i}" for i in range(30)), "Q1 Q2 Q3 ?"), 0, ("o1", "o2 o2b"))
    question, passage = vocab.encode("Q1 Q2 Q3 ?"), vocab.encode(example.texts[0])
    (gpt,) = TaskEncoder(GPTFormat(50, 51, 52), vocab, 24).encode(example, "multiple_choice")
    (bert,) = TaskEncoder(BertFormat(cls_id=1, sep_id=2), vocab, 24).encode(example, "multiple_choice")
    assert gpt.truncated and bert.truncated
    for answer, g, b in zip(example.choices, gpt.sequences, bert.sequences):
        kept = len(b.ids) - 3 - len(question) - len(vocab.encode(answer))     # BERT's passage tokens
        assert g.ids == [50, *passage[:kept], *question, 51, *vocab.encode(answer), 52] and len(g.ids) == 24
