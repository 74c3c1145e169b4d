"""PyTorch reference for `ropelab bench train --model formal|toy|gptj`: the model zoo's shapes,
hand-written in eager PyTorch with its best plain tools (one fused q/k/v Linear,
`scaled_dot_product_attention`), the same batches' shapes, loss and optimizer step.

Run by hand (not by CI), with the same thread count as ropelab, e.g. on 2 cores:

    python -m venv .venv && .venv/bin/pip install torch
    .venv/bin/python bench/torch_zoo.py --model formal --threads 2
    RAYON_NUM_THREADS=2 cargo run --release -- bench train --model formal --no-peak
    # the paper preset's shape, f32 and bf16 autocast, beside ropelab's f32 and bf16 products
    .venv/bin/python bench/torch_zoo.py --model paper --threads 2
    .venv/bin/python bench/torch_zoo.py --model paper --threads 2 --autocast bf16
    RAYON_NUM_THREADS=2 cargo run --release -- bench train --preset paper --precision f32,bf16

Shapes (as in crates/cli/src/commands/bench_train.rs):
- formal: 5 GPT-J blocks (LayerNorm, parallel attention and GELU MLP), d_model 64, 8 heads,
  MLP 256, interleaved RoPE on all 8 dims of each head (base 10,000), final LayerNorm, a
  2-class linear classifier read at the last (EOS) position; batch 128; lengths bucketed:
  step s uses 40 - (7 s mod 32) tokens (9..=40), every batch one length, no padding;
- toy: 1 attention-only layer without LayerNorm, d_model 64, 1 head, RoPE on all 64 dims,
  untied unembedding with bias, cross-entropy at every position; batch 256, length 64;
- paper: the paper preset's GPT-J, 12 blocks, d_model 128, 1 head, MLP 512, RoPE on all 128
  dims, vocabulary 137 (the number task), cross-entropy at the last position; batch 64, 17
  tokens (ropelab's preset also has dropout 0.1, which this model leaves out).
`--autocast bf16` runs forward and loss under `torch.autocast("cpu", torch.bfloat16)`: oneDNN's
bf16 matrix products (AMX or AVX512-BF16 where the CPU has them), f32 master weights.
AdamW lr 1e-3, betas (0.9, 0.999), weight decay 1e-4, no dropout. Prints `N steps/s`.
"""

import argparse
import time

import torch
import torch.nn.functional as F
from torch import nn


def rope_tables(seq, dims, base=10_000.0):
    """cos and sin [seq, dims / 2] of pos * base^(-2k / dims), in f64, rounded once."""
    k = torch.arange(dims // 2, dtype=torch.float64)
    freqs = base ** (-2.0 * k / dims)
    angles = torch.arange(seq, dtype=torch.float64)[:, None] * freqs[None, :]
    return angles.cos().float(), angles.sin().float()


def rotate(x, cos, sin):
    """Interleaved (GPT-J) rotation of x [batch, heads, seq, d]: planes (2k, 2k + 1)."""
    x0, x1 = x[..., 0::2], x[..., 1::2]
    return torch.stack((x0 * cos - x1 * sin, x1 * cos + x0 * sin), dim=-1).flatten(-2)


class Attention(nn.Module):
    def __init__(self, d, heads):
        super().__init__()
        self.heads = heads
        self.qkv = nn.Linear(d, 3 * d, bias=False)
        self.out = nn.Linear(d, d, bias=False)

    def forward(self, h, cos, sin):
        b, t, d = h.shape
        q, k, v = self.qkv(h).view(b, t, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4)
        z = F.scaled_dot_product_attention(rotate(q, cos, sin), rotate(k, cos, sin), v,
                                           is_causal=True)
        return self.out(z.transpose(1, 2).reshape(b, t, d))


class Block(nn.Module):
    def __init__(self, d, heads, mlp, layer_norm):
        super().__init__()
        self.ln = nn.LayerNorm(d) if layer_norm else nn.Identity()
        self.attn = Attention(d, heads)
        self.mlp = nn.Sequential(nn.Linear(d, mlp), nn.GELU(), nn.Linear(mlp, d)) if mlp else None

    def forward(self, x, cos, sin):
        h = self.ln(x)
        out = x + self.attn(h, cos, sin)
        return out + self.mlp(h) if self.mlp is not None else out


class Model(nn.Module):
    def __init__(self, vocab, layers, d, heads, mlp, layer_norm, out):
        super().__init__()
        self.heads = heads
        self.wte = nn.Embedding(vocab, d)
        self.blocks = nn.ModuleList(Block(d, heads, mlp, layer_norm) for _ in range(layers))
        self.ln_f = nn.LayerNorm(d) if layer_norm else nn.Identity()
        self.head = nn.Linear(d, out)

    def forward(self, ids, last_only):
        x = self.wte(ids)
        cos, sin = rope_tables(ids.shape[1], x.shape[-1] // self.heads)
        for block in self.blocks:
            x = block(x, cos, sin)
        x = self.ln_f(x)
        return self.head(x[:, -1] if last_only else x)


SHAPES = {
    "formal": dict(vocab=5, layers=5, d=64, heads=8, mlp=256, layer_norm=True, out=2,
                   batch=128, last_only=True),
    "toy": dict(vocab=64, layers=1, d=64, heads=1, mlp=0, layer_norm=False, out=64,
                batch=256, last_only=False),
    "paper": dict(vocab=137, layers=12, d=128, heads=1, mlp=512, layer_norm=True, out=137,
                  batch=64, last_only=True),
}


def seq_of(model, step):
    return {"formal": 40 - (7 * step) % 32, "toy": 64, "paper": 17}[model]


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="formal", choices=sorted(SHAPES))
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--steps", type=int, default=32)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--autocast", choices=["bf16"], help="bf16 autocast of forward and loss")
    args = parser.parse_args()
    p = SHAPES[args.model]
    # One cycle of the formal model's lengths before the clock starts (as ropelab does).
    warmup = max(args.warmup, 32) if args.model == "formal" else args.warmup
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    model = Model(p["vocab"], p["layers"], p["d"], p["heads"], p["mlp"], p["layer_norm"],
                  p["out"]).train()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, betas=(0.9, 0.999), weight_decay=1e-4)
    fwd = bwd = step_t = 0.0
    start = None
    for step in range(1, warmup + args.steps + 1):
        if step == warmup + 1:
            fwd = bwd = step_t = 0.0
            start = time.perf_counter()
        seq = seq_of(args.model, step)
        ids = torch.randint(1, p["vocab"], (p["batch"], seq))
        shape = (p["batch"],) if p["last_only"] else (p["batch"] * seq,)
        targets = torch.randint(0, p["out"], shape)
        t0 = time.perf_counter()
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=args.autocast == "bf16"):
            logits = model(ids, p["last_only"])
            loss = F.cross_entropy(logits.reshape(-1, p["out"]).float(), targets)
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
    print(f"torch {torch.__version__}, {args.model} ({p['layers']} layers x {p['heads']} heads, "
          f"d_model {p['d']}), batch {p['batch']}, "
          f"{sum(x.numel() for x in model.parameters())} parameters, "
          f"{torch.get_num_threads()} threads, {args.autocast or 'f32'}")
    print(f"{n / total:.3f} steps/s")
    print(f"ms/step: {1e3 * total / n:.1f} total = forward {1e3 * fwd / n:.1f} + backward "
          f"{1e3 * bwd / n:.1f} + optimizer {1e3 * step_t / n:.1f}")


if __name__ == "__main__":
    main()
