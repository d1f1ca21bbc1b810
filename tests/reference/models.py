"""PyTorch reference definitions of the minidp models (MLP, GPT and Llama).

The C++ side implements exactly these; parameter names and registration order
are part of the contract (checkpoints and fixtures are keyed by them).
Other scripts import this module:

    sys.path.insert(0, "tests/reference"); from models import MLP, GPT, Llama

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


class RMSNorm(nn.Module):
    """x * rsqrt(mean(x^2) + eps) * weight over the last dimension (LLaMA's; torch.nn.RMSNorm)."""

    def __init__(self, dim, eps):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight


def rotary(x, theta):
    """Rotate-half rotary embedding of x (B, T, H, d): channels i and i + d/2 at position t turn by
    t / theta^(2i/d), the angles in float64 (as minidp's kernels/rotary_kernels.h) rounded to x's dtype."""
    _, t, _, d = x.shape
    inv_freq = 1.0 / (theta ** (torch.arange(0, d, 2, dtype=torch.float64) / d))
    angles = torch.outer(torch.arange(t, dtype=torch.float64), inv_freq)  # (T, d/2)
    cos = angles.cos().to(x.dtype)[None, :, None, :]
    sin = angles.sin().to(x.dtype)[None, :, None, :]
    x1, x2 = x[..., : d // 2], x[..., d // 2:]
    return torch.cat([x1 * cos - x2 * sin, x2 * cos + x1 * sin], dim=-1)


class LlamaAttention(nn.Module):
    """Grouped-query attention: n_kv_head key/value heads, each shared by n_head / n_kv_head query heads."""

    def __init__(self, n_embd, n_head, n_kv_head, rope_theta):
        super().__init__()
        self.n_head, self.n_kv_head, self.head_dim = n_head, n_kv_head, n_embd // n_head
        self.rope_theta = rope_theta
        self.q_proj = nn.Linear(n_embd, n_head * self.head_dim, bias=False)
        self.k_proj = nn.Linear(n_embd, n_kv_head * self.head_dim, bias=False)
        self.v_proj = nn.Linear(n_embd, n_kv_head * self.head_dim, bias=False)
        self.o_proj = nn.Linear(n_head * self.head_dim, n_embd, bias=False)

    def forward(self, x):
        B, t, _ = x.shape
        H, K, d = self.n_head, self.n_kv_head, self.head_dim
        q = rotary(self.q_proj(x).view(B, t, H, d), self.rope_theta).transpose(1, 2)
        k = rotary(self.k_proj(x).view(B, t, K, d), self.rope_theta).transpose(1, 2)
        v = self.v_proj(x).view(B, t, K, d).transpose(1, 2)
        k = k.repeat_interleave(H // K, dim=1)
        v = v.repeat_interleave(H // K, dim=1)
        att = (q @ k.transpose(-2, -1)) / math.sqrt(d)
        mask = torch.ones(t, t, dtype=torch.bool, device=x.device).triu(1)
        att = att.masked_fill(mask, float("-inf")).softmax(dim=-1)
        y = (att @ v).transpose(1, 2).contiguous().view(B, t, H * d)
        return self.o_proj(y)


class LlamaMLP(nn.Module):
    """SwiGLU: down_proj(silu(gate_proj(x)) * up_proj(x))."""

    def __init__(self, n_embd, hidden):
        super().__init__()
        self.gate_proj = nn.Linear(n_embd, hidden, bias=False)
        self.up_proj = nn.Linear(n_embd, hidden, bias=False)
        self.down_proj = nn.Linear(hidden, n_embd, bias=False)

    def forward(self, x):
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class LlamaDecoderLayer(nn.Module):
    def __init__(self, n_embd, n_head, n_kv_head, hidden, rope_theta, eps):
        super().__init__()
        self.self_attn = LlamaAttention(n_embd, n_head, n_kv_head, rope_theta)
        self.mlp = LlamaMLP(n_embd, hidden)
        self.input_layernorm = RMSNorm(n_embd, eps)
        self.post_attention_layernorm = RMSNorm(n_embd, eps)

    def forward(self, x):
        x = x + self.self_attn(self.input_layernorm(x))
        return x + self.mlp(self.post_attention_layernorm(x))


class LlamaModel(nn.Module):
    def __init__(self, vocab_size, n_layer, n_head, n_kv_head, n_embd, hidden, rope_theta, eps):
        super().__init__()
        self.embed_tokens = nn.Embedding(vocab_size, n_embd)
        self.layers = nn.ModuleList(LlamaDecoderLayer(n_embd, n_head, n_kv_head, hidden, rope_theta, eps)
                                    for _ in range(n_layer))
        self.norm = RMSNorm(n_embd, eps)


class Llama(nn.Module):
    """LLaMA-style decoder under Hugging Face LlamaForCausalLM's parameter names: RMSNorm, rotary embeddings
    (rotate-half form), grouped-query attention, SwiGLU, no biases, lm_head not tied to embed_tokens."""

    def __init__(self, vocab_size, block_size, n_layer, n_head, n_kv_head, n_embd, hidden, rope_theta=10000.0,
                 eps=1e-5):
        super().__init__()
        self.vocab_size, self.block_size = vocab_size, block_size
        self.n_layer, self.n_head, self.n_kv_head, self.n_embd, self.hidden = n_layer, n_head, n_kv_head, n_embd, hidden
        self.model = LlamaModel(vocab_size, n_layer, n_head, n_kv_head, n_embd, hidden, rope_theta, eps)
        self.lm_head = nn.Linear(n_embd, vocab_size, bias=False)

    def forward(self, idx, targets=None):
        assert idx.shape[1] <= self.block_size
        x = self.model.embed_tokens(idx.long())
        for layer in self.model.layers:
            x = layer(x)
        logits = self.lm_head(self.model.norm(x))
        loss = None
        if targets is not None:
            loss = F.cross_entropy(logits.view(-1, self.vocab_size), targets.reshape(-1).long())
        return logits, loss

    def init_weights(self, std=0.02):
        proj_std = std / math.sqrt(2 * self.n_layer)
        for name, p in self.named_parameters():
            if name.endswith("o_proj.weight") or name.endswith("down_proj.weight"):
                nn.init.normal_(p, 0.0, proj_std)
            elif "norm" in name:
                nn.init.ones_(p)
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
    if isinstance(model, Llama):
        V, C, F_, d = model.vocab_size, model.n_embd, model.hidden, model.n_embd // model.n_head
        Q, K = model.n_head * d, model.n_kv_head * d
        out = [("model.embed_tokens.weight", (V, C))]
        for i in range(model.n_layer):
            p = f"model.layers.{i}."
            out += [(p + "self_attn.q_proj.weight", (Q, C)), (p + "self_attn.k_proj.weight", (K, C)),
                    (p + "self_attn.v_proj.weight", (K, C)), (p + "self_attn.o_proj.weight", (C, Q)),
                    (p + "mlp.gate_proj.weight", (F_, C)), (p + "mlp.up_proj.weight", (F_, C)),
                    (p + "mlp.down_proj.weight", (C, F_)),
                    (p + "input_layernorm.weight", (C,)), (p + "post_attention_layernorm.weight", (C,))]
        return out + [("model.norm.weight", (C,)), ("lm_head.weight", (V, C))]
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
    self_check(Llama(64, 16, 2, 4, 2, 32, 48))
    self_check(Llama(32000, 1024, 2, 8, 4, 1024, 2816))
    print("models.py self-check OK")
