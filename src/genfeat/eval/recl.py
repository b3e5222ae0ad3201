"""Relative effective context length (RECL; thesis §2.1.4, "Details About RECL").

For a model group M = {m_1..m_N} and per-token losses l_i(c, t) at context length c:

    b(c, t)      = min_i l_i(c, t)                                 baseline of the group
    f_i(c, c')   = 1/|T_r| sum_{t in T_r} min(b(c, t), l_i(c', t))  relative loss
    g_i(c, c')   = (f_i(c, c) - f_i(c, c')) / f_i(c, c)            relative gain

where T_r holds the ceil(r |T|) positions with the largest baseline loss b(c, t) (r = 1: all
tokens; small r: the hard tokens). Only improvements over the best short-context prediction of the
group count, so a model is not credited for gains the others already get with context c.
RECL_i = the largest c of the grid with g_i(c, c + Δ) >= threshold.

Context length c is realised with the memory (:func:`genfeat.eval.lm.token_losses`): segments of
``seg_len`` tokens and a memory of c - seg_len, so every token attends over between c - seg_len + 1
and c positions. That costs one pass over the data per context length (not one per token).

Axes: N models, C context lengths, T tokens.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import torch
from torch import nn

from .lm import token_losses


def relative_losses(losses: np.ndarray, ci: int, cj: int, r: float) -> tuple[float, np.ndarray]:
    """f(c_ci, c_ci) (shared by the group) and f_i(c_ci, c_cj) for every model.

    Args:
        losses: [N, C, T] per-token losses.
        ci, cj: indices of the short context c and the long one c' in the grid.
        r: fraction of hardest tokens (by baseline loss) to average over.
    """
    base = losses[:, ci].min(axis=0)  # [T]
    k = max(1, math.ceil(r * base.size))
    top = np.argpartition(-base, k - 1)[:k] if k < base.size else np.arange(base.size)
    f_short = float(base[top].mean())
    f_long = np.minimum(base[top][None, :], losses[:, cj, top]).mean(axis=1)  # [N]
    return f_short, f_long


def recl_from_losses(losses: np.ndarray, contexts: list[int], r: float = 1.0, delta: int | None = None,
                     threshold: float = 0.01) -> dict:
    """RECL of every model of a group from their per-token losses.

    Args:
        losses: [N, C, T] losses l_i(c, t) for the C context lengths in ``contexts`` (increasing).
        contexts: the grid of context lengths c.
        r: fraction of hardest tokens (default 1.0).
        delta: context step Δ (default: the grid spacing; c + Δ must be on the grid).
        threshold: relative-gain threshold (default 0.01).
    Returns:
        ``recl`` [N] (0 when no step on the grid reaches the threshold), ``gains`` [N, C'] relative
        gains g(c, c + Δ), ``unnormalised`` [N, C'] gains f(c, c) - f(c, c + Δ), and ``starts`` (the c's).
    """
    if list(contexts) != sorted(set(contexts)):
        raise ValueError(f"contexts must be increasing and distinct, got {contexts}")
    index = {c: i for i, c in enumerate(contexts)}
    starts, gains, raw = [], [], []
    for i, c in enumerate(contexts):
        nxt = c + delta if delta is not None else (contexts[i + 1] if i + 1 < len(contexts) else None)
        if nxt is None or nxt not in index:
            continue
        f_short, f_long = relative_losses(losses, i, index[nxt], r)
        starts.append(c)
        raw.append(f_short - f_long)
        gains.append((f_short - f_long) / f_short)
    if not starts:
        raise ValueError("no context c on the grid has c + Δ on the grid")
    gains_arr, raw_arr = np.array(gains).T, np.array(raw).T  # [N, C']
    recl = [max((c for c, g in zip(starts, row) if g >= threshold), default=0) for row in gains_arr]
    return {"recl": recl, "gains": gains_arr, "unnormalised": raw_arr, "starts": starts}


def group_losses(models: dict[str, nn.Module], tokens: torch.Tensor, contexts: list[int], seg_len: int = 16,
                 batch_size: int = 10) -> np.ndarray:
    """[N, C, T] per-token losses of each model with each context length (see module docstring)."""
    out = []
    for model in models.values():
        rows = []
        for c in contexts:
            rows.append(token_losses(model, tokens, c, seg_len=seg_len, batch_size=batch_size).numpy())
        out.append(np.stack(rows))
    return np.stack(out)


def run_recl(models: dict[str, nn.Module], tokens: torch.Tensor, contexts: list[int], r: list[float] | float = 1.0,
             delta: int | None = None, threshold: float = 0.01, out_dir: str | Path = "runs/recl",
             seg_len: int = 16, batch_size: int = 10) -> dict:
    """Score a model group, compute RECL for each r, write the table and plots (Fig. 2.4, 2.5)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from ..io import atomic_path, write_text_atomic

    rs = [r] if isinstance(r, (int, float)) else list(r)
    names = list(models)
    losses = group_losses(models, tokens, contexts, seg_len, batch_size)
    ppl = {n: {c: math.exp(float(losses[i, j].mean())) for j, c in enumerate(contexts)} for i, n in enumerate(names)}
    results, lines = {}, []
    header = f"{'model':<20}" + "".join(f"  r={x:<6g}" for x in rs)
    lines.append(header)
    per_r = {x: recl_from_losses(losses, contexts, x, delta, threshold) for x in rs}
    for i, n in enumerate(names):
        results[n] = {f"r={x:g}": per_r[x]["recl"][i] for x in rs}
        lines.append(f"{n:<20}" + "".join(f"  {per_r[x]['recl'][i]:<8d}" for x in rs))
    table = "\n".join(lines)

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    fig, axes = plt.subplots(1, len(rs), figsize=(5 * len(rs), 3.6), squeeze=False)
    for ax, x in zip(axes[0], rs):
        res = per_r[x]
        for i, n in enumerate(names):
            ax.plot(res["starts"], res["unnormalised"][i], marker="o", label=n)
        ax.set_title(f"unnormalised relative gain, r = {x:g}")
        ax.set_xlabel("context length c")
        ax.set_ylabel("f(c, c) - f(c, c + Δ)")
    axes[0][0].legend()
    fig.tight_layout()
    with atomic_path(out / "relative_gain.png") as tmp:
        fig.savefig(tmp, format="png", dpi=120)
    plt.close(fig)
    fig, ax = plt.subplots(figsize=(5, 3.6))
    for n in names:
        ax.plot(contexts, [ppl[n][c] for c in contexts], marker="o", label=n)
    ax.set_xlabel("context length")
    ax.set_ylabel("perplexity")
    ax.legend()
    fig.tight_layout()
    with atomic_path(out / "ppl_vs_context.png") as tmp:
        fig.savefig(tmp, format="png", dpi=120)
    plt.close(fig)
    write_text_atomic(out / "recl.txt", table + "\n")
    return {"recl": results, "ppl": {n: {str(c): v for c, v in p.items()} for n, p in ppl.items()},
            "contexts": contexts, "threshold": threshold, "delta": delta, "tokens": int(losses.shape[2]),
            "table": table, "plots": [str(out / "relative_gain.png"), str(out / "ppl_vs_context.png")]}
