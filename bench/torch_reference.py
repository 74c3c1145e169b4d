"""PyTorch reference for `ropelab bench train`: the same model, batch and optimizer step.

Run by hand (not by CI), with the same thread count as ropelab, e.g. on 2 cores:

    python -m venv .venv && .venv/bin/pip install torch transformers
    .venv/bin/python bench/torch_reference.py --preset paper --threads 2
    cargo run --release -- bench train --preset paper
    # the issue's second shape: 4 layers x 4 heads, 48 random tokens
    .venv/bin/python bench/torch_reference.py --preset paper --layers 4 --heads 4 --seq 48
    cargo run --release -- bench train --preset paper --layers 4 --heads 4 --seq 48

It builds `transformers.GPTJForCausalLM` with the preset's sizes (eager attention, dropout as
in the preset), feeds random batches of the task's shape (batch x 17 tokens), takes the
cross-entropy at the last position, and steps AdamW with the preset's hyper-parameters.
It prints `N steps/s` and ms/step split into forward, backward and optimizer.
"""

import argparse
import time

import torch
from transformers import GPTJConfig, GPTJForCausalLM

PRESETS = {
    # vocab (number task), layers, heads, d_model, d_mlp, rotary_dim, dropout, batch, lr, betas, wd
    "paper": dict(vocab=137, layers=12, heads=1, d=128, mlp=512, rotary=128, dropout=0.1, batch=64,
                  lr=1e-4, betas=(0.95, 0.999), wd=1e-4),
    "quick": dict(vocab=137, layers=6, heads=1, d=64, mlp=256, rotary=64, dropout=0.0, batch=64,
                  lr=1e-3, betas=(0.9, 0.999), wd=1e-4),
}


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--preset", default="paper", choices=sorted(PRESETS))
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--seq", type=int, default=17)
    parser.add_argument("--layers", type=int, help="override the preset's layers")
    parser.add_argument("--heads", type=int, help="override the preset's heads (rotary_dim "
                        "shrinks to d_head if needed, as in ropelab bench train)")
    args = parser.parse_args()
    p = dict(PRESETS[args.preset])
    if args.layers:
        p["layers"] = args.layers
    if args.heads:
        p["heads"] = args.heads
        p["rotary"] = min(p["rotary"], p["d"] // args.heads)
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    config = GPTJConfig(vocab_size=p["vocab"], n_positions=2048, n_embd=p["d"], n_layer=p["layers"],
                        n_head=p["heads"], rotary_dim=p["rotary"], n_inner=p["mlp"],
                        activation_function="gelu", resid_pdrop=p["dropout"], embd_pdrop=p["dropout"],
                        attn_pdrop=p["dropout"], layer_norm_epsilon=1e-5, tie_word_embeddings=False)
    config._attn_implementation = "eager"
    model = GPTJForCausalLM(config).train()
    opt = torch.optim.AdamW(model.parameters(), lr=p["lr"], betas=p["betas"], weight_decay=p["wd"])
    loss_fn = torch.nn.CrossEntropyLoss()
    fwd = bwd = step_t = 0.0
    start = None
    for step in range(args.warmup + args.steps):
        if step == args.warmup:
            fwd = bwd = step_t = 0.0
            start = time.perf_counter()
        ids = torch.randint(1, p["vocab"], (p["batch"], args.seq))
        targets = torch.randint(1, p["vocab"], (p["batch"],))
        t0 = time.perf_counter()
        logits = model(input_ids=ids).logits[:, -1, :]
        loss = loss_fn(logits, targets)
        loss.item()
        t1 = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        loss.backward()
        t2 = time.perf_counter()
        opt.step()
        t3 = time.perf_counter()
        fwd += t1 - t0
        bwd += t2 - t1
        step_t += t3 - t2
    total = time.perf_counter() - start
    n = args.steps
    print(f"torch {torch.__version__}, {args.preset} preset ({p['layers']} layers x {p['heads']} "
          f"heads, d_model {p['d']}), batch {p['batch']}, seq {args.seq}, "
          f"{sum(x.numel() for x in model.parameters())} parameters, {torch.get_num_threads()} threads")
    print(f"{n / total:.3f} steps/s")
    print(f"ms/step: {1e3 * total / n:.1f} total = forward {1e3 * fwd / n:.1f} + backward "
          f"{1e3 * bwd / n:.1f} + optimizer {1e3 * step_t / n:.1f}")


if __name__ == "__main__":
    main()
