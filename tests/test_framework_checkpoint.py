import json
import os
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest
import torch

import genfeat.framework.checkpoint as ckpt
import genfeat.io
from genfeat.errors import CheckpointError
from genfeat.framework import OptimConfig, OptimSpec, Phase, Stage, Term, TrainConfig, Trainer

from _framework_fixtures import SquaredError, TwoHead, make_stream
from torchrun_launch import torchrun

STEPS = 12


def build(fail_at=None):
    torch.manual_seed(0)
    model = TwoHead(dropout=0.2)
    a = SquaredError("a", stateful=True)
    a.fail_at = fail_at
    optim = OptimConfig(name="adamw", lr=3e-3, weight_decay=0.01, warmup_steps=3, decay="cosine")
    phases = [Phase("pre", 5, [Stage([Term(SquaredError("b"), make_stream(seed=1))])], {"main": OptimSpec(optim)}),
              Phase("fine", STEPS, [Stage([Term(a, make_stream(seed=2), 1.0),
                                           Term(SquaredError("b", name="aux"), make_stream(seed=3), 0.5)])],
                    {"main": OptimSpec(optim)})]
    cfg = TrainConfig(seed=7, clip_norm=0.5, grad_accum=2, save_every=4, progress=False, log_every=2)
    return model, phases, cfg


def test_resume_after_kill_ends_with_identical_parameters(tmp_path):
    model, phases, cfg = build()
    Trainer(model, phases, cfg, out_dir=tmp_path / "full").fit()
    reference = {k: v.clone() for k, v in model.state_dict().items()}

    # Kill during fine-tuning step 7 (the objective is called twice per step with grad_accum 2).
    model, phases, cfg = build(fail_at=2 * 6 + 1)
    with pytest.raises(KeyboardInterrupt):
        Trainer(model, phases, cfg, out_dir=tmp_path / "run").fit()
    state = ckpt.load_trainer_state(tmp_path / "run" / "last")
    assert (state["phase_idx"], state["phase_step"]) == (1, 4)
    assert "carry" in state["objectives"][0][0], "the carried objective state must be checkpointed"

    model, phases, cfg = build()
    Trainer(model, phases, cfg, out_dir=tmp_path / "run", resume_from=tmp_path / "run" / "last").fit()
    for k, v in model.state_dict().items():
        assert torch.equal(v, reference[k]), k
    # The records logged after the checkpoint (fine step 6) were logged again, not twice.
    assert logged(tmp_path / "run") == logged(tmp_path / "full")


def test_a_log_line_straddling_the_checkpoint_covers_the_same_steps_after_a_resume(tmp_path):
    """log_every 3, save_every 4: the checkpoint at fine step 4 falls inside the window logged at step 6, whose sums
    before the kill are kept with the checkpoint, so the resumed log is the uninterrupted one's (it averaged steps
    5-6 alone before)."""
    model, phases, cfg = build()
    Trainer(model, phases, replace(cfg, log_every=3), out_dir=tmp_path / "full").fit()
    model, phases, cfg = build(fail_at=2 * 6 + 1)
    with pytest.raises(KeyboardInterrupt):
        Trainer(model, phases, replace(cfg, log_every=3), out_dir=tmp_path / "run").fit()
    assert ckpt.load_trainer_state(tmp_path / "run" / "last")["log_windows"][0], "the window's sums are kept"
    model, phases, cfg = build()
    Trainer(model, phases, replace(cfg, log_every=3), out_dir=tmp_path / "run",
            resume_from=tmp_path / "run" / "last").fit()
    assert logged(tmp_path / "run") == logged(tmp_path / "full")


def test_resuming_a_finished_run_repeats_nothing(tmp_path):
    def evaluate(m):
        return {"score": float(sum(p.double().sum() for p in m.parameters()))}

    model, phases, cfg = build()
    first = Trainer(model, phases, cfg, evaluate, out_dir=tmp_path).fit()
    before, weights = logged(tmp_path), (tmp_path / "last" / ckpt.MODEL_FILE).read_bytes()
    assert [r["step"] for r in before if r.get("event") == "eval"] == [5, 5 + STEPS]
    model, phases, cfg = build()
    again = Trainer(model, phases, cfg, evaluate, out_dir=tmp_path, resume_from=tmp_path / "last").fit()
    assert logged(tmp_path) == before, "the final evaluation must not be logged a second time"
    assert (tmp_path / "last" / ckpt.MODEL_FILE).read_bytes() == weights
    assert again.final_metrics == first.final_metrics and again.steps == first.steps


def drift(initial, kill_at=None):
    """Validation metric for keep_best: the squared distance from the initial parameters, which grows
    as training goes on, so each phase's best evaluation is its first and the later ones are worse.
    ``kill_at``: the evaluation (1-based) that is killed."""
    calls = []

    def evaluate(m):
        calls.append(1)
        if len(calls) == kill_at:
            raise KeyboardInterrupt("killed while evaluating")
        return {"drift": float(sum((p.double() - initial[k]).pow(2).sum() for k, p in m.named_parameters()))}
    return evaluate


@pytest.mark.parametrize("fail_at, kill_eval, resumed_at", [(2 * 6 + 1, None, (1, 4)), (1, None, (1, 0)),
                                                            (None, 9, (1, 8))],
                         ids=["inside-the-phase-after-its-best", "at-the-phase-boundary", "in-the-last-evaluation"])
def test_resume_with_keep_best_restores_the_best_evaluation_made_before_the_kill(tmp_path, fail_at, kill_eval,
                                                                                 resumed_at):
    def run(out, fail_at=None, kill_eval=None, resume=False):
        model, phases, cfg = build(fail_at)
        cfg = replace(cfg, eval_every=2, early_stop_metric="drift", keep_best=True)
        initial = {k: v.detach().double().clone() for k, v in model.named_parameters()}
        trainer = Trainer(model, phases, cfg, drift(initial, kill_eval), out_dir=out,
                          resume_from=out / "last" if resume else None)
        return model, trainer.fit()

    model, full = run(tmp_path / "full")
    reference = {k: v.clone() for k, v in model.state_dict().items()}
    fine = [r["drift"] for r in full.history if r["phase"] == "fine"]
    assert len(fine) == 6 and min(fine) == fine[0] < min(fine[1:]), "the premise: the best fine-tuning eval is the first"

    with pytest.raises(KeyboardInterrupt):  # the 9th evaluation is the one at the end of fine-tuning
        run(tmp_path / "run", fail_at=fail_at, kill_eval=kill_eval)
    state = ckpt.load_trainer_state(tmp_path / "run" / "last")
    assert (state["phase_idx"], state["phase_step"]) == resumed_at
    # a checkpoint inside a phase carries its best state; one at a phase's end has none to carry
    assert (tmp_path / "run" / "last" / ckpt.BEST_STATE_FILE).is_file() == (resumed_at[1] > 0)
    model, resumed = run(tmp_path / "run", resume=True)
    for k, v in model.state_dict().items():
        assert torch.equal(v, reference[k]), k
    assert resumed.best_metrics == full.best_metrics
    assert logged(tmp_path / "run") == logged(tmp_path / "full")


def test_resume_with_keep_best_refuses_a_checkpoint_without_its_best_state(tmp_path):
    model, phases, cfg = build()
    cfg = replace(cfg, eval_every=2, early_stop_metric="drift", stop_after_steps=5 + 6)
    initial = {k: v.detach().double().clone() for k, v in model.named_parameters()}
    Trainer(model, phases, cfg, drift(initial), out_dir=tmp_path).fit()  # without keep_best: no best state
    assert not (tmp_path / "last" / ckpt.BEST_STATE_FILE).exists()
    model, phases, cfg = build()
    cfg = replace(cfg, eval_every=2, early_stop_metric="drift", keep_best=True)
    with pytest.raises(CheckpointError, match=r"has no best_state\.safetensors .*fix: resume with --train\.keep_best false"):
        Trainer(model, phases, cfg, drift(initial), out_dir=tmp_path, resume_from=tmp_path / "last").fit()
    (tmp_path / "last" / ckpt.BEST_STATE_FILE).write_bytes(b"\x00garbage")
    with pytest.raises(CheckpointError, match=r"best_state\.safetensors' is corrupt or truncated"):
        Trainer(model, phases, cfg, drift(initial), out_dir=tmp_path, resume_from=tmp_path / "last").fit()


def test_resume_refuses_another_world_size_and_a_schedule_it_is_past_the_end_of(tmp_path):
    last = interrupted_run(tmp_path)
    state = ckpt.load_trainer_state(last)
    assert (state["phase_idx"], state["phase_step"]) == (1, 3)
    torch.save({**state, "world": 2}, last / ckpt.STATE_FILE)
    model, phases, cfg = build()
    with pytest.raises(CheckpointError, match=r"written by 2 process\(es\), this run has 1\. fix: resume with the "
                                              r"same number of processes"):
        Trainer(model, phases, cfg, out_dir=tmp_path, resume_from=last).fit()
    torch.save(state, last / ckpt.STATE_FILE)
    model, phases, cfg = build()
    phases[1].steps = 2
    with pytest.raises(CheckpointError, match=r"is at step 3 of phase 'fine', past its 2 steps in this schedule\. "
                                              r"fix: resume with the recipe it was trained with"):
        Trainer(model, phases, cfg, out_dir=tmp_path, resume_from=last).fit()
    model, phases, cfg = build()
    with pytest.raises(CheckpointError, match=r"is past the end of this schedule\. fix: resume with the recipe"):
        Trainer(model, phases[:1], cfg, out_dir=tmp_path, resume_from=last).fit()
    model, phases, cfg = build()
    assert Trainer(model, phases, cfg, out_dir=tmp_path, resume_from=last).fit().steps == 5 + STEPS


def test_keep_best_checkpoints_tied_weights(tmp_path):
    model, phases, cfg = build()
    model.head_b.weight = model.head_a.weight  # safetensors refuses tensors that share memory
    cfg = replace(cfg, eval_every=2, early_stop_metric="drift", keep_best=True, stop_after_steps=5 + 3)
    initial = {k: v.detach().double().clone() for k, v in model.named_parameters()}
    Trainer(model, phases, cfg, drift(initial), out_dir=tmp_path).fit()
    best = ckpt.load_best_state(tmp_path / "last")
    assert best.keys() == model.state_dict().keys()
    assert torch.equal(best["head_a.weight"], best["head_b.weight"])


def logged(out):
    """The metrics log without its timings."""
    records = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    return [{k: v for k, v in r.items() if k != "items_per_s"} for r in records]


def test_fresh_run_into_an_old_directory_starts_a_new_log(tmp_path):
    for _ in range(2):
        model, phases, cfg = build()
        Trainer(model, phases[:1], cfg, out_dir=tmp_path).fit()
    assert [r["step"] for r in logged(tmp_path)] == [2, 4, 5]


def test_kill_during_checkpoint_write_keeps_previous_checkpoint(tmp_path, monkeypatch):
    model, phases, cfg = build()
    Trainer(model, phases[:1], cfg, out_dir=tmp_path).fit()
    good = (tmp_path / "last" / ckpt.MODEL_FILE).read_bytes()

    def dying_save(model, filename):
        Path(filename).write_bytes(b"partial")
        raise KeyboardInterrupt("killed while writing")

    monkeypatch.setattr(ckpt, "save_model", dying_save)
    with pytest.raises(KeyboardInterrupt):
        ckpt.save_checkpoint(tmp_path / "last", model, {"x": 1})
    assert (tmp_path / "last" / ckpt.MODEL_FILE).read_bytes() == good
    assert sorted(p.name for p in tmp_path.iterdir()) == ["last", "metrics.jsonl"]


def test_corrupt_or_mismatched_checkpoints_give_clear_errors(tmp_path):
    model, phases, cfg = build()
    ckpt.save_checkpoint(tmp_path / "c", model, {"step": 1})
    with pytest.raises(CheckpointError, match=r"another model.*trunk\.0\.weight: shape \[8, 6\] in the checkpoint, "
                                              r"\[5, 6\] in this model"):
        ckpt.load_weights(tmp_path / "c", TwoHead(d_hidden=5))
    good = (tmp_path / "c" / ckpt.MODEL_FILE).read_bytes()
    for corrupt in (b"\x00garbage", good[:-7], bytes(range(256)) * 4):
        (tmp_path / "c" / ckpt.MODEL_FILE).write_bytes(corrupt)
        with pytest.raises(CheckpointError,
                           match="is corrupt or truncated.*fix: start the run again with --overwrite instead of --resume"):
            ckpt.load_for_resume(tmp_path / "c", TwoHead())
        # a model loaded for use (evaluate, generate, a fine-tuning init) is never to be deleted, nor resumed
        with pytest.raises(CheckpointError, match="is corrupt or truncated.*fix: the file is damaged: export or "
                                                  "copy the checkpoint .* again") as e:
            ckpt.load_weights(tmp_path / "c", TwoHead())
        assert "delete" not in e.value.fix and "--resume" not in e.value.fix
    with pytest.raises(CheckpointError, match="has no"):
        ckpt.load_trainer_state(tmp_path / "nowhere")


def test_corrupt_trainer_state_never_suggests_unsafe_loading(tmp_path):
    model, _, _ = build()
    ckpt.save_checkpoint(tmp_path / "c", model, {"step": 1, "t": torch.zeros(1000)})
    good = (tmp_path / "c" / ckpt.STATE_FILE).read_bytes()

    class Evil:
        def __reduce__(self):
            return (os.system, ("echo pwned",))

    torch.save({"x": Evil()}, tmp_path / "c" / ckpt.STATE_FILE)
    contents = [(tmp_path / "c" / ckpt.STATE_FILE).read_bytes(), b"not a torch file", good[: len(good) // 2]]
    for corrupt in contents:
        (tmp_path / "c" / ckpt.STATE_FILE).write_bytes(corrupt)
        with pytest.raises(CheckpointError, match="training state .* (is corrupt|holds objects).*fix: start the run again with --overwrite") as e:
            ckpt.load_trainer_state(tmp_path / "c")
        assert "weights_only" not in str(e.value) and "Re-running" not in str(e.value)


def interrupted_run(out, **trainer_args):
    """The ``last`` checkpoint of a run stopped after 3 fine-tuning steps."""
    model, phases, cfg = build()
    cfg.stop_after_steps = 8
    Trainer(model, phases, cfg, out_dir=out, **trainer_args).fit()
    return out / "last"


def write_vocab(symbols):
    return lambda d: (d / "vocab.json").write_text(json.dumps({"kind": "word", "symbols": symbols}))


def test_resume_refuses_another_vocabulary_of_the_same_size(tmp_path):
    last = interrupted_run(tmp_path, save_extra=write_vocab(["a", "b", "c"]))
    model, phases, cfg = build()
    with pytest.raises(CheckpointError, match=r"another vocabulary.*vocab\.json\.symbols\[1\]: \"b\" in the "
                                              r"checkpoint, \"c\" in this run.*fix: resume with the data"):
        Trainer(model, phases, cfg, out_dir=tmp_path, save_extra=write_vocab(["a", "c", "b"]), resume_from=last).fit()
    Trainer(model, phases, cfg, out_dir=tmp_path, save_extra=write_vocab(["a", "b", "c"]), resume_from=last).fit()


def test_resume_into_another_model_names_the_config_fields_that_differ(tmp_path):
    last = interrupted_run(tmp_path, checkpoint_config={"architecture": "two_head", "model": {"d_hidden": 8}})
    _, phases, cfg = build()
    model = TwoHead(d_hidden=5)
    with pytest.raises(CheckpointError, match=r"another model than this one \(config\.model\.d_hidden: 8 in the "
                                              r"checkpoint, 5 in this run; head_a\.weight: shape \[1, 8\] in the "
                                              r"checkpoint, \[1, 5\] in this model"):
        Trainer(model, phases, cfg, out_dir=tmp_path, resume_from=last,
                checkpoint_config={"architecture": "two_head", "model": {"d_hidden": 5}}).fit()


def test_resume_with_another_transformer_xl_config_names_the_fields(tmp_path):
    from genfeat.hub import checkpoint_config
    from genfeat.models.transformer_xl import TransformerXLConfig, TransformerXLLMHeadModel

    def txl(**kw):
        return TransformerXLLMHeadModel(TransformerXLConfig(**{
            "n_token": 50, "d_model": 16, "n_head": 2, "d_head": 8, "d_inner": 32, "n_layer": 1, "mem_len": 4, **kw}))

    saved = txl()
    ckpt.save_checkpoint(tmp_path / "c", saved, {"step": 1}, checkpoint_config(saved))
    other = txl(n_token=60, d_inner=24)
    with pytest.raises(CheckpointError) as e:
        ckpt.load_weights(tmp_path / "c", other, checkpoint_config(other))
    assert "config.model.d_inner: 32 in the checkpoint, 24 in this run" in str(e.value)
    assert "config.model.n_token: 50 in the checkpoint, 60 in this run" in str(e.value)
    assert "in this model" in str(e.value)  # and the parameters whose shapes differ


def test_resume_falls_back_to_the_backup_a_kill_between_renames_left(tmp_path, monkeypatch):
    model, phases, cfg = build()
    Trainer(model, phases, cfg, out_dir=tmp_path / "full").fit()
    reference = model.state_dict()

    last = interrupted_run(tmp_path / "run")
    replace = os.replace

    def killed_before_second_rename(src, dst):
        if Path(src).name.endswith(".tmp"):
            raise KeyboardInterrupt("killed between the renames")
        replace(src, dst)

    monkeypatch.setattr(genfeat.io.os, "replace", killed_before_second_rename)
    with pytest.raises(KeyboardInterrupt):
        ckpt.save_checkpoint(last, model, {"x": 1})
    monkeypatch.undo()
    assert not last.exists() and (tmp_path / "run" / ".last.old").is_dir()

    model, phases, cfg = build()
    Trainer(model, phases, cfg, out_dir=tmp_path / "run", resume_from=last).fit()
    for k, v in model.state_dict().items():
        assert torch.equal(v, reference[k]), k
    with pytest.raises(CheckpointError, match="no checkpoint .* to resume from"):
        ckpt.resume_dir(tmp_path / "nowhere" / "last")


def test_torchrun_two_processes_match_single_process(tmp_path):
    worker = Path(__file__).with_name("ddp_worker.py")
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).parent), "OMP_NUM_THREADS": "1"}
    single = subprocess.run([sys.executable, str(worker), str(tmp_path / "single")], env=env,
                            capture_output=True, text=True, timeout=240)
    assert single.returncode == 0, single.stderr[-2000:]
    run = subprocess.run([sys.executable, *torchrun(2), str(worker), str(tmp_path / "ddp")],
                         env=env, capture_output=True, text=True, timeout=240)
    assert run.returncode == 0, run.stderr[-3000:]
    ref = torch.load(tmp_path / "single" / "rank0.pt", weights_only=True)
    ranks = [torch.load(tmp_path / "ddp" / f"rank{r}.pt", weights_only=True) for r in range(2)]
    for k in ref["params"]:
        assert torch.equal(ranks[0]["params"][k], ranks[1]["params"][k]), f"ranks differ in {k}"
        torch.testing.assert_close(ranks[0]["params"][k], ref["params"][k], rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(torch.tensor(ranks[0]["losses"]), torch.tensor(ref["losses"]), rtol=1e-4, atol=1e-6)


def flat_weights(rnn: torch.nn.RNNBase) -> torch.Tensor:
    """Make ``rnn``'s weights views of one flat buffer, as cuDNN's flatten_parameters does on the GPU."""
    flat = torch.cat([w.detach().flatten() for w in rnn._flat_weights])
    offset = 0
    for w in rnn._flat_weights:
        w.data = flat[offset:offset + w.numel()].view_as(w)
        offset += w.numel()
    return flat


def test_rnn_weights_that_are_views_of_one_buffer_save_and_load(tmp_path):
    # ELMo's and GDAN's runs on a GPU failed at their first checkpoint: safetensors refused the flat buffer
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Embedding(7, 4), torch.nn.GRU(4, 3, bidirectional=True))
    model[0].weight = torch.nn.Parameter(torch.randn(7, 4))
    flat = flat_weights(model[1])
    assert all(w.untyped_storage().data_ptr() == flat.untyped_storage().data_ptr() for w in model[1]._flat_weights)
    ckpt.save_checkpoint(tmp_path / "c", model)
    fresh = torch.nn.Sequential(torch.nn.Embedding(7, 4), torch.nn.GRU(4, 3, bidirectional=True))
    flat_weights(fresh[1])                                       # loading into views of a flat buffer works too
    ckpt.load_weights(tmp_path / "c", fresh)
    for (name, want), got in zip(model.state_dict().items(), fresh.state_dict().values()):
        assert torch.equal(got, want), name
    assert fresh[1].weight_hh_l0_reverse.untyped_storage().nbytes() == 4 * flat.numel()   # still views of it


def test_a_budget_that_ends_with_a_phase_stops_there_and_resumes_exactly(tmp_path):
    """stop_after_steps equal to the first phase's steps: the invocation ends with that phase (it had run one step of
    the next), and the resumed run ends where an uninterrupted one does."""
    model, phases, cfg = build()
    Trainer(model, phases, cfg, out_dir=tmp_path / "full").fit()
    reference = {k: v.clone() for k, v in model.state_dict().items()}
    model, phases, cfg = build()
    cfg.stop_after_steps = 5
    part = Trainer(model, phases, cfg, out_dir=tmp_path / "run").fit()
    assert part.interrupted and part.steps == 5
    state = ckpt.load_trainer_state(tmp_path / "run" / "last")
    assert (state["phase_idx"], state["phase_step"], state["global_step"]) == (1, 0, 5)
    model, phases, cfg = build()
    assert Trainer(model, phases, cfg, out_dir=tmp_path / "run", resume_from=tmp_path / "run" / "last").fit().steps \
        == 5 + STEPS
    for k, v in model.state_dict().items():
        assert torch.equal(v, reference[k]), k


def _early_stopping(tmp_path, name, **train):
    """One phase of 12 steps whose evaluation (every 2 steps) only gets worse: patience 1 stops it at step 4."""
    torch.manual_seed(0)
    model = TwoHead()
    calls = []

    def evaluate(m):
        calls.append(1)
        return {"score": float(len(calls))}

    cfg = TrainConfig(eval_every=2, early_stop_metric="score", patience=1, progress=False, log_every=3, **train)
    phases = [Phase("only", 12, [Stage([Term(SquaredError("a"), make_stream())])], {"main": OptimSpec(OptimConfig())})]
    return model, Trainer(model, phases, cfg, evaluate=evaluate, out_dir=tmp_path / name)


@pytest.mark.parametrize("train", [{"stop_after_steps": 4}, {"stop_after_steps": 4, "save_every": 2},
                                   {"stop_after_steps": 3, "save_every": 1}])
def test_an_early_stop_is_kept_by_a_resume_from_its_step(tmp_path, train):
    """A checkpoint written at the evaluation that stopped the phase (stop_after_steps / save_every landing there)
    had placed the resume inside the phase, which then went on past the step the uninterrupted run stopped at."""
    model, trainer = _early_stopping(tmp_path, "whole")
    assert trainer.fit().steps == 4
    reference = {k: v.clone() for k, v in model.state_dict().items()}
    lines = [json.loads(x) for x in (tmp_path / "whole" / "metrics.jsonl").read_text().splitlines()]
    assert [x["step"] for x in lines if "mse_a" in x] == [3, 4], "the steps after the last log line are logged too"
    model, trainer = _early_stopping(tmp_path, "part", **train)
    trainer.fit()
    while ckpt.load_trainer_state(tmp_path / "part" / "last")["phase_step"] < 12 and \
            ckpt.load_trainer_state(tmp_path / "part" / "last")["global_step"] < 4:
        model, trainer = _early_stopping(tmp_path, "part", **train)
        trainer.resume_from = tmp_path / "part" / "last"
        trainer.fit()
    model, trainer = _early_stopping(tmp_path, "part", **train)
    trainer.resume_from = tmp_path / "part" / "last"
    assert trainer.fit().steps == 4
    for k, v in model.state_dict().items():
        assert torch.equal(v, reference[k]), k


def test_a_stateful_objective_shared_by_two_phases_restarts_at_the_second_after_a_resume(tmp_path):
    """A checkpoint at the end of the first phase held the shared objective's carried state, which the
    uninterrupted run resets when the next phase starts; the resumed run loaded it back."""
    def phases():
        torch.manual_seed(0)
        shared = SquaredError("a", stateful=True)
        optim = {"main": OptimSpec(OptimConfig(lr=1e-2))}
        return TwoHead(), [Phase("one", 3, [Stage([Term(shared, make_stream(seed=1))])], optim),
                           Phase("two", 3, [Stage([Term(shared, make_stream(seed=2))])], optim)]

    model, ph = phases()
    Trainer(model, ph, TrainConfig(progress=False)).fit()
    reference = {k: v.clone() for k, v in model.state_dict().items()}
    model, ph = phases()
    Trainer(model, ph, TrainConfig(progress=False, stop_after_steps=3), out_dir=tmp_path).fit()
    model, ph = phases()
    Trainer(model, ph, TrainConfig(progress=False), out_dir=tmp_path, resume_from=tmp_path / "last").fit()
    for k, v in model.state_dict().items():
        assert torch.equal(v, reference[k]), k


def test_a_checkpoint_directory_a_kill_left_half_written_is_removed_by_the_next_save(tmp_path, monkeypatch):
    model, phases, cfg = build()

    def dying_save(model, filename):
        Path(filename).write_bytes(b"partial")
        raise KeyboardInterrupt("killed while writing")

    with monkeypatch.context() as m:
        m.setattr(ckpt, "save_model", dying_save)
        with pytest.raises(KeyboardInterrupt):
            ckpt.save_checkpoint(tmp_path / "last", model, {"x": 1})
    # the context manager's cleanup ran here; a kill -9 would not have: leave such a leftover by hand
    (tmp_path / ".last.abcd1234.tmp").mkdir()
    (tmp_path / ".last.abcd1234.tmp" / ckpt.MODEL_FILE).write_bytes(b"partial")
    ckpt.save_checkpoint(tmp_path / "last", model, {"x": 1})
    assert sorted(p.name for p in tmp_path.iterdir()) == ["last"]


def test_a_checkpoint_whose_tracker_has_used_up_its_patience_ends_the_phase_on_resume(tmp_path):
    """Code before 2026-11-28 wrote a checkpoint inside a phase at the evaluation that stopped it early; its tracker
    holds bad_evals = patience. Resumed, the phase ends there (as it did then), not a step later."""
    model, trainer = _early_stopping(tmp_path, "part", stop_after_steps=3)
    trainer.fit()
    state = ckpt.load_trainer_state(tmp_path / "part" / "last")
    assert (state["phase_step"], state["tracker"]["bad_evals"]) == (3, 0)
    state["tracker"]["bad_evals"] = 1                      # patience 1: what the stopping evaluation leaves
    torch.save(state, tmp_path / "part" / "last" / ckpt.STATE_FILE)
    model, trainer = _early_stopping(tmp_path, "part")
    trainer.resume_from = tmp_path / "part" / "last"
    assert trainer.fit().steps == 3
