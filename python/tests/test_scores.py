"""swap_scores on q/k captured from transformers equals ropelab's own scoring: `ropelab score`
on a study's run (GPT-J from the run's checkpoint) and `ropelab pretrained score` on a tiny
Llama and GPT-NeoX (fixtures/rope_models)."""

import json

import numpy as np
import pytest

import ropelab
from conftest import FIXTURES

torch = pytest.importorskip("torch")


def rotate_interleaved(x, thetas):
    """RoPE by hand (numpy, float64): x [..., pos, hd], planes (2p, 2p + 1) turn by pos * theta_p."""
    x = x.astype(np.float64)
    out = x.copy()
    pos = np.arange(x.shape[-2])[:, None]
    for p, t in enumerate(thetas):
        c, s = np.cos(pos * t)[:, 0], np.sin(pos * t)[:, 0]
        a, b = x[..., 2 * p], x[..., 2 * p + 1]
        out[..., 2 * p] = a * c - b * s
        out[..., 2 * p + 1] = a * s + b * c
    return out.astype(np.float32)


def test_transformers_gptj_on_a_ropelab_checkpoint_scores_as_ropelab_score(study):
    from transformers import GPTJForCausalLM

    from ropelab.hf import capture_qk

    run = ropelab.open_run(study, seed=3, task="number")
    step = run.steps()[-1]
    n = 10  # the study's [score] samples
    ids = torch.tensor(run.samples(n)["ids"].tolist())
    hf = GPTJForCausalLM.from_pretrained(
        study / f"seed-3/number/checkpoints/step-{step:06d}", dtype=torch.float32
    ).eval()
    q, k, rope = capture_qk(hf, ids)
    assert rope.layout == "interleaved" and rope.rotary_dim == hf.config.rotary_dim
    got = ropelab.swap_scores(q, k, rope, rotated=False)
    want = [l for l in run.scores().to_dict("records") if l["step"] == step]
    assert len(got) == len(want) > 0
    worst = 0.0
    for g, w in zip(got.to_dict("records"), want):
        assert (g["layer"], g["head"]) == (w["layer"], w["head"])
        worst = max(worst, abs(g["s_pos"] - w["s_pos"]), abs(g["s_sym"] - w["s_sym"]))
        assert abs(g["entropy"] - w["entropy"]) < 1e-5
    assert worst < 1e-5, worst
    spread = got["s_pos"].max() - got["s_pos"].min() + got["s_sym"].max() - got["s_sym"].min()
    assert spread > 0.05, "the run's heads must differ for the comparison to mean something"
    print(f"transformers GPT-J vs ropelab score: {len(got)} heads within {worst:.1e} (spread {spread:.2f})")
    # The same from rotated q/k (rotated here by hand): the rotation is undone exactly.
    thetas = rope.angles()
    rq, rk = rotate_interleaved(q, thetas), rotate_interleaved(k, thetas)
    again = ropelab.swap_scores(rq, rk, rope, rotated=True)
    assert np.abs(again["s_pos"].to_numpy() - got["s_pos"].to_numpy()).max() < 1e-5
    assert np.abs(again["s_sym"].to_numpy() - got["s_sym"].to_numpy()).max() < 1e-5


@pytest.mark.parametrize("name", ["llama", "gptneox"])
def test_hf_score_heads_equals_ropelab_pretrained_score(name, tmp_path, run_ropelab):
    from transformers import AutoModelForCausalLM, PreTrainedTokenizerFast

    from ropelab.hf import score_heads

    # The prompts (about 240 tokens) are longer than the fixtures' 128-token context, which
    # `ropelab pretrained score` refuses: a copy with a 4,096-token context (RoPE learns no
    # positions, so nothing else changes).
    import shutil

    folder = tmp_path / name
    shutil.copytree(FIXTURES / name, folder)
    config = (folder / "config.json").read_text()
    longer = config.replace('"max_position_embeddings": 128', '"max_position_embeddings": 4096')
    assert longer != config
    (folder / "config.json").write_text(longer)
    out = tmp_path / "scores.jsonl"
    run_ropelab("pretrained", "score", "--model", folder, "--task", "letter", "--n", "3", "--out", out)
    want = [json.loads(l) for l in out.read_text().splitlines()]
    model = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32).eval()
    tokenizer = PreTrainedTokenizerFast(tokenizer_file=str(folder / "tokenizer.json"))
    prompts = [ropelab.tasks.prompt("letter", 16, 0, i)["prompt"] for i in range(3)]
    got = score_heads(model, tokenizer, prompts, batch_size=2)
    assert len(got) == len(want) == 8
    worst = 0.0
    for g, w in zip(got.to_dict("records"), want):
        assert (g["layer"], g["head"]) == (w["layer"], w["head"])
        worst = max(worst, abs(g["s_pos"] - w["s_pos"]), abs(g["s_sym"] - w["s_sym"]))
        assert g["pure_0_1"] == w["pure_0_1"]
    # Two f32 implementations (transformers vs ropelab's candle forward) sum in different
    # orders: attention probabilities differ by f32 rounding, which the swap weights
    # alpha = softmax(|d_i - d_j| / tau), tau = 1e-4, amplify 10^4-fold in their exponents. Most
    # heads agree within 4e-7; a head with near-tied pairs moves by up to 1.2e-5 (measured).
    assert worst < 5e-5, worst
    print(f"{name}: ropelab.hf.score_heads vs ropelab pretrained score within {worst:.1e}")


def test_swap_scores_checks_its_input():
    q = np.zeros((2, 1, 4, 6, 8), dtype=np.float32)
    with pytest.raises(ropelab.RopelabError, match="group"):
        ropelab.swap_scores(q, np.zeros((2, 1, 3, 6, 8)), ropelab.Rope(rotary_dim=8))
    with pytest.raises(ropelab.RopelabError, match="query position"):
        ropelab.swap_scores(q, q, ropelab.Rope(rotary_dim=8), queries=[[6]])
    with pytest.raises(ropelab.RopelabError, match="layers, batch"):
        ropelab.swap_scores(q[0, 0, 0], q[0, 0, 0], ropelab.Rope(rotary_dim=8))
    # A head with equal keys under RoPE is positional (the worked example of docs/metric.md).
    rng = np.random.default_rng(0)
    qh = np.zeros((1, 1, 1, 17, 2), dtype=np.float32)
    qh[..., 0] = 30.0
    kh = np.zeros_like(qh)
    kh[..., 0] = 1.0
    s = ropelab.swap_scores(qh, kh, ropelab.Rope(rotary_dim=2, thetas=[1.0], layout="interleaved"), rotated=False)
    assert s["s_pos"][0] > 0.999 and s["s_sym"][0] < 0.01
    # GQA: two query heads sharing one key head score as two single heads would.
    q2 = rng.standard_normal((1, 1, 2, 9, 4)).astype(np.float32)
    k1 = rng.standard_normal((1, 1, 1, 9, 4)).astype(np.float32)
    rope = ropelab.Rope(rotary_dim=4, base=100.0)
    grouped = ropelab.swap_scores(q2, k1, rope, rotated=False)
    single = ropelab.swap_scores(q2[:, :, 1:], k1, rope, rotated=False)
    assert grouped["s_pos"][1] == single["s_pos"][0]
