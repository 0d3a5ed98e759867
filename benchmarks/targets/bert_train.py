"""BERT training from a config (random weights, nothing downloaded): benchmarks/sampled_shares.py's BERT target.

The same small BertConfig as examples/bert_infer.py (hidden 256, 4 layers, 4 heads, intermediate 1024),
BertForSequenceClassification with 2 labels, SGD, batch 8 of 128 tokens.

    python benchmarks/targets/bert_train.py --steps 20
"""

import argparse
import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # never download: the model is built from a config

import torch
from transformers import BertConfig, BertForSequenceClassification

BATCH, SEQ = 8, 128

torch.manual_seed(0)
config = BertConfig(vocab_size=30522, hidden_size=256, num_hidden_layers=4, num_attention_heads=4,
                    intermediate_size=1024, max_position_embeddings=512, num_labels=2)
model = BertForSequenceClassification(config)
optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
input_ids = torch.randint(0, config.vocab_size, (BATCH, SEQ))
attention_mask = torch.ones(BATCH, SEQ, dtype=torch.long)
labels = torch.randint(0, 2, (BATCH,))


def step():
    loss = model(input_ids=input_ids, attention_mask=attention_mask, labels=labels).loss
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    return loss


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=20)
    args = parser.parse_args()
    for _ in range(args.steps):
        loss = step()
    print(f"loss {loss.item():.4f}")
