"""Relative effective context length (RECL; thesis §2.1.4, "Details About RECL"; Dai et al. 2019, App. C).

For a model group M = {m_1..m_N} and per-token losses l_i(c, t) = -log P_i(x_t | c previous tokens):

    b(c, t)      = min_i l_i(c, t)                                        baseline of the group
    f_i(c, c')   = 1/|T| sum_{t in T} min(b(c, t), l_i(c', t))             relative loss
    g_i(c, c')   = (exp f_i(c, c) - exp f_i(c, c')) / exp f_i(c, c)        relative gain (perplexity)

for c' >= c, where T holds the top-r positions, ceil(r |T|) of them, with the largest baseline loss
b(c, t) (r = 1: all tokens; small r: the hard tokens). Only losses below the best short-context loss
of the group count, so every model has to improve over the same baseline; f_i(c, c) is the mean of
b(c, t) over T and the same for every model. RECL is found by walking the grid with step Δ
(the paper's algorithm): start at the smallest c, c' = c + Δ; while g_i(c, c') >= threshold (0.01)
move to c = c', c' = c + Δ; RECL_i is the c where the gain first falls below the threshold. When the
gain never falls below it on the grid, RECL_i is the largest c reached, a lower bound.

Figure 3 of the paper plots the unnormalised gain exp f_i(c, c) - exp f_i(c, c') (a perplexity
difference); :func:`run_recl` draws the same.

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

from ..errors import ConfigError
from .lm import token_losses


def check_recl_args(contexts: list[int], rs: list[float], delta: int | None) -> None:
    """Refuse a grid or r the walk cannot use, before any scoring (ConfigError naming the fix).

    The grid must be increasing and distinct, every r in (0, 1], and the smallest context plus Δ
    (default: the next grid point) on the grid, so the walk can take its first step.
    """
    if list(contexts) != sorted(set(contexts)) or not contexts or contexts[0] < 1:
        raise ConfigError(f"context lengths {contexts} are not increasing, distinct and >= 1",
                          "list each context length once, in increasing order")
    if any(not 0 < r <= 1 for r in rs):
        raise ConfigError(f"r {rs}: each r is the fraction of hardest tokens and must be in (0, 1]",
                          "pass e.g. r 0.1 0.5 1")
    nxt = contexts[0] + delta if delta is not None else (contexts[1] if len(contexts) > 1 else None)
    if nxt not in contexts:
        raise ConfigError(f"the smallest context {contexts[0]} + Δ is not on the grid {contexts}",
                          "give at least two context lengths, with c + Δ on the grid")


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
        contexts: the grid of context lengths c; the walk starts at the smallest.
        r: fraction of hardest tokens, in (0, 1] (default 1.0).
        delta: context step Δ (default None: c' is the next grid point, so Δ is the grid spacing);
            c + Δ must be on the grid.
        threshold: relative-gain threshold (default 0.01).
    Returns:
        ``recl`` [N]; ``at_grid_end`` [N], True where the gain never fell below the threshold on the
        grid (RECL is then a lower bound); ``gains`` [N, C'] relative gains g(c, c + Δ) and
        ``unnormalised`` [N, C'] perplexity differences exp f(c, c) - exp f(c, c + Δ) for every c of
        the grid with c + Δ on it; ``starts`` (those c's).
    """
    check_recl_args(contexts, [r], delta)
    if losses.ndim != 3 or losses.shape[1] != len(contexts):
        raise ValueError(f"losses must be [models, {len(contexts)} contexts, tokens], got shape {losses.shape}")
    index = {c: i for i, c in enumerate(contexts)}

    def step(c: int) -> int | None:
        i = index[c]
        nxt = c + delta if delta is not None else (contexts[i + 1] if i + 1 < len(contexts) else None)
        return nxt if nxt in index else None

    starts, gains, raw = [], [], []
    for c in contexts:
        nxt = step(c)
        if nxt is None:
            continue
        f_short, f_long = relative_losses(losses, index[c], index[nxt], r)
        starts.append(c)
        gains.append(-np.expm1(f_long - f_short))  # 1 - exp f(c, c') / exp f(c, c)
        raw.append(math.exp(f_short) - np.exp(f_long))
    gains_arr, raw_arr = np.array(gains).T, np.array(raw).T  # [N, C']
    gain_at = {c: j for j, c in enumerate(starts)}
    recl, at_end = [], []
    for row in gains_arr:
        c = contexts[0]
        while c in gain_at and row[gain_at[c]] >= threshold:
            c = step(c)
        recl.append(c)
        at_end.append(c not in gain_at)
    return {"recl": recl, "at_grid_end": at_end, "gains": gains_arr, "unnormalised": raw_arr, "starts": starts}


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
    check_recl_args(contexts, rs, delta)
    names = list(models)
    losses = group_losses(models, tokens, contexts, seg_len, batch_size)
    ppl = {n: {c: math.exp(float(losses[i, j].mean())) for j, c in enumerate(contexts)} for i, n in enumerate(names)}
    results, lines = {}, []
    header = f"{'model':<20}" + "".join(f"  r={x:<6g}" for x in rs)
    lines.append(header)
    per_r = {x: recl_from_losses(losses, contexts, x, delta, threshold) for x in rs}
    for i, n in enumerate(names):
        results[n] = {f"r={x:g}": per_r[x]["recl"][i] for x in rs}
        cells = [f"{'>=' if per_r[x]['at_grid_end'][i] else ''}{per_r[x]['recl'][i]}" for x in rs]
        lines.append(f"{n:<20}" + "".join(f"  {cell:<8}" for cell in cells))
    if any(any(res["at_grid_end"]) for res in per_r.values()):
        lines.append(">=: the gain never fell below the threshold on the grid; extend --contexts")
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
        ax.set_ylabel("perplexity difference with baseline")
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
    lower_bounds = {n: [f"r={x:g}" for x in rs if per_r[x]["at_grid_end"][i]] for i, n in enumerate(names)}
    return {"recl": results, "recl_lower_bounds": lower_bounds,
            "ppl": {n: {str(c): v for c, v in p.items()} for n, p in ppl.items()},
            "contexts": contexts, "threshold": threshold, "delta": delta, "tokens": int(losses.shape[2]),
            "table": table, "plots": [str(out / "relative_gain.png"), str(out / "ppl_vs_context.png")]}
