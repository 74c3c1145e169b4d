"""open_run on a finished study returns exactly the files' values; a checkpoint's hooked model
matches transformers' GPT-J on the same checkpoint."""

import csv
import json

import numpy as np
import pytest

import ropelab


def read_jsonl(path):
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()]


def test_open_run_returns_the_files_values(study):
    run = ropelab.open_run(study, seed=3, task="number")
    assert run.config["task"] == "number" and run.config["seed"] == 3
    metrics = run.metrics()
    lines = read_jsonl(study / "seed-3/number/metrics.jsonl")
    assert len(metrics) == len(lines)
    assert metrics["step"].tolist() == [l["step"] for l in lines]
    val = [(l["step"], l["val"]["accuracy"]) for l in lines if "val" in l]
    got = metrics.dropna(subset=["val.accuracy"])
    assert list(zip(got["step"], got["val.accuracy"])) == val

    scores = run.scores()
    lines = read_jsonl(study / "seed-3/number/scores.jsonl")
    assert len(scores) == len(lines) > 0
    for row, line in zip(scores.to_dict("records"), lines):
        assert (row["step"], row["layer"], row["head"]) == (line["step"], line["layer"], line["head"])
        assert row["s_pos"] == line["s_pos"] and row["s_sym"] == line["s_sym"]
        assert row["pure_0_1"] == line["pure_0_1"]
        assert list(row["freq_use"]) == line["freq_use"]

    lengthgen = run.lengthgen()
    with open(study / "seed-3/number/lengthgen.csv") as f:
        rows = list(csv.DictReader(f))
    assert len(lengthgen) == len(rows) > 0
    assert list(lengthgen.columns) == list(rows[0].keys())
    for col in lengthgen.columns:
        for got, want in zip(lengthgen[col].tolist(), [r[col] for r in rows]):
            assert str(got) == want or float(got) == pytest.approx(float(want), abs=0, rel=1e-15)

    ablation = run.ablation()
    with open(study / "seed-3/number/ablation.csv") as f:
        rows = list(csv.DictReader(f))
    assert len(ablation) == len(rows) > 0
    assert ablation["group"].tolist() == [r["group"] for r in rows]
    assert ablation["heads"].tolist() == [r["heads"] for r in rows]
    assert ablation["correct"].tolist() == [int(r["correct"]) for r in rows]
    assert rows[0]["group"] == "none" and ablation["heads"][0] == ""

    # The study's probe and layer-set stages: the number model's files, read as written.
    sets = run.layer_sets()
    with open(study / "seed-3/number/layer_sets.csv") as f:
        rows = list(csv.DictReader(f))
    assert len(sets) == len(rows) > 0
    assert sets["moving"].tolist() == [r["moving"] for r in rows]
    assert rows[0]["moving"] == "none"
    assert sets["correct"].tolist() == [int(r["correct"]) for r in rows]
    probes = run.probes()
    with open(study / "seed-3/number/probes.csv") as f:
        rows = list(csv.DictReader(f))
    assert len(probes) == len(rows) > 0
    assert probes["unseen"].tolist() == [int(r["unseen"]) for r in rows]

    claims = run.claims()
    with open(study / "claims.json") as f:
        data = json.load(f)
    want = data["claims"] if isinstance(data, dict) and "claims" in data else data
    assert claims["id"].tolist() == [c["id"] for c in want]
    assert claims["verdict"].tolist() == [c["verdict"] for c in want]
    assert run.steps() == sorted({l["step"] for l in lines})


def test_errors_are_one_line_ropelab_errors(tmp_path, study):
    with pytest.raises(ropelab.RopelabError) as e:
        ropelab.open_run(tmp_path / "nothing")
    assert "nothing" in str(e.value) and "\n" not in str(e.value)
    run = ropelab.open_run(study, seed=3, task="number")
    with pytest.raises(ropelab.RopelabError, match="step"):
        run.model(999999)
    model = run.model()
    with pytest.raises(ropelab.RopelabError, match="hook"):
        model.run(np.zeros((1, 4), dtype=np.int64), hooks=["blocks.0.attn.hook_nothing"])
    with pytest.raises(ropelab.RopelabError, match="vocabulary"):
        model.run(np.full((1, 4), 10**6), hooks=[])
    with pytest.raises(ropelab.RopelabError, match="layers"):
        model.run(np.zeros((1, 4), dtype=np.int64), hooks=["blocks.99.attn.hook_q"])


def test_hooked_model_matches_transformers_gptj(study):
    torch = pytest.importorskip("torch")
    from transformers import GPTJForCausalLM

    run = ropelab.open_run(study, seed=3, task="number")
    step = run.steps()[-1]
    ids = np.array(run.samples(4)["ids"].tolist())
    hooks = ["blocks.0.attn.hook_pattern", "blocks.1.attn.hook_q", "blocks.1.hook_resid_pre"]
    logits, cache = run.model(step).run(ids, hooks=hooks)
    c = run.config["model"]
    layers, heads, d = c["n_layers"], c["n_heads"], c["d_model"]
    assert logits.shape == (4, ids.shape[1], c["vocab_size"])
    assert cache["blocks.0.attn.hook_pattern"].shape == (4, heads, ids.shape[1], ids.shape[1])
    assert cache["blocks.1.attn.hook_q"].shape == (4, ids.shape[1], heads, d // heads)
    assert cache["blocks.1.hook_resid_pre"].shape == (4, ids.shape[1], d)

    hf = GPTJForCausalLM.from_pretrained(
        study / f"seed-3/number/checkpoints/step-{step:06d}",
        dtype=torch.float32,
        attn_implementation="eager",
    ).eval()
    with torch.no_grad():
        out = hf(input_ids=torch.tensor(ids), output_attentions=True, output_hidden_states=True)
    assert np.abs(out.logits.numpy() - logits).max() < 1e-4
    assert np.abs(out.hidden_states[1].numpy() - cache["blocks.1.hook_resid_pre"]).max() < 1e-5
    assert layers == len(out.attentions)
    assert np.abs(out.attentions[0].numpy() - cache["blocks.0.attn.hook_pattern"]).max() < 1e-5
