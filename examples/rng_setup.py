"""Planted control: an RNG-heavy model setup before a modest, healthy inference loop.

A ranking model in the style of recommender systems: a token table
(nn.EmbeddingBag(30522, 256), averaging a request's tokens), a hashed-feature
table (nn.EmbeddingBag with 2**18 rows of 128) and an MLP of nn.Linear
layers. Building it draws every initial weight from the random number
generator: aten::normal_ for the tables (7.8M and 33.5M values, and the
hashed table again for the explicit nn.init.normal_(std=0.01)), and
aten::uniform_ for the Linear layers (kaiming_uniform_): a one-off setup of
about half a second. Lookups touch few rows, so the tables are huge next to
the per-step work: the steady loop (batch 256: two bag lookups and three
Linear layers under torch.inference_mode, ~10 ms a step) is modest, and a
short run makes the setup look big: aten::normal_ on [262144, 128] is ~15%
of operator time at the default 300 steps.

A good diagnosis must say: the loop's operators (the addmm GEMMs, the
embedding_bag lookups) are what costs, nothing above `low`. It must NOT make
the setup (the nn.EmbeddingBag constructors, the `init.normal_` line) a top
finding, and must NOT give aten::normal_ or aten::uniform_ a roofline
`low_efficiency` verdict (a random number generator is limited by generating
numbers, not by a memory or GEMM roof).

    python examples/rng_setup.py --steps 300
    diagnose examples/rng_setup.py -- --steps 300
"""

import argparse

import torch
import torch.nn as nn

VOCAB, DIM, HASH_ROWS, HASH_DIM = 30522, 256, 2**18, 128
BATCH, TOKENS, FEATURES = 256, 32, 16


class Ranker(nn.Module):
    def __init__(self):
        super().__init__()
        self.tokens = nn.EmbeddingBag(VOCAB, DIM, mode="mean")  # aten::normal_ on [30522, 256]
        self.features = nn.EmbeddingBag(HASH_ROWS, HASH_DIM, mode="sum")  # aten::normal_ on [262144, 128]
        nn.init.normal_(self.features.weight, std=0.01)  # the same again, at a smaller scale
        self.mlp = nn.Sequential(  # aten::uniform_ for each weight and bias
            nn.Linear(DIM + HASH_DIM, 1024),
            nn.ReLU(),
            nn.Linear(1024, 1024),
            nn.ReLU(),
            nn.Linear(1024, 1),
        )

    def forward(self, token_ids, feature_ids):
        h = torch.cat([self.tokens(token_ids), self.features(feature_ids)], dim=1)
        return self.mlp(h).squeeze(1)


torch.manual_seed(0)
model = Ranker().eval()  # the setup: ~75M random values drawn
token_ids = torch.randint(0, VOCAB, (BATCH, TOKENS))
feature_ids = torch.randint(0, HASH_ROWS, (BATCH, FEATURES))


def step():
    with torch.inference_mode():
        return model(token_ids, feature_ids)


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=300)
    args = parser.parse_args()
    for _ in range(args.steps):
        scores = step()
    print(f"scores {tuple(scores.shape)}, mean {scores.mean().item():.4f}")
