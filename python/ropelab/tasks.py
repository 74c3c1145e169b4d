"""The tasks: generate and validate samples of the number and letter tasks, their vocabularies
and natural-language prompt versions (the same samples as `ropelab gen` for a seed)."""

from __future__ import annotations

import json
from typing import Optional

import pandas as pd

from . import _core


def _layout(layout: Optional[dict]) -> Optional[str]:
    return None if layout is None else json.dumps(layout)


def generate(
    task: str,
    n: int,
    seed: int = 0,
    split: str = "train",
    extra: int = 0,
    layout: Optional[dict] = None,
) -> pd.DataFrame:
    """Samples 0..n of `task` (`number` or `letter`) for `seed` and `split` (train, val,
    test), with `extra` target-type tokens inserted before the window (length generalisation)
    and `layout` overriding the default layout's fields (`target_window`, `pre_window`, `hops`,
    ...). Columns: index, tokens, ids, answer, answer_id, hops, target_pos."""
    return pd.DataFrame(json.loads(_core.generate(task, n, seed, split, extra, _layout(layout))))


def validate(task: str, sample, layout: Optional[dict] = None) -> None:
    """Checks one sample (a row of `generate`, or a dict with ids, answer_id, hops and
    target_pos) against the task's rules; raises RopelabError naming the first broken one."""
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
