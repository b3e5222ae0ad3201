"""The optimizer step of the training loop: gradient accumulation, clipping, TensorBoard logging, and the
logging of a loss made of parts."""

import json

import pytest
import torch

from genfeat.framework import OptimConfig, Term, TrainConfig, Trainer, joint, one_phase
from genfeat.framework.objective import LossOutput

from _framework_fixtures import SquaredError, TwoHead, make_stream

SGD = OptimConfig(name="sgd", lr=1.0)


def one_sgd_step(batch_size: int, terms=(("a", 1.0),), threshold=None, **cfg) -> dict[str, torch.Tensor]:
    """The parameter change of one SGD step (lr 1, so minus the gradient) from a seeded model, on the
    weighted sum of squared errors of ``terms`` (head, weight), each on its own stream."""
    torch.manual_seed(0)
    model = TwoHead()
    before = {k: p.detach().clone() for k, p in model.named_parameters()}
    stage = [Term(SquaredError(head, threshold=threshold), make_stream(batch_size=batch_size, seed=i), weight)
             for i, (head, weight) in enumerate(terms)]
    Trainer(model, joint(stage, 1, SGD), TrainConfig(progress=False, **cfg)).fit()
    return {k: p.detach() - before[k] for k, p in model.named_parameters()}


def norm(delta: dict[str, torch.Tensor]) -> torch.Tensor:
    return torch.linalg.vector_norm(torch.cat([d.flatten() for d in delta.values()]))


def test_two_accumulated_half_batches_step_like_one_full_batch():
    # The stream's order does not depend on the batch size, so the two halves are the full batch.
    full = one_sgd_step(16)
    accumulated = one_sgd_step(8, grad_accum=2)
    assert norm(full) > 0
    for k in full:
        torch.testing.assert_close(accumulated[k], full[k], rtol=1e-5, atol=1e-7)


@pytest.mark.parametrize("terms", [(("a", 1.0),), (("a", 1.0), ("b", 0.25))], ids=["one-term", "two-terms"])
def test_accumulation_weights_every_item_equally_when_micro_batches_have_unequal_counts(terms):
    """Token weighting: the step's loss is each term's loss sum over its micro-batches divided by their
    total count, so halves with 5 and 4 scored items (3 and 5 for the second term) step like the full batch,
    not like the mean of the two halves' means."""
    for i in range(len(terms)):
        stream = make_stream(batch_size=8, seed=i)
        counts = [int((next(stream)["x"][:, 0] > 0).sum()) for _ in range(2)]
        assert counts[0] != counts[1] and min(counts) > 0, counts
    full = one_sgd_step(16, terms, threshold=0.0)
    accumulated = one_sgd_step(8, terms, threshold=0.0, grad_accum=2)
    assert norm(full) > 0
    for k in full:
        torch.testing.assert_close(accumulated[k], full[k], rtol=1e-5, atol=1e-7)


def test_clip_norm_shortens_the_step_to_the_clip_in_the_same_direction():
    free = one_sgd_step(16)
    clipped = one_sgd_step(16, clip_norm=1e-3)
    assert norm(free) > 100 * 1e-3
    torch.testing.assert_close(norm(clipped), torch.tensor(1e-3), rtol=1e-3, atol=0)
    scale = 1e-3 / norm(free)
    for k in free:  # atol: the fp32 rounding of a parameter near 1 minus a step near 1e-4
        torch.testing.assert_close(clipped[k], free[k] * scale, rtol=1e-4, atol=1e-7)


def test_tensorboard_scalars_match_the_metrics_log(tmp_path):
    pytest.importorskip("tensorboard", reason="the optional tensorboard package is not installed")
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    for lr in (1.0, 1e-2):  # a second, fresh run into the same directory hides the first one's events
        torch.manual_seed(0)
        Trainer(TwoHead(), one_phase(SquaredError("a"), make_stream(), 3, OptimConfig(lr=lr)),
                TrainConfig(progress=False, log_every=1, tensorboard=True), out_dir=tmp_path).fit()
    logged = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    events = EventAccumulator(str(tmp_path / "tensorboard"))
    events.Reload()
    scalars = events.Scalars("mse_a")
    assert [e.step for e in scalars] == [r["step"] for r in logged] == [1, 2, 3]
    assert [e.value for e in scalars] == pytest.approx([r["mse_a"] for r in logged], rel=1e-6)


class TwoParts(SquaredError):
    """Head a's squared error over all items plus head b's over the thresholded ones, as one loss with
    two logged parts (like GPT-1's L2 + λ·L1 on one batch); keeps the parts it returned."""

    def __init__(self):
        super().__init__("a", name="both")
        self.returned: list[dict[str, LossOutput]] = []

    def __call__(self, model, batch) -> LossOutput:
        a = SquaredError("a")(model, batch)
        b = SquaredError("b", threshold=0.0)(model, batch)
        self.returned.append({"a": a, "b": b})
        return LossOutput(a.loss_sum + b.loss_sum * (a.count / b.count), a.count, parts={"a": a, "b": b})


def test_parts_are_logged_under_their_names_each_per_its_own_items(tmp_path):
    torch.manual_seed(0)
    objective = TwoParts()
    Trainer(TwoHead(), one_phase(objective, make_stream(batch_size=8), 2, SGD),
            TrainConfig(progress=False, log_every=2), out_dir=tmp_path).fit()
    (record,) = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    counts = [(r["a"].count, r["b"].count) for r in objective.returned]
    assert counts[0][1] != counts[1][1] and all(a != b for a, b in counts), "b's items differ from a's and per step"
    for name in ("a", "b"):
        sums = [float(r[name].loss_sum.detach()) for r in objective.returned]
        n = [r[name].count for r in objective.returned]
        assert record[name] == pytest.approx(sum(sums) / sum(n), rel=1e-6)
        assert record[f"{name}/sq"] == pytest.approx(sum(sums) / sum(n), rel=1e-6)
    assert "both" not in record


def test_a_loss_that_becomes_nan_stops_the_run_with_one_error(tmp_path):
    """From the step a loss is NaN every later figure is of a broken model: the run stops at that log line with a
    DivergenceError naming the loss and the step (the line itself is logged), and does not finish."""
    from genfeat.errors import DivergenceError

    class GoesNaN(SquaredError):
        def __call__(self, model, batch):
            out = super().__call__(model, batch)
            return LossOutput(out.loss_sum * float("nan"), out.count, out.logs) if self.calls >= 5 else out

    torch.manual_seed(0)
    with pytest.raises(DivergenceError, match=r"the mse_a loss is nan over the 2 steps logged at step 6.*fix: lower"):
        Trainer(TwoHead(), one_phase(GoesNaN(), make_stream(batch_size=8), 10, OptimConfig(name="sgd", lr=0.1)),
                TrainConfig(progress=False, log_every=2), out_dir=tmp_path).fit()
    logged = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in logged] == [2, 4, 6] and logged[-1]["mse_a"] is None     # NaN, as standard JSON


def test_a_diverged_model_is_never_checkpointed(tmp_path):
    """Checkpoints come more often than log lines: a NaN loss since the last log line, or NaN weights, stop the run
    at the save instead, and OUT/last keeps the last finite model (a resume from a NaN one could only diverge)."""
    from genfeat.errors import DivergenceError
    from genfeat.framework.checkpoint import load_trainer_state

    class GoesNaN(SquaredError):
        def __call__(self, model, batch):
            out = super().__call__(model, batch)
            return LossOutput(out.loss_sum * float("nan"), out.count, out.logs) if self.calls >= 5 else out

    torch.manual_seed(0)
    with pytest.raises(DivergenceError, match=r"the mse_a loss became NaN or infinite by step 5, so that checkpoint "
                                              r"was not written. fix: lower optim.lr.*--overwrite"):
        Trainer(TwoHead(), one_phase(GoesNaN(), make_stream(batch_size=8), 10, OptimConfig(name="sgd", lr=0.1)),
                TrainConfig(progress=False, log_every=8, save_every=1), out_dir=tmp_path / "loss").fit()
    assert load_trainer_state(tmp_path / "loss" / "last")["global_step"] == 4

    model = TwoHead()

    def poison(step):
        if step == 3:
            with torch.no_grad():
                next(model.parameters())[0] = float("inf")

    with pytest.raises(DivergenceError, match="the model's weights became NaN or infinite by step 3"):
        Trainer(model, one_phase(SquaredError(), make_stream(batch_size=8), 10, OptimConfig(name="sgd", lr=0.1)),
                TrainConfig(progress=False, log_every=8, save_every=1), out_dir=tmp_path / "weights",
                after_step=poison).fit()
    assert load_trainer_state(tmp_path / "weights" / "last")["global_step"] == 2
