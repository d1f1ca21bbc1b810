"""Write the tiny MLP/GPT/Llama gradient fixtures used by the minidp C++ tests.

Each file holds float32 weights (`param.<name>`), one batch (`batch.inputs`,
`batch.targets`, targets int32), and the reference computed in float64 from
exactly those float32 weights: `loss` (float64 [1]) and `grad.<name>` (float64).
The model config is in `__metadata__` as strings. Output is deterministic.

    python3 tests/reference/make_fixtures.py [--out-dir tests/fixtures]
"""
import argparse
import json
import os
import struct
import sys

import torch
from safetensors.torch import save

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from models import GPT, MLP, Llama, self_check  # noqa: E402

SEED = 1234
PERTURB = 0.05  # std of the noise added to biases and LayerNorm/RMSNorm params


def save_deterministic(tensors, path, metadata):
    """safetensors save with a canonical header: the library writes __metadata__
    from a hash map (random key order per process), so re-serialize it sorted."""
    blob = save(tensors, metadata=metadata)
    n = struct.unpack("<Q", blob[:8])[0]
    header = json.loads(blob[8:8 + n])
    header["__metadata__"] = dict(sorted(header["__metadata__"].items()))
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (n - len(text))  # same content, so same length: keep the padding
    assert len(text) == n
    with open(path, "wb") as f:
        f.write(blob[:8] + text + blob[8 + n:])


def perturb_(model, gen):
    """Add small noise to biases and LayerNorm/RMSNorm params so their grads are non-trivial."""
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("bias") or "ln_" in name or "norm" in name:
                p.add_(torch.randn(p.shape, generator=gen) * PERTURB)


def reference(model, inputs, targets):
    """float64 loss and grads from the model's float32 weights."""
    m64 = model.double()
    m64.zero_grad()
    x = inputs.double() if inputs.is_floating_point() else inputs
    _, loss = m64(x, targets)
    loss.backward()
    return loss.detach().reshape(1), {n: p.grad.detach().clone() for n, p in m64.named_parameters()}


def build(model, inputs, targets, meta):
    self_check(model)
    params = {n: p.detach().float().clone() for n, p in model.named_parameters()}
    loss, grads = reference(model, inputs, targets)
    tensors = {f"param.{n}": t for n, t in params.items()}
    tensors["batch.inputs"] = inputs
    tensors["batch.targets"] = targets.int()
    tensors["loss"] = loss
    tensors.update({f"grad.{n}": g for n, g in grads.items()})
    meta = dict(meta)
    meta["param_order"] = ",".join(params)
    meta["torch_version"] = torch.__version__
    meta["note"] = ("weights float32; loss/grads computed in float64 from those weights; "
                    f"seed {SEED}; biases/LayerNorm perturbed by N(0,{PERTURB})")
    return {k: v.contiguous() for k, v in tensors.items()}, {k: str(v) for k, v in meta.items()}


def make_mlp(gen):
    dims, B = [12, 16, 16, 5], 8
    model = MLP(dims)
    torch.manual_seed(SEED)
    model.init_weights()
    perturb_(model, gen)
    inputs = torch.randn(B, dims[0], generator=gen, dtype=torch.float32)
    targets = torch.randint(0, dims[-1], (B,), generator=gen, dtype=torch.int32)
    meta = {"model": "mlp", "dims": ",".join(map(str, dims)), "batch_size": B}
    return build(model, inputs, targets, meta)


def make_gpt(gen):
    V, T, L, H, C, B = 64, 16, 2, 4, 32, 2
    model = GPT(V, T, L, H, C)
    torch.manual_seed(SEED + 1)
    model.init_weights()
    perturb_(model, gen)
    inputs = torch.randint(0, V, (B, T), generator=gen, dtype=torch.int32)
    targets = torch.randint(0, V, (B, T), generator=gen, dtype=torch.int32)
    meta = {"model": "gpt", "vocab_size": V, "block_size": T, "n_layer": L,
            "n_head": H, "n_embd": C, "batch_size": B, "seq_len": T,
            "layernorm_eps": "1e-5", "gelu": "tanh", "tied_lm_head": "false"}
    return build(model, inputs, targets, meta)


def make_llama(gen):
    V, T, L, H, KV, C, F, B, theta, eps = 64, 16, 2, 4, 2, 32, 48, 2, 10000.0, 1e-5
    model = Llama(V, T, L, H, KV, C, F, theta, eps)
    torch.manual_seed(SEED + 2)
    model.init_weights()
    perturb_(model, gen)
    inputs = torch.randint(0, V, (B, T), generator=gen, dtype=torch.int32)
    targets = torch.randint(0, V, (B, T), generator=gen, dtype=torch.int32)
    meta = {"model": "llama", "vocab_size": V, "block_size": T, "n_layer": L, "n_head": H, "n_kv_head": KV,
            "n_embd": C, "hidden": F, "rope_theta": theta, "rms_norm_eps": eps, "batch_size": B, "seq_len": T,
            "rotary": "rotate-half", "tied_lm_head": "false"}
    return build(model, inputs, targets, meta)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    ap.add_argument("--out-dir", default=os.path.join(root, "fixtures"))
    args = ap.parse_args()
    os.makedirs(args.out_dir, exist_ok=True)
    torch.use_deterministic_algorithms(True)
    torch.set_num_threads(1)
    for name, fn in [("mlp_tiny", make_mlp), ("gpt_tiny", make_gpt), ("llama_tiny", make_llama)]:
        gen = torch.Generator().manual_seed(SEED)
        tensors, meta = fn(gen)
        path = os.path.join(args.out_dir, f"{name}.safetensors")
        save_deterministic(tensors, path, meta)
        print(f"{path}: {len(tensors)} tensors, loss={tensors['loss'].item():.10f}, "
              f"{os.path.getsize(path)} bytes")


if __name__ == "__main__":
    main()
