"""Swap scores of captured queries and keys: `ropelab score`'s exact fast path on numpy arrays."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Optional, Sequence

import numpy as np
import pandas as pd

from . import _core


@dataclass(frozen=True)
class Rope:
    """A rotary position encoding: the first `rotary_dim` dims of each head rotate, plane k by
    `thetas[k]` radians per position (default `base ** (-2k / rotary_dim)`), its planes paired
    `interleaved` (dims 2k, 2k+1: GPT-J, GGUF llama) or `half_split` (dims k, k + rotary_dim/2:
    Hugging Face Llama, Qwen2, GPT-NeoX)."""

    rotary_dim: int
    base: float = 10000.0
    layout: str = "half_split"
    thetas: Optional[Sequence[float]] = None

    def angles(self) -> list:
        """Radians per position of each plane."""
        if self.thetas is not None:
            if len(self.thetas) != self.rotary_dim // 2:
                raise _core.RopelabError(
                    f"{len(self.thetas)} plane angles for rotary_dim {self.rotary_dim}"
                )
            return [float(t) for t in self.thetas]
        return _core.rope_frequencies(float(self.base), int(self.rotary_dim))


def _layers(x, name: str) -> np.ndarray:
    a = np.ascontiguousarray(np.asarray(x, dtype=np.float32))
    if a.ndim == 4:  # one layer
        a = a[None]
    if a.ndim != 5:
        raise _core.RopelabError(
            f"{name} must be [layers, batch, heads, pos, head_dim] (or one layer's 4 dims), got {a.shape}"
        )
    return a


def swap_scores(
    q,
    k,
    rope: Optional[Rope],
    *,
    rotated: bool = True,
    queries: Optional[Sequence[Sequence[int]]] = None,
    tau: Optional[float] = None,
    blocks: Optional[int] = None,
    planes: bool = False,
) -> pd.DataFrame:
    """Positional and symbolic swap scores of every head, as `ropelab score` computes them.

    q: [layers, batch, heads, pos, head_dim] queries (or [batch, heads, pos, head_dim] of one
    layer); k: the same with key/value heads (fewer for grouped-query attention: each serves
    heads / kv_heads consecutive query heads). `rotated`: whether RoPE has been applied (as a
    model's attention sees them); the rotation is undone with `rope` to get each position's
    content. `queries[b]`: positions scored in row b (default: the last; a padded batch gives
    each row's own last). Scores are averaged over every (row, query). `tau`: the temperature
    of the swap weights (default `_core.DEFAULT_TAU`, the CLI's and the study's); `blocks`: also score swaps of that many equal blocks; `planes`: also
    score each RoPE plane alone.

    Returns one row per (layer, head): s_pos, s_sym, entropy, pure_0_1, pure_0_05 (the head's
    type at gamma 0.1 and 0.05), freq_use, freq_mean_plane (and block_s_pos, block_s_sym,
    planes when asked).
    """
    qa, ka = _layers(q, "q"), _layers(k, "k")
    layout, thetas = ("half_split", []) if rope is None else (rope.layout, rope.angles())
    if queries is not None:
        queries = [[int(n) for n in row] for row in queries]
    tau = None if tau is None else float(tau)
    text = _core.swap_scores(qa, ka, layout, thetas, rotated, queries, tau, blocks, planes)
    rows = json.loads(text)
    for r in rows:
        block = r.pop("block", None)
        if block is not None:
            r["block_s_pos"], r["block_s_sym"] = block["s_pos"], block["s_sym"]
    return pd.DataFrame(rows)
