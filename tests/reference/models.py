"""PyTorch reference definitions of the two minidp models (MLP and GPT).

The C++ side implements exactly these; parameter names and registration order
are part of the contract (checkpoints and fixtures are keyed by them).
Other scripts import this module:

    sys.path.insert(0, "tests/reference"); from models import MLP, GPT

Run it directly to self-check the parameter names/order/shapes:

    python3 tests/reference/models.py
"""
import math

import torch
import torch.nn as nn
import torch.nn.functional as F


class MLP(nn.Module):
    """Linear layers `layers.0`, `layers.1`, ... with ReLU between them (not after the last)."""

    def __init__(self, dims):
        super().__init__()
        self.dims = list(dims)
        self.layers = nn.ModuleList(
            nn.Linear(dims[i], dims[i + 1]) for i in range(len(dims) - 1))

    def forward(self, x, targets=None):
        for i, layer in enumerate(self.layers):
            x = layer(x)
            if i + 1 < len(self.layers):
                x = F.relu(x)
        loss = None if targets is None else F.cross_entropy(x, targets.long())
        return x, loss

    def init_weights(self, std=0.02):
        for layer in self.layers:
            nn.init.normal_(layer.weight, 0.0, std)
            nn.init.zeros_(layer.bias)


class CausalSelfAttention(nn.Module):
    def __init__(self, n_embd, n_head):
        super().__init__()
        assert n_embd % n_head == 0
        self.n_head = n_head
        self.c_attn = nn.Linear(n_embd, 3 * n_embd)
        self.c_proj = nn.Linear(n_embd, n_embd)

    def forward(self, x):
        B, t, C = x.shape
        H = self.n_head
        q, k, v = self.c_attn(x).split(C, dim=2)
        q = q.view(B, t, H, C // H).transpose(1, 2)
        k = k.view(B, t, H, C // H).transpose(1, 2)
        v = v.view(B, t, H, C // H).transpose(1, 2)
        att = (q @ k.transpose(-2, -1)) / math.sqrt(C // H)
        mask = torch.ones(t, t, dtype=torch.bool, device=x.device).triu(1)
        att = att.masked_fill(mask, float("-inf")).softmax(dim=-1)
        y = (att @ v).transpose(1, 2).contiguous().view(B, t, C)
        return self.c_proj(y)


class MLPBlock(nn.Module):
    def __init__(self, n_embd):
        super().__init__()
        self.c_fc = nn.Linear(n_embd, 4 * n_embd)
        self.c_proj = nn.Linear(4 * n_embd, n_embd)

    def forward(self, x):
        return self.c_proj(F.gelu(self.c_fc(x), approximate="tanh"))


class Block(nn.Module):
    def __init__(self, n_embd, n_head):
        super().__init__()
        self.ln_1 = nn.LayerNorm(n_embd, eps=1e-5)
        self.attn = CausalSelfAttention(n_embd, n_head)
        self.ln_2 = nn.LayerNorm(n_embd, eps=1e-5)
        self.mlp = MLPBlock(n_embd)

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


class GPT(nn.Module):
    """GPT-2 style decoder; lm_head has no bias and is NOT tied to wte."""

    def __init__(self, vocab_size, block_size, n_layer, n_head, n_embd):
        super().__init__()
        self.vocab_size, self.block_size = vocab_size, block_size
        self.n_layer, self.n_head, self.n_embd = n_layer, n_head, n_embd
        self.wte = nn.Embedding(vocab_size, n_embd)
        self.wpe = nn.Embedding(block_size, n_embd)
        self.h = nn.ModuleList(Block(n_embd, n_head) for _ in range(n_layer))
        self.ln_f = nn.LayerNorm(n_embd, eps=1e-5)
        self.lm_head = nn.Linear(n_embd, vocab_size, bias=False)

    def forward(self, idx, targets=None):
        B, t = idx.shape
        assert t <= self.block_size
        idx = idx.long()
        pos = torch.arange(t, device=idx.device)
        x = self.wte(idx) + self.wpe(pos)
        for block in self.h:
            x = block(x)
        logits = self.lm_head(self.ln_f(x))
        loss = None
        if targets is not None:
            loss = F.cross_entropy(logits.view(-1, self.vocab_size),
                                   targets.reshape(-1).long())
        return logits, loss

    def init_weights(self, std=0.02):
        proj_std = std / math.sqrt(2 * self.n_layer)
        for name, p in self.named_parameters():
            if name.endswith("c_proj.weight"):
                nn.init.normal_(p, 0.0, proj_std)
            elif "ln_" in name:
                nn.init.ones_(p) if name.endswith("weight") else nn.init.zeros_(p)
            elif name.endswith("bias"):
                nn.init.zeros_(p)
            else:  # Linear weights and embeddings
                nn.init.normal_(p, 0.0, std)


def expected_param_specs(model):
    """(name, shape) list in the contractual registration order."""
    if isinstance(model, MLP):
        d = model.dims
        out = []
        for i in range(len(d) - 1):
            out += [(f"layers.{i}.weight", (d[i + 1], d[i])), (f"layers.{i}.bias", (d[i + 1],))]
        return out
    V, T, C = model.vocab_size, model.block_size, model.n_embd
    out = [("wte.weight", (V, C)), ("wpe.weight", (T, C))]
    for i in range(model.n_layer):
        p = f"h.{i}."
        out += [(p + "ln_1.weight", (C,)), (p + "ln_1.bias", (C,)),
                (p + "attn.c_attn.weight", (3 * C, C)), (p + "attn.c_attn.bias", (3 * C,)),
                (p + "attn.c_proj.weight", (C, C)), (p + "attn.c_proj.bias", (C,)),
                (p + "ln_2.weight", (C,)), (p + "ln_2.bias", (C,)),
                (p + "mlp.c_fc.weight", (4 * C, C)), (p + "mlp.c_fc.bias", (4 * C,)),
                (p + "mlp.c_proj.weight", (C, 4 * C)), (p + "mlp.c_proj.bias", (C,))]
    out += [("ln_f.weight", (C,)), ("ln_f.bias", (C,)), ("lm_head.weight", (V, C))]
    return out


def self_check(model):
    """Assert named_parameters() matches the contract exactly (names, order, shapes)."""
    got = [(n, tuple(p.shape)) for n, p in model.named_parameters()]
    want = expected_param_specs(model)
    assert got == want, f"parameter mismatch:\n got  {got}\n want {want}"


if __name__ == "__main__":
    self_check(MLP([784, 256, 256, 10]))
    self_check(MLP([12, 16, 5]))
    self_check(GPT(64, 16, 2, 4, 32))
    self_check(GPT(50304, 1024, 12, 12, 768))
    print("models.py self-check OK")
