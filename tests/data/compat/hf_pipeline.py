"""A transformers pipeline object (text classification) on a BERT built from a config with random weights and a
tokenizer built in memory (tokenizers WordLevel): nothing is downloaded (HF_HUB_OFFLINE=1)."""
import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import torch
from tokenizers import Tokenizer, models, pre_tokenizers
from transformers import (
    BertConfig,
    BertForSequenceClassification,
    PreTrainedTokenizerFast,
    pipeline,
)
from transformers.utils import logging

logging.set_verbosity_error()
STEPS = 6
words = ["the", "a", "model", "runs", "on", "cpu", "fast", "slow", "and", "is", "not", "diagnose", "step", "batch", "token"]
vocab = {w: i for i, w in enumerate(["[PAD]", "[UNK]", "[CLS]", "[SEP]", *words])}
backend = Tokenizer(models.WordLevel(vocab=vocab, unk_token="[UNK]"))
backend.pre_tokenizer = pre_tokenizers.Whitespace()
tokenizer = PreTrainedTokenizerFast(tokenizer_object=backend, pad_token="[PAD]", unk_token="[UNK]",
                                    cls_token="[CLS]", sep_token="[SEP]")
torch.manual_seed(0)
config = BertConfig(vocab_size=len(vocab), hidden_size=128, num_hidden_layers=2, num_attention_heads=2,
                    intermediate_size=256, num_labels=2)
classify = pipeline("text-classification", model=BertForSequenceClassification(config).eval(),
                    tokenizer=tokenizer, device="cpu")
texts = ["the model runs fast on cpu"] * 8
for _ in range(STEPS):
    out = classify(texts, batch_size=8)  # the step
print("pipeline:", len(out), "results, labels from the config:", {o["label"] for o in out} <= {"LABEL_0", "LABEL_1"})
