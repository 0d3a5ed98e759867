"""Real-model gallery: GPT-2 greedy generation (transformers), random weights.

A small GPT2LMHeadModel (vocab 8000, n_embd 256, 4 layers, 4 heads) built
from a config, so nothing is downloaded, generates 32 new tokens greedily
for a batch of 2 prompts of 16 tokens, `--steps` times. Decoding one token
at a time with a KV cache means every layer sees 2 rows per call: each
Linear is a GEMV-like addmm / mm and the lm_head is mm [2,256] x [256,8000]
(8 MB of fp32 weight read to make 2 x 8000 logits), so the time is memory
bandwidth and per-call overhead (Python in generate() and the modules, the
dispatcher), not arithmetic.

A good diagnosis: the lm_head mm (and the layers' addmm) bandwidth-bound on
the roofline (GB/s near the machine's memory bandwidth, far under the GEMM
peak), with "more rows per call" (a larger batch of prompts) as the remedy,
not a "sequential kernel"; generate()'s Python overhead visible per token.

    python examples/gpt2_generate.py --steps 12
    diagnose examples/gpt2_generate.py -- --steps 12
"""

import argparse
import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # never download: the model is built from a config

import torch
from transformers import GPT2Config, GPT2LMHeadModel

BATCH, PROMPT, NEW_TOKENS = 2, 16, 32

torch.manual_seed(0)
config = GPT2Config(
    vocab_size=8000, n_positions=256, n_embd=256, n_layer=4, n_head=4, bos_token_id=7999, eos_token_id=7999
)
model = GPT2LMHeadModel(config).eval()
prompts = torch.randint(0, config.vocab_size, (BATCH, PROMPT))
attention_mask = torch.ones_like(prompts)


def step():
    with torch.no_grad():
        return model.generate(
            input_ids=prompts,
            attention_mask=attention_mask,
            do_sample=False,
            max_new_tokens=NEW_TOKENS,
            min_new_tokens=NEW_TOKENS,  # random weights may pick EOS early; keep the work fixed
            pad_token_id=config.eos_token_id,
        )


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=12)
    args = parser.parse_args()
    for _ in range(args.steps):
        tokens = step()
    print(f"generated {tuple(tokens.shape)}, last tokens {tokens[:, -1].tolist()}")
