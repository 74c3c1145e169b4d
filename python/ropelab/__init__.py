"""ropelab from Python: the lab's runs as pandas DataFrames, its checkpoints as hooked models,
its tasks, and the exact fast swap scores of any RoPE model's heads.

    import ropelab
    run = ropelab.open_run("runs/number")          # a run directory, or a study + seed/task
    run.scores()                                    # scores.jsonl as a DataFrame
    logits, cache = run.model(run.steps()[-1]).run(tokens, hooks=["blocks.0.attn.hook_pattern"])
    ropelab.swap_scores(q, k, rope=ropelab.Rope(base=10000.0, rotary_dim=64))

The heavy work is ropelab's Rust core (`ropelab._core`); it releases the GIL while it runs.
Errors raise `ropelab.RopelabError` (a `ValueError`) with ropelab's one-line message.
"""

from ._core import RopelabError, __version__
from .run import Run, open_run
from .scores import Rope, swap_scores
from . import tasks

__all__ = ["RopelabError", "Run", "Rope", "open_run", "swap_scores", "tasks", "__version__"]
