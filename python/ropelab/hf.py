"""Every head of a Hugging Face transformers model scored through ropelab's Rust core.

The queries and keys are captured with forward hooks on the models' own projection modules
(pure Python, nothing patched): the pre-rotation q and k of every layer, exactly the vectors
the attention rotates. ropelab then applies the model's own RoPE (its `inv_freq`, so scaled
frequencies are the model's) at each position of each swap. Architectures:
LlamaForCausalLM, MistralForCausalLM, Qwen2ForCausalLM (split-halves RoPE, grouped-query
attention), GPTNeoXForCausalLM (fused query_key_value, partial rotary) and GPTJForCausalLM
(interleaved, partial rotary; ropelab's own checkpoints load as one).
"""

from __future__ import annotations

from typing import Optional, Sequence

import numpy as np
import pandas as pd

from . import _core
from .scores import Rope, swap_scores

LLAMA_LIKE = ("LlamaForCausalLM", "MistralForCausalLM", "Qwen2ForCausalLM")


def _arch(model) -> str:
    names = list(getattr(model.config, "architectures", None) or [type(model).__name__])
    name = names[0] if names else type(model).__name__
    if name not in LLAMA_LIKE + ("GPTNeoXForCausalLM", "GPTJForCausalLM"):
        name = type(model).__name__
    return name


def _rope_of(model) -> Rope:
    """The model's RoPE, from its rotary embedding's own frequencies where it has them."""
    arch = _arch(model)
    c = model.config
    if arch == "GPTJForCausalLM":
        if c.rotary_dim is None:
            raise _core.RopelabError("GPT-J with rotary_dim None is not supported")
        return Rope(rotary_dim=int(c.rotary_dim), base=10000.0, layout="interleaved")
    if arch in LLAMA_LIKE:
        emb = model.model.rotary_emb
    elif arch == "GPTNeoXForCausalLM":
        emb = model.gpt_neox.rotary_emb
    else:
        raise _core.RopelabError(
            f"architecture {arch} is not supported ({', '.join(LLAMA_LIKE)}, GPTNeoXForCausalLM, GPTJForCausalLM)"
        )
    scaling = float(getattr(emb, "attention_scaling", 1.0))
    if scaling != 1.0:
        raise _core.RopelabError(
            f"{arch}: a RoPE attention scaling of {scaling} (e.g. YaRN) is not supported"
        )
    inv_freq = emb.inv_freq.detach().double().cpu().numpy()
    return Rope(rotary_dim=2 * len(inv_freq), layout="half_split", thetas=inv_freq.tolist())


def _projections(model):
    """Per layer: (module, how to read q and k from its output), and the head counts."""
    arch = _arch(model)
    c = model.config
    if arch in LLAMA_LIKE:
        heads, kv = c.num_attention_heads, getattr(c, "num_key_value_heads", None) or c.num_attention_heads
        hd = getattr(c, "head_dim", None) or c.hidden_size // heads
        layers = [(l.self_attn.q_proj, l.self_attn.k_proj) for l in model.model.layers]
        return "separate", layers, heads, kv, hd
    if arch == "GPTNeoXForCausalLM":
        heads = c.num_attention_heads
        hd = c.hidden_size // heads
        layers = [(l.attention.query_key_value, None) for l in model.gpt_neox.layers]
        return "fused", layers, heads, heads, hd
    if arch == "GPTJForCausalLM":
        heads = c.n_head
        hd = c.n_embd // heads
        layers = [(l.attn.q_proj, l.attn.k_proj) for l in model.transformer.h]
        return "separate", layers, heads, heads, hd
    raise _core.RopelabError(f"architecture {arch} is not supported")


def capture_qk(model, input_ids, attention_mask=None):
    """One forward of `input_ids` [batch, pos] through `model` (torch), returning the
    pre-rotation queries [layers, batch, heads, pos, head_dim], keys [layers, batch,
    kv_heads, pos, head_dim] (numpy float32) and the model's `Rope`."""
    import torch

    kind, layers, heads, kv, hd = _projections(model)
    outputs = {}
    handles = []

    def keep(key):
        def hook(_module, _inputs, output):
            outputs[key] = output.detach().float().cpu()

        return hook

    try:
        for i, (a, b) in enumerate(layers):
            handles.append(a.register_forward_hook(keep((i, "a"))))
            if b is not None:
                handles.append(b.register_forward_hook(keep((i, "b"))))
        with torch.no_grad():
            model(input_ids=input_ids, attention_mask=attention_mask)
    finally:
        for h in handles:
            h.remove()
    qs, ks = [], []
    for i in range(len(layers)):
        a = outputs[(i, "a")]
        bsz, t = a.shape[0], a.shape[1]
        if kind == "fused":  # [b, t, heads * 3 * hd], per head: q, k, v
            x = a.view(bsz, t, heads, 3 * hd)
            q, k = x[..., :hd], x[..., hd : 2 * hd]
        else:
            q = a.view(bsz, t, heads, hd)
            k = outputs[(i, "b")].view(bsz, t, kv, hd)
        qs.append(q.transpose(1, 2).numpy())
        ks.append(k.transpose(1, 2).numpy())
    return np.stack(qs).astype(np.float32), np.stack(ks).astype(np.float32), _rope_of(model)


def score_heads(
    model,
    tokenizer,
    prompts: Sequence[str],
    *,
    tau: Optional[float] = None,
    blocks: Optional[int] = None,
    planes: bool = False,
    batch_size: int = 8,
) -> pd.DataFrame:
    """Swap scores of every head of a transformers `model` at the last token of each prompt,
    averaged over the prompts (the options of `ropelab score`). Prompts run through the model
    in right-padded batches of `batch_size`; all are scored in one call to the Rust core, each
    at its own last token over its own keys."""
    import torch

    if len(prompts) == 0:
        raise _core.RopelabError("score at least one prompt")
    encoded = [tokenizer(p, add_special_tokens=False)["input_ids"] for p in prompts]
    if any(len(e) < 2 for e in encoded):
        raise _core.RopelabError("every prompt needs at least 2 tokens")
    longest = max(len(e) for e in encoded)
    q_all = k_all = rope = None
    for start in range(0, len(encoded), batch_size):
        chunk = encoded[start : start + batch_size]
        width = max(len(e) for e in chunk)
        ids = torch.zeros((len(chunk), width), dtype=torch.long)
        mask = torch.zeros((len(chunk), width), dtype=torch.long)
        for r, e in enumerate(chunk):
            ids[r, : len(e)] = torch.tensor(e)
            mask[r, : len(e)] = 1
        q, k, rope = capture_qk(model, ids, mask)
        if q_all is None:  # every prompt's q/k in one array, padded to the longest prompt
            shape = lambda x: (x.shape[0], len(encoded), x.shape[2], longest, x.shape[4])
            q_all = np.zeros(shape(q), dtype=np.float32)
            k_all = np.zeros(shape(k), dtype=np.float32)
        q_all[:, start : start + len(chunk), :, :width] = q
        k_all[:, start : start + len(chunk), :, :width] = k
    # Each prompt at its own last token; the padding after it is never read.
    queries = [[len(e) - 1] for e in encoded]
    return swap_scores(
        q_all, k_all, rope, rotated=False, queries=queries, tau=tau, blocks=blocks, planes=planes
    )
