"""The tasks: generate and validate samples of every task, the number and letter tasks' vocabularies
and natural-language prompt versions (the same samples as `ropelab gen` for a seed).

The number and letter tasks take a `layout` (docs/tasks.md). The related papers' tasks take
their sizes as keyword arguments (docs/languages.md, docs/offset.md, docs/canonical.md,
docs/bias.md):

- `language`: `language` (`aa-star`, `ab-star`, `a-sigma`, `sigma-a`, `sigma-ab-sigma`,
  `parity`), `length`, `negatives` (`uniform` or `near-miss`); records: tokens, ids, label;
- `offset`: `vocab`, `k`, `length`; records: ids, target (the token k before the last);
- `canonical`: `kind` (`index`, `retrieval`, `partial`), `len`, `symbols`, `attributes`;
  records: ids, answer, answer_pos;
- `ambiguous`: `letters`, `values`, `items`, `kind` (`agree`, `conflict`, `length` with
  `extra`); records: tokens, ids, positional, symbolic and each rule's answer.
"""

from __future__ import annotations

import json
from typing import Optional

import pandas as pd

from . import _core


def _layout(layout: Optional[dict]) -> Optional[str]:
    return None if layout is None else json.dumps(layout)


MULTI_HOP = ("number", "letter")


def _plain(x):
    """numpy scalars and arrays of a DataFrame row as JSON values."""
    if hasattr(x, "tolist"):
        return x.tolist()
    if isinstance(x, (list, tuple)):
        return [_plain(v) for v in x]
    return x


def generate(
    task: str,
    n: int,
    seed: int = 0,
    split: str = "train",
    extra: int = 0,
    layout: Optional[dict] = None,
    **params,
) -> pd.DataFrame:
    """Samples 0..n of `task` for `seed` and `split` (train, val, test). For `number` and
    `letter`: `extra` target-type tokens inserted before the window (length generalisation),
    `layout` overriding the default layout's fields (`target_window`, `pre_window`, `hops`,
    ...); columns index, tokens, ids, answer, answer_id, hops, target_pos. The other tasks
    take their `params` (see the module's doc)."""
    if task not in MULTI_HOP:
        if extra or layout is not None:
            raise _core.RopelabError(f"the {task} task takes its sizes as parameters, not extra/layout")
        return pd.DataFrame(json.loads(_core.generate_other(task, n, seed, split, json.dumps(params))))
    if params:
        raise _core.RopelabError(f"unknown parameters for the {task} task: {sorted(params)}")
    return pd.DataFrame(json.loads(_core.generate(task, n, seed, split, extra, _layout(layout))))


def validate(task: str, sample, layout: Optional[dict] = None, **params) -> None:
    """Checks one sample (a row of `generate`, or a dict of its fields) against the task's
    rules, recomputing its answer from its tokens; raises RopelabError naming the first broken
    one."""
    if task not in MULTI_HOP:
        record = {k: _plain(v) for k, v in dict(sample).items()}
        _core.validate_other(task, json.dumps(record), json.dumps(params))
        return
    ids = [int(i) for i in sample["ids"]]
    _core.validate(
        task,
        ids,
        int(sample["answer_id"]),
        int(sample["hops"]),
        int(sample["target_pos"]),
        _layout(layout),
    )


def vocabulary(task: str, layout: Optional[dict] = None) -> list:
    """Token strings by id."""
    return _core.vocabulary(task, _layout(layout))


def prompt(task: str, size: int, seed: int = 0, index: int = 0) -> dict:
    """The natural-language 1-hop prompt version (prompt, answer, question, size) that
    `ropelab pretrained` scores."""
    return json.loads(_core.prompt(task, size, seed, index))
