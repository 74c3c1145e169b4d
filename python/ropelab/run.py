"""A run directory (or one model of a study) as DataFrames and hooked models."""

from __future__ import annotations

import json
import os
from typing import Optional, Sequence

import numpy as np
import pandas as pd

from . import _core
from .scores import Rope


def _jsonl(path: str) -> pd.DataFrame:
    with open(path, encoding="utf-8") as f:
        rows = [json.loads(line) for line in f if line.strip()]
    return pd.json_normalize(rows) if rows else pd.DataFrame()


class Model:
    """A checkpoint's GPT-J with ropelab's hooks (TransformerLens names)."""

    def __init__(self, inner):
        self._inner = inner
        self.config = json.loads(inner.config_json())

    def run(self, tokens, hooks: Sequence[str] = ()):
        """Logits [batch, pos, vocab] of `tokens` [batch, pos] (or one sequence) and a dict of
        the tensors at `hooks` as numpy arrays: `blocks.L.hook_resid_pre`,
        `blocks.L.attn.hook_q` / `hook_k` / `hook_v` / `hook_rot_q` / `hook_rot_k` / `hook_z`
        ([batch, pos, head, d_head], as TransformerLens), `blocks.L.attn.hook_attn_scores` /
        `hook_pattern` ([batch, head, query, key]), `blocks.L.hook_attn_out` /
        `hook_mlp_out` ([batch, pos, d_model])."""
        ids = np.asarray(tokens)
        if ids.ndim == 1:
            ids = ids[None]
        if ids.ndim != 2 or (ids.size and (ids.min() < 0)):
            raise _core.RopelabError(f"tokens must be [batch, pos] of non-negative ids, got {ids.shape}")
        ids = np.ascontiguousarray(ids, dtype=np.uint32)
        return self._inner.run(ids, list(hooks))

    def rope(self, layer: int = 0) -> Optional[Rope]:
        """The rotation of `layer` (None where it has none, or one that plane angles cannot
        state)."""
        r = self._inner.rotation()[layer]
        if r is None:
            return None
        layout, thetas = r
        return Rope(rotary_dim=2 * len(thetas), layout=layout, thetas=thetas)


class Run:
    """A run directory written by `ropelab train` (a study's models are `seed-S/<task>/`)."""

    def __init__(self, path: str):
        self._inner = _core.Run(os.fspath(path))
        self.path = os.fspath(path)
        self.config = json.loads(self._inner.config_json())

    def __repr__(self) -> str:
        return f"ropelab.Run({self.path!r}: {self.config['task']} task, seed {self.config['seed']})"

    def _file(self, name: str, how: str) -> str:
        path = os.path.join(self.path, name)
        if not os.path.isfile(path):
            raise _core.RopelabError(f"{self.path}: {name} is missing ({how})")
        return path

    def steps(self) -> list:
        """Steps of the checkpoints on disk."""
        return self._inner.steps()

    def metrics(self) -> pd.DataFrame:
        """metrics.jsonl: one row per logged step (step, lr, loss, val.accuracy,
        val.per_hop.H, ...)."""
        return _jsonl(self._file("metrics.jsonl", "written by `ropelab train`"))

    def scores(self) -> pd.DataFrame:
        """scores.jsonl: one row per (step, layer, head): s_pos, s_sym, entropy, the head's
        type (pure_0_1, pure_0_05), freq_use, accuracy, ..."""
        return _jsonl(self._file("scores.jsonl", "run `ropelab score --run` first"))

    def lengthgen(self) -> pd.DataFrame:
        """lengthgen.csv: accuracy and the heads' discrepancy on length-extended inputs."""
        return pd.read_csv(self._file("lengthgen.csv", "run `ropelab lengthgen --run` first"))

    def ablation(self) -> pd.DataFrame:
        """ablation.csv (docs/ablation.md): the test accuracy with each group of heads knocked
        out (group, heads, ablation: none / mean / zero, hop: all or the hop count, n, correct,
        accuracy)."""
        return pd.read_csv(
            self._file("ablation.csv", "run `ropelab ablate --run` first"),
            dtype={"heads": str, "hop": str},
            keep_default_na=False,
        )

    def probes(self) -> pd.DataFrame:
        """probes.csv (docs/multihead.md, "Where each hop lives"): one row per linear probe of
        the residual stream (from, stream, target, j, n_train, n_test, unseen, test_samples,
        accuracy, chance, control)."""
        return pd.read_csv(self._file("probes.csv", "run `ropelab probe --run` first"))

    def layer_sets(self) -> pd.DataFrame:
        """layer_sets.csv (docs/multihead.md, "Where each hop lives"): the test accuracy per
        hop count with only some layers moving information (moving, size, hop, n, correct,
        accuracy)."""
        return pd.read_csv(
            self._file("layer_sets.csv", "run `ropelab probe --run` first"),
            dtype={"moving": str},
            keep_default_na=False,
        )

    def claims(self) -> pd.DataFrame:
        """The claims table of the study this run belongs to (its claims.json: id, category
        (empirical or exact_check), paper, threshold, measured, n, holding, failing,
        undetermined, verdict (holds, does_not_hold or undetermined) and reason (what an
        undetermined claim misses))."""
        here = os.path.abspath(self.path)
        for _ in range(3):
            path = os.path.join(here, "claims.json")
            if os.path.isfile(path):
                with open(path, encoding="utf-8") as f:
                    data = json.load(f)
                rows = data["claims"] if isinstance(data, dict) and "claims" in data else data
                return pd.DataFrame(rows)
            here = os.path.dirname(here)
        raise _core.RopelabError(
            f"{self.path}: no claims.json in this run's study (`ropelab reproduce` writes it)"
        )

    def samples(self, n: int, split: str = "test", extra: int = 0) -> pd.DataFrame:
        """Samples 0..n of the run's task and seed; the test split's first n are those
        `ropelab score --samples n` scores."""
        return pd.DataFrame(json.loads(self._inner.samples(n, split, extra)))

    def model(self, step: Optional[int] = None) -> Model:
        """The hooked model of checkpoint `step` (default: the last)."""
        if step is None:
            steps = self.steps()
            if not steps:
                raise _core.RopelabError(f"{self.path}: has no checkpoints")
            step = steps[-1]
        return Model(self._inner.model(int(step)))


def open_run(path: str, seed: Optional[int] = None, task: Optional[str] = None) -> Run:
    """The run in `path`, or with `seed` and `task` the model of that seed and task in the study
    directory `path` (`path/seed-S/<task>/`)."""
    path = os.fspath(path)
    if seed is not None or task is not None:
        if seed is None or task is None:
            raise _core.RopelabError("give both seed and task to open a study's model")
        path = os.path.join(path, f"seed-{int(seed)}", task)
    return Run(path)
