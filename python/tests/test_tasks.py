"""ropelab.tasks: the samples of `ropelab gen` for a seed, validated; broken ones refused."""

import json

import pytest

import ropelab


@pytest.mark.parametrize("task", ["number", "letter"])
def test_generate_equals_ropelab_gen_and_validates(task, tmp_path, run_ropelab):
    out = tmp_path / "gen.jsonl"
    run_ropelab("gen", task, "--n", "25", "--seed", "4", "--split", "val", "--out", out)
    want = [json.loads(l) for l in out.read_text().splitlines()]
    got = ropelab.tasks.generate(task, 25, seed=4, split="val")
    assert got.to_dict("records") == want
    for row in got.to_dict("records"):
        ropelab.tasks.validate(task, row)
    vocab = ropelab.tasks.vocabulary(task)
    assert [vocab[i] for i in want[0]["ids"]] == want[0]["tokens"]
    broken = dict(want[0], answer_id=(want[0]["answer_id"] + 1) % len(vocab))
    with pytest.raises(ropelab.RopelabError) as e:
        ropelab.tasks.validate(task, broken)
    assert "\n" not in str(e.value)


def test_layouts_and_prompts():
    small = ropelab.tasks.generate("letter", 3, layout={"target_window": 8, "pre_window": 8})
    assert all(len(ids) == 17 for ids in small["ids"])
    longer = ropelab.tasks.generate("letter", 3, layout={"target_window": 8, "pre_window": 8}, extra=5)
    assert all(len(ids) == 22 for ids in longer["ids"])
    p = ropelab.tasks.prompt("number", 12, seed=0, index=1)
    assert p["answer"] in p["prompt"] or p["prompt"]
    with pytest.raises(ropelab.RopelabError, match="task"):
        ropelab.tasks.generate("nothing", 3)
    with pytest.raises(ropelab.RopelabError, match="layout"):
        ropelab.tasks.generate("number", 3, layout={"target_window": "x"})
