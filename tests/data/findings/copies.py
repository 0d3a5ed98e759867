import torch
torch.manual_seed(0)
x = torch.randn(512, 512)
w = torch.randn(512, 512)
out = torch.empty(64, 512)
buf = torch.empty(512, 512)

def step():
    a = x.t().contiguous()          # line 9: layout copy via contiguous
    b = x.clone()                   # line 10: clone
    c = x.to(torch.float64)         # line 11: dtype conversion
    for i in range(64):
        out[i] = x[i]               # line 13: indexed assignment (select + copy_)
    out[:, 1:3] = 0.5               # line 14: slice fill
    idx = torch.arange(0, 64)
    buf[idx] = x[:64]               # line 16: index_put_
    buf.copy_(x)                    # line 17: explicit copy_
    d = x.t().reshape(-1)           # line 18: reshape that copies
    e = x.float()                   # line 19: no-op to
    f = x.t().to(memory_format=torch.contiguous_format)  # line 20
    g = torch.mm(x.t(), w)         # line 21
    return a, b, c, d, e, f, g

if __name__ == "__main__":
    for _ in range(3):
        step()
