"""llama.cpp reference for `ropelab bench prefill` and `bench decode`: prefill tokens/s of the same
GGUF file (its own Q4_1/Q8_0 weights) on the same prompt with the same thread count, then greedy
decoding of --new tokens after a --prompt-token prompt.

Run by hand (not by CI):

    python -m venv .venv && .venv/bin/pip install llama-cpp-python
    cargo run --release -- pretrained fetch                 # prints the GGUF path
    .venv/bin/python bench/llama_cpp_prefill.py PATH/TO/SmolLM2-135M-Instruct.Q4_1.gguf --threads 2
    cargo run --release -- bench prefill
    cargo run --release -- bench decode

If it stops with "Illegal instruction", build it without the native AMX path:
CMAKE_ARGS="-DGGML_NATIVE=OFF -DGGML_AVX512=ON -DGGML_AMX_TILE=OFF" pip install llama-cpp-python.
"""

import argparse
import statistics
import time

import numpy as np

from llama_cpp import Llama

TEXT = "The quick brown fox jumps over the lazy dog while the cat sleeps in the sun. " * 64


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("gguf")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--tokens", type=int, default=128)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--prompt", type=int, default=128, help="decode: prompt tokens")
    parser.add_argument("--new", type=int, default=128, help="decode: new tokens (0: none)")
    args = parser.parse_args()
    llm = Llama(model_path=args.gguf, n_threads=args.threads, n_threads_batch=args.threads,
                n_ctx=2048, n_batch=512, verbose=False)
    tokens = llm.tokenize(TEXT.encode(), add_bos=False, special=False)[: args.tokens]
    llm.reset()
    llm.eval(tokens)  # warm-up
    times = []
    for _ in range(args.repeats):
        llm.reset()
        start = time.perf_counter()
        llm.eval(tokens)
        times.append(time.perf_counter() - start)
    median = statistics.median(times)
    print(f"llama.cpp prefill: {len(tokens)} tokens, {args.threads} threads: "
          f"{len(tokens) / median:.1f} tokens/s (median of {args.repeats}, {median:.3f} s)")
    if args.new > 0:
        # Greedy decoding with its KV cache, prefill included (as `ropelab bench decode`).
        prompt = tokens[: args.prompt]
        llm.reset()
        start = time.perf_counter()
        llm.eval(prompt)
        for _ in range(args.new):
            next_token = int(np.argmax(llm.scores[llm.n_tokens - 1]))
            llm.eval([next_token])
        seconds = time.perf_counter() - start
        print(f"llama.cpp decode: {len(prompt)} prompt + {args.new} new tokens, {args.threads} "
              f"threads: {args.new / seconds:.1f} tokens/s ({seconds:.2f} s, prefill included)")


if __name__ == "__main__":
    main()
