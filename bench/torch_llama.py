"""PyTorch reference for `ropelab bench prefill` and `ropelab bench decode`: transformers' Llama
loaded (f32, or bf16 with --dtype bf16) from the same GGUF file, the same text, the same thread count.

Run by hand (not by CI):

    python -m venv .venv && .venv/bin/pip install torch transformers gguf accelerate
    cargo run --release -- pretrained fetch                 # prints the GGUF path
    .venv/bin/python bench/torch_llama.py PATH/TO/SmolLM2-135M-Instruct.Q4_1.gguf --threads 2
    .venv/bin/python bench/torch_llama.py PATH/TO/...gguf --dtype bf16 --no-decode  # bf16 weights
    cargo run --release -- bench prefill --tokens 128
    cargo run --release -- bench decode

Prints `torch prefill: N tokens, T threads: X tokens/s` for each --tokens value (the median of
--repeats no-grad forward passes, logits at the last position only), then `torch decode: P
prompt + N new tokens, T threads: X tokens/s` for greedy `generate` with its KV cache
(prefill included, as `ropelab bench decode` counts it).
"""

import argparse
import os
import statistics
import time

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

# The text `ropelab bench prefill` and `bench decode` tokenize (crates/cli: smollm2_and_text).
TEXT = "The quick brown fox jumps over the lazy dog while the cat sleeps in the sun. " * 512


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("gguf")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--tokens", type=int, nargs="+", default=[128, 1024])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--prompt", type=int, default=128, help="decode: prompt tokens")
    parser.add_argument("--new", type=int, default=128, help="decode: new tokens")
    parser.add_argument("--dtype", choices=["f32", "bf16"], default="f32",
                        help="the weights' and activations' dtype (bf16: oneDNN's bf16 kernels)")
    parser.add_argument("--no-decode", action="store_true", help="prefill only")
    args = parser.parse_args()
    dtype = {"f32": torch.float32, "bf16": torch.bfloat16}[args.dtype]
    torch.set_num_threads(args.threads)
    folder, name = os.path.split(os.path.abspath(args.gguf))
    tokenizer = AutoTokenizer.from_pretrained(folder, gguf_file=name)
    model = AutoModelForCausalLM.from_pretrained(
        folder, gguf_file=name, torch_dtype=torch.float32
    ).to(dtype).eval()
    ids = tokenizer(TEXT, add_special_tokens=False, return_tensors="pt").input_ids
    with torch.inference_mode():
        for n in args.tokens:
            x = ids[:, :n]
            model(x, logits_to_keep=1)  # warm-up
            times = []
            for _ in range(args.repeats):
                start = time.perf_counter()
                model(x, logits_to_keep=1, use_cache=False)
                times.append(time.perf_counter() - start)
            median = statistics.median(times)
            print(f"torch prefill ({args.dtype}): {n} tokens, {args.threads} threads: "
                  f"{n / median:.1f} tokens/s (median of {args.repeats}, {median:.3f} s)")
        if args.no_decode:
            return
        x = ids[:, : args.prompt]
        model.generate(x, max_new_tokens=4, do_sample=False)  # warm-up
        start = time.perf_counter()
        out = model.generate(x, max_new_tokens=args.new, min_new_tokens=args.new,
                             do_sample=False, use_cache=True)
        seconds = time.perf_counter() - start
        new = out.shape[1] - x.shape[1]
        print(f"torch decode: {x.shape[1]} prompt + {new} new tokens, {args.threads} threads: "
              f"{new / seconds:.1f} tokens/s ({seconds:.2f} s, prefill included)")


if __name__ == "__main__":
    main()
