"""Every head of SmolLM2-135M scored from Python: ropelab's fast path (`ropelab.hf.score_heads`:
capture q/k with forward hooks, exact swap scores in the Rust core) against doing the same swaps
in PyTorch by re-running the model's attention on swapped inputs.

Run by hand (not by CI), after `pip install ./python torch transformers gguf accelerate` and
`cargo run --release -- pretrained fetch` (which puts the GGUF in ropelab's cache):

    python bench/python_swap_scores.py [--prompts 10] [--rerun-layers 2] [--threads 2]

The re-run swaps every pair of positions before the query in a layer's input (the residual
stream entering the block), re-runs that layer's norm and attention on the swapped inputs (in
batches of swaps) and reads the query's attention row: the definition of the swap scores, with
nothing precomputed. It takes about a minute per layer and prompt on 2 cores, so it runs on
`--rerun-layers` layers of the first prompt and is extrapolated to every layer of every prompt
by the number of swaps times the prompt's length (printed as such); its scores are checked
against the fast path's on the layers it ran.
"""

import argparse
import os
import time
from pathlib import Path

import numpy as np
import torch

import ropelab
from ropelab.hf import capture_qk, score_heads


def cos2(u, v):
    """Cosine of 2-vectors (ropelab's convention for zero vectors)."""
    nu, nv = np.hypot(*u), np.hypot(*v)
    if nu == 0 and nv == 0:
        return 1.0
    if nu == 0 or nv == 0:
        return 0.0
    return (u[0] / nu) * (v[0] / nv) + (u[1] / nu) * (v[1] / nv)


def scores(before, after, tau):
    """s_pos, s_sym of one head from the swaps' masses (docs/metric.md)."""
    gaps = np.abs(before[:, 0] - before[:, 1]) / tau
    w = np.exp(gaps - gaps.max())
    w /= w.sum()
    s_pos = sum(a * cos2(af, bf) for a, af, bf in zip(w, after, before))
    s_sym = sum(a * cos2(af, bf[::-1]) for a, af, bf in zip(w, after, before))
    return s_pos, s_sym


def rerun_layer(model, layer, hidden, n, batch, tau):
    """Swap scores of every head of `layer` at query n by re-running its attention on every
    swap of two positions before n; hidden: the layer's input [1, pos, d_model]."""
    block = model.model.layers[layer]
    x = hidden[:, : n + 1]
    positions = torch.arange(n + 1)[None]
    cos_sin = model.model.rotary_emb(x, positions)

    def rows(inputs):  # the query's attention row of every head: [swaps, heads, n + 1]
        h = block.input_layernorm(inputs)
        _, weights = block.self_attn(h, position_embeddings=cos_sin, attention_mask=None)
        return weights[:, :, n, :].double().numpy()

    with torch.no_grad():
        original = rows(x)[0]  # [heads, n + 1]
        pairs = [(a, b) for a in range(n) for b in range(a + 1, n)]
        after = np.zeros((len(pairs), original.shape[0], 2))
        for start in range(0, len(pairs), batch):
            chunk = pairs[start : start + batch]
            swapped = x.repeat(len(chunk), 1, 1)
            for r, (a, b) in enumerate(chunk):
                swapped[r, [a, b]] = x[0, [b, a]]
            new = rows(swapped)
            for r, (a, b) in enumerate(chunk):
                after[start + r] = new[r][:, [a, b]]
    idx = np.array(pairs)
    out = []
    for head in range(original.shape[0]):
        before = np.stack([original[head, idx[:, 0]], original[head, idx[:, 1]]], axis=1)
        out.append(scores(before, after[:, head], tau))
    return out


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    cache = Path(os.environ.get("ROPELAB_CACHE", Path.home() / ".cache" / "ropelab"))
    p.add_argument("--gguf", default=str(cache / "SmolLM2-135M-Instruct.Q4_1.gguf"))
    p.add_argument("--prompts", type=int, default=10)
    p.add_argument("--task", default="number")
    p.add_argument("--size", type=int, default=16)
    p.add_argument("--rerun-layers", type=int, default=2)
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--threads", type=int, default=2)
    a = p.parse_args()
    torch.set_num_threads(a.threads)
    from transformers import AutoModelForCausalLM, AutoTokenizer

    folder, name = os.path.split(os.path.abspath(a.gguf))
    tokenizer = AutoTokenizer.from_pretrained(folder, gguf_file=name)
    model = AutoModelForCausalLM.from_pretrained(
        folder, gguf_file=name, dtype=torch.float32, attn_implementation="eager"
    ).eval()
    c = model.config
    prompts = [ropelab.tasks.prompt(a.task, a.size, 0, i)["prompt"] for i in range(a.prompts)]
    lengths = [len(tokenizer(t, add_special_tokens=False)["input_ids"]) for t in prompts]
    print(
        f"SmolLM2-135M: {c.num_hidden_layers} layers x {c.num_attention_heads} heads, "
        f"{a.prompts} {a.task} prompts of {min(lengths)}-{max(lengths)} tokens, {a.threads} threads"
    )

    score_heads(model, tokenizer, prompts[:1])  # warm-up
    t0 = time.perf_counter()
    fast = score_heads(model, tokenizer, prompts)
    t_fast = time.perf_counter() - t0
    ids = torch.tensor([tokenizer(prompts[0], add_special_tokens=False)["input_ids"]])
    t0 = time.perf_counter()
    q, k, rope = capture_qk(model, ids)
    t_capture = time.perf_counter() - t0
    t0 = time.perf_counter()
    one = ropelab.swap_scores(q, k, rope, rotated=False)
    t_rust = time.perf_counter() - t0
    print(
        f"fast path: every head of {a.prompts} prompts in {t_fast:.2f} s "
        f"(one prompt: capture {t_capture:.2f} s, Rust scoring {t_rust:.2f} s)"
    )

    with torch.no_grad():
        hidden = model(input_ids=ids, output_hidden_states=True).hidden_states
    n = ids.shape[1] - 1
    worst = 0.0
    t0 = time.perf_counter()
    for layer in range(a.rerun_layers):
        got = rerun_layer(model, layer, hidden[layer], n, a.batch, 1e-4)
        for head, (sp, ss) in enumerate(got):
            row = one[(one["layer"] == layer) & (one["head"] == head)].iloc[0]
            worst = max(worst, abs(sp - row.s_pos), abs(ss - row.s_sym))
    t_rerun = time.perf_counter() - t0
    per_layer = t_rerun / a.rerun_layers
    # Cost grows with the swaps (n^2 / 2) times the tokens each re-run reads (n).
    cost = lambda L: (L - 1) * (L - 2) / 2 * L
    total = per_layer * c.num_hidden_layers * sum(cost(L) for L in lengths) / cost(lengths[0])
    print(
        f"PyTorch re-run: {n * (n - 1) // 2} swaps per layer of prompt 0, {per_layer:.1f} s per layer "
        f"(measured on {a.rerun_layers} layers); every head of {a.prompts} prompts: about "
        f"{total:.0f} s extrapolated, {total / t_fast:.0f}x the fast path; its scores agree "
        f"with the fast path's within {worst:.1e}"
    )


if __name__ == "__main__":
    main()
