"""The gated-attention reader D of GDAN (genfeat.models.ga_reader): shapes, padding invariance, the GA
algebra on a hand case, the domain tags, the question-evidence common-word feature."""

import pytest
import torch

from genfeat.models.ga_reader import GAReader, GAReaderConfig, append_tag, gated_attention


def _model(**kw):
    torch.manual_seed(0)
    return GAReader(GAReaderConfig(vocab_size=30, embed_dim=8, hidden=5, layers=3, dropout=0.0, **kw)).eval()


def _batch():
    g = torch.Generator().manual_seed(1)
    paragraph = torch.randint(6, 30, (2, 9), generator=g)
    question = torch.randint(6, 30, (2, 4), generator=g)
    p_mask = torch.tensor([[True] * 9, [True] * 6 + [False] * 3])
    q_mask = torch.tensor([[True] * 4, [True] * 2 + [False] * 2])
    return paragraph * p_mask, p_mask, question * q_mask, q_mask


def test_shapes_and_padding_positions_are_minus_inf():
    out = _model()(*_batch())
    assert out.start_logits.shape == out.end_logits.shape == (2, 9)
    assert out.paragraph_states.shape == (2, 9, 10)
    assert torch.isinf(out.start_logits[1, 6:]).all() and torch.isfinite(out.start_logits[1, :6]).all()


@pytest.mark.parametrize("qe_comm", [False, True])
@pytest.mark.parametrize("domain", [None, torch.tensor([0, 1])])
def test_padding_does_not_change_outputs(domain, qe_comm):
    model = _model(qe_comm=qe_comm)
    p, pm, q, qm = _batch()
    together = model(p, pm, q, qm, domain)
    for i, (n, m) in enumerate([(9, 4), (6, 2)]):
        alone = model(p[i:i + 1, :n], pm[i:i + 1, :n], q[i:i + 1, :m], qm[i:i + 1, :m],
                      None if domain is None else domain[i:i + 1])
        torch.testing.assert_close(together.start_logits[i, :n], alone.start_logits[0])
        torch.testing.assert_close(together.end_logits[i, :n], alone.end_logits[0])
        # more padding than needed changes nothing either
        wide = model(torch.nn.functional.pad(p[i:i + 1, :n], (0, 5)), torch.nn.functional.pad(pm[i:i + 1, :n], (0, 5)),
                     torch.nn.functional.pad(q[i:i + 1, :m], (0, 3)), torch.nn.functional.pad(qm[i:i + 1, :m], (0, 3)),
                     None if domain is None else domain[i:i + 1])
        torch.testing.assert_close(wide.start_logits[0, :n], alone.start_logits[0])


def test_gated_attention_on_a_hand_case():
    d = torch.tensor([[[1.0, 0.0], [0.0, 2.0]]])             # two paragraph words
    q = torch.tensor([[[1.0, 1.0], [3.0, -1.0], [9.0, 9.0]]])  # three question words, the last one padding
    mask = torch.tensor([[True, True, False]])
    # word 1: scores (1, 3) -> α = softmax(1, 3); word 2: scores (2, -2) -> α = softmax(2, -2)
    a1 = torch.softmax(torch.tensor([1.0, 3.0]), 0)
    a2 = torch.softmax(torch.tensor([2.0, -2.0]), 0)
    q1 = a1[0] * torch.tensor([1.0, 1.0]) + a1[1] * torch.tensor([3.0, -1.0])
    q2 = a2[0] * torch.tensor([1.0, 1.0]) + a2[1] * torch.tensor([3.0, -1.0])
    expected = torch.stack([torch.tensor([1.0, 0.0]) * q1, torch.tensor([0.0, 2.0]) * q2])[None]
    torch.testing.assert_close(gated_attention(d, q, mask), expected)


def test_append_tag_goes_after_the_last_real_word():
    ids = torch.tensor([[7, 8, 9], [7, 0, 0]])
    ids2, mask2 = append_tag(ids, ids != 0, torch.tensor([2, 3]))
    assert ids2.tolist() == [[7, 8, 9, 2], [7, 3, 0, 0]]
    assert mask2.tolist() == [[True] * 4, [True, True, False, False]]


def test_domain_tags_change_the_scores_and_one_layer_works():
    model = _model()
    p, pm, q, qm = _batch()
    true = model(p, pm, q, qm, torch.zeros(2, dtype=torch.long)).start_logits
    gen = model(p, pm, q, qm, torch.ones(2, dtype=torch.long)).start_logits
    assert not torch.allclose(true[:, :6], gen[:, :6])
    assert true.shape == (2, 9), "the tag position is not a span position"
    one = GAReader(GAReaderConfig(vocab_size=30, embed_dim=8, hidden=5, layers=1))
    out = one(p, pm, q, qm)
    loss = -out.start_logits[0].log_softmax(-1)[2] - out.end_logits[1].log_softmax(-1)[4]
    loss.backward()
    assert one.embed.weight.grad is not None and one.start.weight.grad.abs().sum() > 0


def test_config_checks():
    with pytest.raises(ValueError, match="dropout"):
        GAReaderConfig(vocab_size=3, dropout=1.0)
    with pytest.raises(ValueError, match="vocab_size must be set"):
        GAReader(GAReaderConfig())


def test_bigru_equals_the_packed_bidirectional_gru_in_outputs_and_gradients():
    """BiGRU runs its nn.GRU's two directions on padded rows (the backward one on rows reversed within their
    length); a packed run of the same nn.GRU is the reference: same outputs at real positions, zeros at
    padding, same gradients of the input and of every weight."""
    from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence

    from genfeat.models.ga_reader import BiGRU

    torch.manual_seed(0)
    gru = BiGRU(6, 4)
    lengths = torch.tensor([7, 3, 5, 1])
    mask = torch.arange(7)[None, :] < lengths[:, None]
    x = torch.randn(4, 7, 6, requires_grad=True)
    weight = torch.randn(4, 7, 8) * mask[:, :, None]

    def grads(out):
        return torch.autograd.grad((out * weight).sum(), [x, *gru.parameters()])

    ours = gru(x, mask)
    packed = pack_padded_sequence(x, lengths, batch_first=True, enforce_sorted=False)
    reference = pad_packed_sequence(gru.gru(packed)[0], batch_first=True, total_length=7)[0]
    torch.testing.assert_close(ours, reference)
    assert (ours[~mask] == 0).all()
    for a, b in zip(grads(ours), grads(reference)):
        torch.testing.assert_close(a, b)
    assert [name for name, _ in gru.named_parameters()][-1] == "gru.bias_hh_l0_reverse", "nn.GRU's own parameters"


@pytest.mark.parametrize("domain", [None, torch.tensor([1, 0])])
def test_qe_comm_feature_marks_paragraph_words_found_in_the_question(domain):
    model = _model(qe_comm=True)
    assert model.doc_grus[-1].gru.input_size == 10 + 2 and model.doc_grus[0].gru.input_size == 8
    paragraph = torch.tensor([[7, 8, 1, 9, 7, 2], [9, 10, 11, 0, 0, 0]])     # 1: <unk>, 2: a tag id as a word
    question = torch.tensor([[7, 1, 2, 12], [11, 9, 0, 0]])
    seen = []
    model.doc_grus[-1].register_forward_pre_hook(lambda _m, args: seen.append(args[0][..., -2:]))
    model(paragraph, paragraph != 0, question, question != 0, domain)
    table = model.qe_comm.weight.detach()
    common = torch.tensor([[1, 0, 0, 0, 1, 0], [1, 0, 1, 0, 0, 0]])          # specials never count
    expected = table[common] * (paragraph != 0)[:, :, None]
    got = seen[0]
    assert got.shape[1] == (6 if domain is None else 7)
    torch.testing.assert_close(got[:, :6], expected)
    if domain is not None:
        assert (got[1, 3] == 0).all() and (got[:, 6] == 0).all(), "the tag and the padding carry no feature"


def test_qe_comm_reader_points_at_the_repeated_word_among_words_it_never_trained_on():
    """The answer is the one paragraph word the question repeats; the test paragraphs use only words absent from
    training (untrained embeddings), so only the common-word indicator carries over. (When written: 1.0 with
    qe_comm at seeds 0 and 1; without it 0.77 and 0.84, both 1.0 on the training words.)"""
    g = torch.Generator().manual_seed(3)

    def batch(first_word, b=32):
        paragraph = torch.stack([torch.randperm(24, generator=g)[:10] + first_word for _ in range(b)])
        answer = torch.randint(0, 10, (b,), generator=g)
        filler = torch.randint(54, 60, (b, 3), generator=g)                  # question words never in a paragraph
        question = torch.cat([filler[:, :1], paragraph[torch.arange(b), answer][:, None], filler[:, 1:]], 1)
        return paragraph, question, answer

    torch.manual_seed(0)
    model = GAReader(GAReaderConfig(vocab_size=60, embed_dim=8, hidden=8, layers=2, dropout=0.0, qe_comm=True))
    opt = torch.optim.Adam(model.parameters(), lr=0.02)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # tiny GRU steps: a second thread only waits (seconds per step on a loaded machine)
    try:
        for _ in range(150):
            p, q, a = batch(6)                                                 # words 6-29
            out = model(p, p != 0, q, q != 0)
            loss = torch.nn.functional.cross_entropy(out.start_logits, a)
            opt.zero_grad()
            loss.backward()
            opt.step()
    finally:
        torch.set_num_threads(threads)
    p, q, a = batch(30, 256)                                                   # words 30-53: never trained
    with torch.no_grad():
        accuracy = (model(p, p != 0, q, q != 0).start_logits.argmax(-1) == a).float().mean().item()
    assert accuracy > 0.95
