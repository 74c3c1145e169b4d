"""ropelab.tasks: the samples of `ropelab gen` for a seed, validated; broken ones refused."""

import json
import re

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
    assert set(p) == {"prompt", "answer", "question", "size"} and p["size"] == 12
    assert p["prompt"].rstrip().endswith(p["question"].rstrip()) or p["question"] in p["prompt"]
    assert ropelab.tasks.prompt("number", 12, seed=0, index=1) == p
    assert ropelab.tasks.prompt("number", 12, seed=0, index=2) != p
    with pytest.raises(ropelab.RopelabError, match="task"):
        ropelab.tasks.generate("nothing", 3)
    with pytest.raises(ropelab.RopelabError, match="layout"):
        ropelab.tasks.generate("number", 3, layout={"target_window": "x"})


# The languages' membership by regular expression (and PARITY by counting), independent of
# ropelab's predicates.
LANGUAGES = {
    "aa-star": lambda w: re.fullmatch(r"(aa)*", w) is not None,
    "ab-star": lambda w: re.fullmatch(r"(ab)*", w) is not None,
    "a-sigma": lambda w: re.fullmatch(r"a[ab]*", w) is not None,
    "sigma-a": lambda w: re.fullmatch(r"[ab]*a", w) is not None,
    "sigma-ab-sigma": lambda w: re.fullmatch(r"[ab]*ab[ab]*", w) is not None,
    "parity": lambda w: w.count("a") % 2 == 1,
}


@pytest.mark.parametrize("language", sorted(LANGUAGES))
def test_language_samples_are_labelled_by_membership(language):
    df = ropelab.tasks.generate("language", 40, seed=2, split="test", language=language, length=8)
    assert len(df) == 40
    for row in df.to_dict("records"):
        assert row["tokens"][0] == "<bos>" and row["tokens"][-1] == "<eos>"
        w = "".join(row["tokens"][1:-1])
        assert len(w) == 8 and row["label"] == int(LANGUAGES[language](w)), (w, row["label"])
        ropelab.tasks.validate("language", row, language=language, length=8)
    if df["label"].nunique() == 2:
        flipped = dict(df.iloc[0], label=1 - int(df.iloc[0]["label"]))
        with pytest.raises(ropelab.RopelabError, match="label"):
            ropelab.tasks.validate("language", flipped, language=language, length=8)


def test_offset_canonical_and_ambiguous_samples_validate():
    off = ropelab.tasks.generate("offset", 20, seed=1, vocab=10, k=3, length=12)
    for row in off.to_dict("records"):
        assert row["target"] == row["ids"][-4]
        ropelab.tasks.validate("offset", row, vocab=10, k=3)
    with pytest.raises(ropelab.RopelabError, match="target"):
        ropelab.tasks.validate("offset", dict(off.iloc[0], target=(off.iloc[0]["target"] + 1) % 10), vocab=10, k=3)
    for kind in ["index", "retrieval", "partial"]:
        can = ropelab.tasks.generate("canonical", 20, seed=1, kind=kind, len=8)
        for row in can.to_dict("records"):
            assert len(row["ids"]) == 9 and 0 <= row["answer_pos"] < 8
            ropelab.tasks.validate("canonical", row, kind=kind, len=8)
        bad = dict(can.iloc[0], answer_pos=(can.iloc[0]["answer_pos"] + 1) % 8)
        with pytest.raises(ropelab.RopelabError, match="answer"):
            ropelab.tasks.validate("canonical", bad, kind=kind, len=8)
    for kind in ["agree", "conflict"]:
        amb = ropelab.tasks.generate("ambiguous", 20, seed=1, kind=kind)
        for row in amb.to_dict("records"):
            agree = row["positional_answer"] == row["symbolic_answer"]
            assert agree == (kind == "agree")
            ropelab.tasks.validate("ambiguous", row)
    with pytest.raises(ropelab.RopelabError, match="language"):
        ropelab.tasks.generate("language", 3, language="nothing", length=4)
    with pytest.raises(ropelab.RopelabError, match="missing"):
        ropelab.tasks.generate("offset", 3, vocab=10, k=3)
