"""Task heads on every backbone (genfeat.models.heads) and the target losses (genfeat.objectives.task):
padding does not change a prediction, similarity is symmetric in its two orders, multiple-choice scores
follow their choices, memory segments equal full-context reading (Transformer-XL), only the head and
GPT's special tokens are new parameters, span scores stay inside the context, end scores conditioned on the start
are XLNet's given any start and train on the gold one, the losses are sums
with counts that backpropagate into head and backbone, and GPT-1's L3 = L2 + λ·L1 from one forward pass
equals the loss and gradients of two separate passes."""

import os
import pathlib

import pytest
import torch

from genfeat.data.vocab import SymbolVocab
from genfeat.errors import ConfigError
from genfeat.hub import build_model
from genfeat.models.heads import ADAPTERS, FineTuneConfig, FineTuneModel, HeadConfig, get_adapter, register_adapter
from genfeat.objectives.task import TaskObjective
from genfeat.tasks.transforms import BertFormat, Encoded, GPTFormat, Packed, XLNetFormat, collate

TINY = {
    "bert": {"n_token": 50, "d_model": 16, "n_layer": 2, "n_head": 2, "d_inner": 32, "max_position": 32,
             "dropout": 0.0, "dropatt": 0.0},
    "xlnet": {"n_token": 50, "d_model": 16, "n_layer": 2, "n_head": 2, "d_head": 8, "d_inner": 32, "dropout": 0.0,
              "dropatt": 0.0},
    "gpt": {"n_token": 50, "d_model": 16, "n_layer": 2, "n_head": 2, "d_inner": 32, "max_position": 32,
            "dropout": 0.0, "dropemb": 0.0, "dropatt": 0.0},
    "lstm_lm": {"n_token": 50, "d_model": 16, "d_hidden": 24, "n_layer": 1, "max_position": 32, "dropout": 0.0,
                "dropemb": 0.0},
    "transformer_xl": {"n_token": 50, "d_model": 16, "n_layer": 2, "n_head": 2, "d_head": 8, "d_inner": 32,
                       "dropout": 0.0, "mem_len": 0},
}
FORMATS = {"bert": BertFormat(cls_id=1, sep_id=2), "xlnet": XLNetFormat(cls_id=1, sep_id=2),
           "transformer_xl": None}


def make(backbone: str, kind: str = "classification", n_labels: int = 3, **extra) -> FineTuneModel:
    torch.manual_seed(0)
    head = HeadConfig(kind=kind, n_labels=n_labels, d_model=16, pool=get_adapter(backbone).pool, dropout=0.0, **extra)
    return FineTuneModel(FineTuneConfig(task="t", backbone=backbone, backbone_config=TINY[backbone], head=head,
                                        max_len=32)).eval()


def fmt_of(model: FineTuneModel):
    if model.config.backbone in ("gpt", "lstm_lm"):
        return model.input_format(None)
    if model.config.backbone == "transformer_xl":
        vocab = SymbolVocab(["<eos>"] + [f"w{i}" for i in range(49)], "word")
        return model.input_format(vocab)
    return FORMATS[model.config.backbone]


def encoded(fmt, pairs, label=None) -> Encoded:
    return Encoded([fmt.pack(p) for p in pairs], label)


A, B, C = [5, 6, 7, 8, 9, 10], [11, 12, 13], [14, 15, 16, 17, 18, 19, 20, 21, 22]


@pytest.mark.parametrize("backbone", sorted(TINY))
def test_padding_does_not_change_a_prediction(backbone):
    model = make(backbone)
    fmt = fmt_of(model)
    short, long = encoded(fmt, [[A]], 0), encoded(fmt, [[C, B]], 1)
    alone = model(**{k: v for k, v in collate([short], fmt).items() if k != "labels"}).logits
    padded = model(**{k: v for k, v in collate([short, long], fmt).items() if k != "labels"}).logits
    assert padded.shape == (2, 3)
    torch.testing.assert_close(padded[0], alone[0], atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("backbone", ["bert", "gpt"])
def test_similarity_is_symmetric_and_multiple_choice_follows_choices(backbone):
    model = make(backbone)
    fmt = fmt_of(model)
    both = collate([encoded(fmt, [[A, B], [B, A]])], fmt)
    swapped = collate([encoded(fmt, [[B, A], [A, B]])], fmt)
    torch.testing.assert_close(model(**both).logits, model(**swapped).logits)
    mc = make(backbone, "multiple_choice")
    choices = [[A, B], [A, C], [B, C]]
    scores = mc(**collate([encoded(fmt, choices)], fmt)).logits
    permuted = mc(**collate([encoded(fmt, [choices[i] for i in (2, 0, 1)])], fmt)).logits
    assert scores.shape == (1, 3)
    torch.testing.assert_close(permuted[0], scores[0, [2, 0, 1]])


@pytest.mark.parametrize("backbone", sorted(TINY))
def test_every_backbone_learns_a_token_detection_task(backbone):
    """The summary state carries the task's gradient into the backbone: a tiny model of each backbone learns
    whether token 5 occurs anywhere in a random sequence (the head alone, reading a random backbone, cannot)."""
    model = make(backbone, n_labels=2).train()
    fmt = fmt_of(model)
    g = torch.Generator().manual_seed(0)

    def batch(n: int) -> dict[str, torch.Tensor]:
        items = []
        for _ in range(n):
            seq = torch.randint(6, 45, (int(torch.randint(3, 12, (1,), generator=g)),), generator=g).tolist()
            label = int(torch.rand(1, generator=g) < 0.5)
            if label:
                seq[int(torch.randint(0, len(seq), (1,), generator=g))] = 5
            items.append(encoded(fmt, [[seq]], label))
        return collate(items, fmt)

    opt = torch.optim.Adam(model.parameters(), 3e-3)
    for _ in range(150):
        b = batch(32)
        labels = b.pop("labels")
        loss = torch.nn.functional.cross_entropy(model(**b).logits, labels)
        opt.zero_grad()
        loss.backward()
        opt.step()
    held_out = batch(400)
    labels = held_out.pop("labels")
    with torch.no_grad():
        accuracy = (model.eval()(**held_out).logits.argmax(-1) == labels).float().mean()
    assert accuracy > 0.9, float(accuracy)


def test_transformer_xl_memory_segments_equal_full_context():
    model = make("transformer_xl")
    model.backbone.config = type(model.backbone.config)(**{**TINY["transformer_xl"], "mem_len": 16})
    fmt = fmt_of(model)
    head, tail = list(range(3, 11)), [11, 12, 13]
    full = collate([encoded(fmt, [[[*head, *tail]]])], fmt)
    split = collate([encoded(fmt, [[tail]])], fmt)
    split["memory_ids"] = torch.tensor(head)[None, None]                        # [b=1, s=1, u=8]
    torch.testing.assert_close(model(**split).logits, model(**full).logits, atol=1e-5, rtol=1e-5)
    # reading long texts, a Transformer-XL with same_length (Hugging Face's default) sees all of its memory too
    head_cfg = model.config.head
    longer = FineTuneModel(FineTuneConfig(task="t", backbone="transformer_xl", head=head_cfg, max_len=32, max_segments=3,
                                          backbone_config={**TINY["transformer_xl"], "same_length": True, "mem_len": 8}))
    assert not longer.backbone.config.same_length and longer.backbone.config.mem_len == 64


def test_bert_refuses_memory_and_unknown_backbone_names_the_fix():
    model = make("bert")
    fmt = fmt_of(model)
    batch = collate([encoded(fmt, [[A]])], fmt)
    batch["memory_ids"] = torch.ones(1, 1, 4, dtype=torch.long)
    with pytest.raises(ConfigError, match="max_segments 1"):
        model(**batch)
    with pytest.raises(ConfigError, match="register_adapter"):
        get_adapter("no_such_backbone")


def test_adapter_registry_is_open():
    @register_adapter("test_only_arch")
    class Dummy(ADAPTERS["bert"].__class__):
        pool = False

    try:
        assert isinstance(get_adapter("test_only_arch"), Dummy)
    finally:
        ADAPTERS.pop("test_only_arch")


def test_gpt_new_parameters_are_the_head_and_three_special_tokens():
    torch.manual_seed(0)
    backbone = build_model("gpt", TINY["gpt"])
    before = {k: v.clone() for k, v in backbone.state_dict().items()}
    head = HeadConfig(kind="classification", n_labels=2, d_model=16, pool=False)
    model = FineTuneModel(FineTuneConfig(task="t", backbone="gpt", backbone_config=TINY["gpt"], head=head, max_len=32),
                          backbone)
    fmt = model.input_format(None)
    assert isinstance(fmt, GPTFormat) and (fmt.start_id, fmt.delim_id, fmt.extract_id) == (50, 51, 52)
    new = {k for k in model.state_dict()} - {f"backbone.{k}" for k in before}
    assert new == {"backbone.special_emb.weight", "head.out.weight", "head.out.bias"}
    assert all(torch.equal(model.state_dict()[f"backbone.{k}"], v) for k, v in before.items())
    # a reloaded fine-tuned config has the three special rows already: no new ones
    again = FineTuneModel(model.config)
    assert again.backbone.config.n_special == 3


def test_losses_are_sums_with_counts_and_reach_backbone_and_head():
    model = make("bert").train()
    fmt = fmt_of(model)
    batch = collate([encoded(fmt, [[A]], 0), encoded(fmt, [[B, C]], 2)], fmt)
    out = TaskObjective("classification")(model, batch)
    assert out.count == 2 and out.logs["correct"] in (0.0, 1.0, 2.0)
    logits = model(**{k: v for k, v in batch.items() if k != "labels"}).logits
    torch.testing.assert_close(out.loss_sum, torch.nn.functional.cross_entropy(logits, batch["labels"], reduction="sum"))
    out.loss_sum.backward()
    assert model.head.out.weight.grad.abs().sum() > 0
    assert model.backbone.bert.word_emb.weight.grad.abs().sum() > 0

    reg = make("bert", "regression", 1)
    batch["labels"] = torch.tensor([0.5, 3.0])
    out = TaskObjective("regression")(reg, batch)
    pred = reg(**{k: v for k, v in batch.items() if k != "labels"}).logits
    torch.testing.assert_close(out.loss_sum, ((pred - batch["labels"]) ** 2).sum())


def test_auxiliary_lm_scores_real_next_tokens_only():
    model = make("gpt")
    fmt = fmt_of(model)
    batch = collate([encoded(fmt, [[A]], 0), encoded(fmt, [[C, B]], 1)], fmt)
    out = TaskObjective("classification", 0.5)(model, batch).parts["lm"]
    lengths = batch["attention_mask"].sum((1, 2))
    assert out.count == int((lengths - 1).sum())
    logits = model.backbone(batch["input_ids"][0, :, :lengths[0]]).logits[0]       # example 0 alone, no padding
    ref = -torch.log_softmax(logits[:-1], -1).gather(1, batch["input_ids"][0, 0, 1:lengths[0], None]).sum()
    ex0 = TaskObjective("classification", 0.5)(model, {k: v[:1, ..., :lengths[0]] if v.dim() == 3 else v[:1]
                                                       for k, v in batch.items()})
    torch.testing.assert_close(ex0.parts["lm"].loss_sum, ref, atol=1e-4, rtol=1e-5)
    with pytest.raises(ConfigError, match="aux_lm_weight"):
        TaskObjective("classification", 0.5)(make("bert"), collate([encoded(FORMATS["bert"], [[A]], 0)], FORMATS["bert"]))


def _task_items(model: FineTuneModel, kind: str) -> list[Encoded]:
    """Two examples of ``kind`` with k = 1 (single text), 2 (similarity, both orders) or 3 (choices)
    sequences each, of unequal lengths so that some sequences are padded."""
    fmt = fmt_of(model)
    if kind == "classification":
        return [encoded(fmt, [[A]], 0), encoded(fmt, [[C, B]], 2)]
    if kind == "regression":
        return [encoded(fmt, [[A, B], [B, A]], 0.5), encoded(fmt, [[C, A], [A, C]], 3.0)]
    return [encoded(fmt, [[A, B], [A, C], [A, [5]]], 1), encoded(fmt, [[B, A], [B, C], [B, [6, 7]]], 2)]


def _task_batch(model: FineTuneModel, kind: str):
    """:func:`_task_items` as one batch."""
    return collate(_task_items(model, kind), fmt_of(model))


def _old_l3(model: FineTuneModel, kind: str, batch, weight: float) -> torch.Tensor:
    """L2 + λ·L1 as the two-term schedule defined it, from two separate forward passes: L2 the task
    loss's mean over examples on the head's output; L1 the mean over every real next token of every
    sequence (not the first), each sequence read alone by the backbone, scored by its full LM output."""
    inputs = {k: v for k, v in batch.items() if k != "labels"}
    logits, labels = model(**inputs).logits, batch["labels"]
    l2 = ((logits - labels) ** 2).mean() if kind == "regression" else torch.nn.functional.cross_entropy(logits, labels)
    nll, count = 0.0, 0
    for seq, n in zip(batch["input_ids"].flatten(0, 1), batch["attention_mask"].flatten(0, 1).sum(-1)):
        seq = seq[None, :n]
        if model.config.backbone == "transformer_xl":
            log_probs = model.backbone(seq, ext_len=0, return_log_probs=True).log_probs[0]
        else:
            log_probs = torch.log_softmax(model.backbone(seq).logits[0], -1)
        nll = nll - log_probs[:-1].gather(1, seq[0, 1:, None]).sum()
        count += int(n) - 1
    return l2 + weight * nll / count


@pytest.mark.parametrize("kind", ["classification", "regression", "multiple_choice"])
@pytest.mark.parametrize("backbone", ["gpt", "lstm_lm", "transformer_xl"])
def test_one_pass_l3_equals_the_two_pass_loss_and_its_gradients(backbone, kind):
    """GPT-1 Eq. 5 from one forward pass equals L2 + λ·L1 from separate passes (dropout off), with the
    same gradients, for one, two (similarity) and three (choices) sequences per example."""
    model = make(backbone, kind, {"classification": 3, "regression": 1, "multiple_choice": 0}[kind]).train()
    batch = _task_batch(model, kind)
    out = TaskObjective(kind, 0.5)(model, batch)
    assert out.count == 2 and set(out.parts) == {"task", "lm"}
    assert out.parts["lm"].count == int((batch["attention_mask"].sum(-1) - 1).sum())
    out.mean.backward()
    grads = {k: p.grad.clone() for k, p in model.named_parameters() if p.grad is not None}
    model.zero_grad()
    ref = _old_l3(model, kind, batch, 0.5)
    ref.backward()
    torch.testing.assert_close(out.mean, ref, atol=1e-5, rtol=1e-5)
    ref_grads = {k: p.grad for k, p in model.named_parameters() if p.grad is not None}
    assert grads.keys() == ref_grads.keys() and "head.out.weight" in grads
    for k in grads:
        torch.testing.assert_close(grads[k], ref_grads[k], atol=1e-5, rtol=1e-5, msg=k)
    torch.testing.assert_close(out.parts["task"].mean + 0.5 * out.parts["lm"].mean, ref, atol=1e-5, rtol=1e-5)


def test_without_the_auxiliary_lm_the_task_loss_is_l2_and_no_lm_head_runs(monkeypatch):
    model = make("gpt").train()
    batch = _task_batch(model, "classification")
    logits = model(**{k: v for k, v in batch.items() if k != "labels"}).logits

    def lm_head(*args):
        raise RuntimeError("the LM head ran")

    monkeypatch.setattr(type(model.adapter), "lm_log_probs", lm_head)
    monkeypatch.setattr(model.backbone, "target_log_probs", lm_head)
    out = TaskObjective("classification")(model, batch)
    assert not out.parts and out.count == 2 and out.logs["correct"] in (0.0, 1.0, 2.0)
    torch.testing.assert_close(out.loss_sum, torch.nn.functional.cross_entropy(logits, batch["labels"], reduction="sum"))
    with pytest.raises(RuntimeError, match="LM head ran"):          # the patch is where λ > 0 computes L1
        TaskObjective("classification", 0.5)(model, batch)


def test_span_scores_stay_in_the_context_and_answerability_reads_cls_and_start_weighted_states():
    model = make("xlnet", "span", 0, answerability=True)
    fmt = fmt_of(model)
    packed = fmt.pack([C, B])                      # context first for XLNet
    offsets = [(i, i + 1) if i < len(C) else None for i in range(len(packed.ids))]
    item = Encoded([packed], None, False, 0, 2, 4, offsets, [o is not None for o in offsets])
    none = Encoded([packed], None, False, 0, packed.summary, packed.summary, offsets, [o is not None for o in offsets])
    batch = collate([item, none], fmt)
    out = model(**{k: v for k, v in batch.items() if k not in ("start_positions", "end_positions")})
    allowed = batch["context_mask"].clone()
    allowed[torch.arange(2), batch["summary_index"][:, 0]] = True
    assert (out.start_logits[~allowed] == -1e9).all() and (out.start_logits[allowed] > -1e8).all()
    assert out.answer_logits.shape == (2,)
    loss = TaskObjective("span")(model, batch)
    assert loss.count == 2 and torch.isfinite(loss.loss_sum)
    # XLNet's answer_class: MLP(tanh) on [sum_i softmax(start)_i h_i ; h_<cls>], computed here by hand
    torch.manual_seed(1)
    hidden = torch.randn(2, out.start_logits.shape[1], 16, requires_grad=True)
    res = model.head(hidden, batch["summary_index"], batch["context_mask"])
    p = torch.softmax(res.start_logits, -1)
    cls = hidden[torch.arange(2), batch["summary_index"][:, 0]]
    dense, _, _, last = model.head.answer
    ref = last(torch.tanh(dense(torch.cat([(p[..., None] * hidden).sum(1), cls], -1)))).squeeze(-1)
    torch.testing.assert_close(res.answer_logits, ref)
    res.answer_logits.sum().backward()
    # the gradient reaches both inputs: the <cls> half and the start-weighted half of the first layer, and
    # every allowed position's state (through p), none the start softmax masks (question, separators, padding)
    grad = model.head.answer[0].weight.grad
    assert grad[:, :16].abs().sum() > 0 and grad[:, 16:].abs().sum() > 0
    reach = hidden.grad.abs().sum(-1)
    assert (reach[allowed] > 0).all() and (reach[~allowed] == 0).all()


def test_start_conditioned_end_scores_are_xlnets_given_any_start_and_train_on_the_gold_one(monkeypatch):
    from genfeat.models import heads

    model = make("xlnet", "span", 0, span_end="start_conditioned", answerability=True)
    assert set(model.head.state_dict()) >= {"out.weight", "end.dense.weight", "end.norm.weight", "end.score.weight"}
    assert model.head.out.weight.shape == (1, 16)                   # start scores only
    fmt = fmt_of(model)
    packed = fmt.pack([C, B])
    offsets = [(i, i + 1) if i < len(C) else None for i in range(len(packed.ids))]
    item = Encoded([packed], None, False, 0, 2, 4, offsets, [o is not None for o in offsets])
    none = Encoded([packed], None, False, 0, packed.summary, packed.summary, offsets, [o is not None for o in offsets])
    batch = collate([item, none], fmt)
    allowed = batch["context_mask"].clone()
    allowed[torch.arange(2), batch["summary_index"][:, 0]] = True
    t = allowed.shape[1]
    torch.manual_seed(1)
    hidden = torch.randn(2, t, 16)
    starts = batch["start_positions"]
    given = model.head(hidden, batch["summary_index"], batch["context_mask"], starts)
    # w_1ᵀ LayerNorm(tanh(W_0 [h_i ; h_s] + b_0)) + b_1, by hand
    end = model.head.end
    at = hidden[torch.arange(2), starts][:, None].expand_as(hidden)
    want = end.score(end.norm(torch.tanh(end.dense(torch.cat([hidden, at], -1))))).squeeze(-1)
    torch.testing.assert_close(given.end_logits[allowed], want[allowed])
    assert given.end_logits.shape == (2, t) and (given.end_logits[~allowed] == -1e9).all()
    # without starts: the end scores given every start, in chunks of 3 starts when the budget asks for it
    whole = model.head(hidden, batch["summary_index"], batch["context_mask"]).end_logits
    monkeypatch.setattr(heads, "_PAIR_BUDGET", 3 * 2 * t * 16)
    chunked = model.head(hidden, batch["summary_index"], batch["context_mask"]).end_logits
    assert whole.shape == (2, t, t)
    torch.testing.assert_close(chunked, whole)
    torch.testing.assert_close(whole[torch.arange(2), starts], given.end_logits)
    # training reads the end scores given the gold start and reaches the end head and the backbone
    model.train()
    loss = TaskObjective("span")(model, batch)
    out = model(**{k: v for k, v in batch.items() if k != "end_positions"})
    from genfeat.objectives.span_qa import span_nll

    ref = span_nll(out.start_logits, out.end_logits, starts, batch["end_positions"]).sum() + \
        torch.nn.functional.binary_cross_entropy_with_logits(out.answer_logits, torch.tensor([1.0, 0.0]), reduction="sum")
    torch.testing.assert_close(loss.loss_sum, ref)
    loss.loss_sum.backward()
    assert model.head.end.dense.weight.grad.abs().sum() > 0 and model.head.answer[0].weight.grad.abs().sum() > 0
    assert model.backbone.word_emb.weight.grad.abs().sum() > 0
    with pytest.raises(ValueError, match="span head's options"):
        HeadConfig(kind="classification", span_end="start_conditioned")


def test_packed_summary_positions():
    fmt = fmt_of(make("transformer_xl"))
    p = fmt.pack([[4, 5], [6]])
    assert isinstance(p, Packed) and p.ids == [4, 5, 0, 6, 0] and p.summary == 4 and p.starts == (0, 3)


@pytest.mark.parametrize("backbone", ["gpt", "transformer_xl"])
def test_auxiliary_lm_under_distributed_data_parallel(backbone, tmp_path):
    """L1 runs inside the model's forward pass, so DDP sees every LM-head parameter used (Transformer-XL's untied
    output layer crashed DDP's backward when L1 was computed outside it), and its tokens are counted over the
    ranks: 2 gloo processes, one example each (with unequal numbers of tokens), give the gradients of one process
    on both (with each rank's own examples / tokens ratio they did not)."""
    from torchrun_launch import launch_worker

    worker = pathlib.Path(__file__).with_name("ddp_worker.py")
    data = pathlib.Path(os.environ.get("GENFEAT_DATA", "../shared/data"))
    for nproc, out in ((1, tmp_path / "one"), (2, tmp_path / "two")):
        out.mkdir()
        launch_worker(worker, [str(out), "--aux-lm", backbone], nproc, data, timeout=240)
    one = torch.load(tmp_path / "one" / "rank0.pt", weights_only=True)["params"]
    assert any(k.startswith("backbone.") and "emb" not in k for k in one) and "head.out.weight" in one
    for rank in (0, 1):
        two = torch.load(tmp_path / "two" / f"rank{rank}.pt", weights_only=True)["params"]
        assert two.keys() == one.keys()
        for k in one:
            torch.testing.assert_close(two[k], one[k], atol=1e-6, rtol=1e-5, msg=k)


@pytest.mark.parametrize("backbone", ["bert", "gpt"])
def test_a_max_len_beyond_the_backbones_positions_is_refused_when_the_model_is_built(backbone, tmp_path):
    """A checkpoint whose max_len exceeds its backbone's positions is refused on load, not mid-prediction."""
    import json

    from genfeat.errors import CheckpointError
    from genfeat.hub import from_pretrained, save_pretrained

    head = HeadConfig(kind="classification", n_labels=2, d_model=16, pool=get_adapter(backbone).pool, dropout=0.0)
    with pytest.raises(ConfigError, match=f"max_len 33 is longer than the {backbone} backbone's 32 positions"):
        FineTuneModel(FineTuneConfig(task="t", backbone=backbone, backbone_config=TINY[backbone], head=head, max_len=33))
    save_pretrained(make(backbone, n_labels=2), tmp_path / "m")
    config = json.loads((tmp_path / "m" / "config.json").read_text())
    config["model"]["max_len"] = 1000
    (tmp_path / "m" / "config.json").write_text(json.dumps(config))
    with pytest.raises(CheckpointError, match="not a valid finetune config: max_len 1000 is longer"):
        from_pretrained(tmp_path / "m")
