import torch
from transformers import GPT2Config, GPT2LMHeadModel
torch.manual_seed(0)
cfg = GPT2Config(vocab_size=8000, n_embd=256, n_layer=2, n_head=4, n_positions=128)
model = GPT2LMHeadModel(cfg).eval()
ids = torch.randint(0, 8000, (2, 8))

def step():
    with torch.inference_mode():
        return model.generate(ids, max_new_tokens=16, do_sample=False, pad_token_id=0)

if __name__ == "__main__":
    step()
