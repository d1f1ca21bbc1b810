"""PyTorch's side of minidp-bench-attention: causal scaled_dot_product_attention at the same shapes.

The same contract as minidp's op: qkv (B, T, (H + 2K) d) in ([q | k | v], K key/value heads, K = H without
grouping), y (B, T, H d) out, heads split and merged by views and transposes as a PyTorch model does;
F.scaled_dot_product_attention(is_causal=True, enable_gqa=True where K < H); forward, and forward + backward
(dqkv). fp32 runs with TF32 off. Median of timed repetitions (CUDA events; the host clock with --device cpu);
FLOPs counted causal (4 B H T^2 d / 2 forward, 2.5 times that backward). Prints minidp-bench-attention's
columns and the backend SDPA picks for each shape, so one GPU job prints both tables:

    build/bin/minidp-bench-attention && python3 tools/torch_attention_bench.py
    python3 tools/torch_attention_bench.py --shapes 2:32:4:2048:64,1:16:2:8192:128 --dtype bf16 --json sdpa.json
"""
import argparse
import json
import os
import sys
import time

import torch
import torch.nn.functional as F

from torch_bench import sdpa_supports_gqa  # noqa: E402 (tools/ is the script's folder)

SHAPES = [(8, 12, 12, 1024, 64), (16, 12, 12, 1024, 64), (32, 6, 6, 256, 64)]  # (B, H, K, T, d), as minidp's
HAS_SDPA = hasattr(F, "scaled_dot_product_attention")
SDPA_GQA = HAS_SDPA and sdpa_supports_gqa()
BACKENDS = {0: "MATH", 1: "FLASH_ATTENTION", 2: "EFFICIENT_ATTENTION", 3: "CUDNN_ATTENTION", 4: "OVERRIDEABLE"}


def split_heads(qkv, H, K):
    """q (B, H, T, d), k and v (B, K, T, d) as views of the packed qkv."""
    B, T, width = qkv.shape
    d = width // (H + 2 * K)
    q, k, v = qkv.split([H * d, K * d, K * d], dim=2)
    return (q.view(B, T, H, d).transpose(1, 2), k.view(B, T, K, d).transpose(1, 2),
            v.view(B, T, K, d).transpose(1, 2))


def attention(qkv, H, K):
    q, k, v = split_heads(qkv, H, K)
    B, _, T, d = q.shape
    if K != H and not SDPA_GQA:  # before PyTorch 2.5: k and v repeated to H heads
        k, v = k.repeat_interleave(H // K, dim=1), v.repeat_interleave(H // K, dim=1)
    if not HAS_SDPA:  # PyTorch 1: the explicit softmax
        att = (q @ k.transpose(-2, -1)) / d ** 0.5
        y = att.masked_fill(torch.ones(T, T, dtype=torch.bool, device=q.device).triu(1), float("-inf")).softmax(-1) @ v
    elif K != H:
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
    else:
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
    return y.transpose(1, 2).contiguous().view(B, T, H * d)


def backend_name(qkv, H, K):
    """The SDPA backend PyTorch picks for these operands (torch._fused_sdp_choice), or why it is not known."""
    if not HAS_SDPA:
        return "explicit softmax (no SDPA)"
    if qkv.device.type != "cuda" or not hasattr(torch, "_fused_sdp_choice"):
        return "cpu" if qkv.device.type == "cpu" else "unknown"
    q, k, v = split_heads(qkv, H, K)
    try:
        index = torch._fused_sdp_choice(q, k, v, None, 0.0, True, **({"enable_gqa": True} if K != H else {}))
    except (RuntimeError, TypeError) as e:
        return f"unknown ({e.__class__.__name__})"
    return BACKENDS.get(index, str(index))


def median_ms(fn, warmup, repeats, device):
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(repeats):
        if device.type == "cuda":
            start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            fn()
            stop.record()
            stop.synchronize()
            times.append(start.elapsed_time(stop))
        else:
            t0 = time.perf_counter()
            fn()
            times.append((time.perf_counter() - t0) * 1e3)
    return sorted(times)[len(times) // 2]


def parse_shapes(text):
    """B:H:K:T:d,... as tuples; exits with status 2 and one line on a bad one."""
    shapes = []
    for item in text.split(","):
        try:
            B, H, K, T, d = (int(v) for v in item.split(":"))
        except ValueError:
            print(f"torch_attention_bench.py: error: --shapes {item!r}: expected B:H:K:T:d, five integers",
                  file=sys.stderr)
            sys.exit(2)
        if min(B, H, K, T, d) <= 0 or H % K:
            print(f"torch_attention_bench.py: error: --shapes {item!r}: sizes must be positive and K divide H",
                  file=sys.stderr)
            sys.exit(2)
        shapes.append((B, H, K, T, d))
    return shapes


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--shapes", help="B:H:K:T:d,... (default: minidp-bench-attention's three GPT shapes)")
    ap.add_argument("--dtype", choices=["fp32", "bf16"], nargs="+", default=["fp32", "bf16"])
    ap.add_argument("--device", choices=["cuda", "cpu"], default="cuda")
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--repeats", type=int, default=20)
    ap.add_argument("--json", help="write the rows here")
    args = ap.parse_args()
    shapes = parse_shapes(args.shapes) if args.shapes else SHAPES
    device = torch.device(args.device)
    if device.type == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = False
        torch.backends.cudnn.allow_tf32 = False
        name = torch.cuda.get_device_name()
    else:
        name = "CPU"
    clock = "CUDA events" if device.type == "cuda" else "host clock"
    print(f"{name}; torch {torch.__version__}; causal SDPA, median of {args.repeats} runs after {args.warmup} "
          f"warm-up ({clock}); fp32 without TF32")
    print(f"{'impl':<13} {'dtype':<5} {'B':>3} {'H':>3} {'K':>3} {'T':>5} {'d':>3}  {'fwd ms':>9} {'TFLOP/s':>9}  "
          f"{'f+b ms':>9} {'TFLOP/s':>9}  {'y vs mat':>9}  backend")
    rows = []
    for B, H, K, T, d in shapes:
        for dtype, dname in ((torch.float32, "fp32"), (torch.bfloat16, "bf16")):
            if dname not in args.dtype:
                continue
            gen = torch.Generator(device=device).manual_seed(1)
            qkv = (torch.rand(B, T, (H + 2 * K) * d, device=device, generator=gen) * 2 - 1).to(dtype)
            dy = (torch.rand(B, T, H * d, device=device, generator=gen) * 2 - 1).to(dtype)
            qkv_grad = qkv.clone().requires_grad_(True)

            def forward():
                with torch.no_grad():
                    attention(qkv, H, K)

            def forward_backward():
                qkv_grad.grad = None
                attention(qkv_grad, H, K).backward(dy)

            fwd = median_ms(forward, args.warmup, args.repeats, device)
            fwd_bwd = median_ms(forward_backward, args.warmup, args.repeats, device)
            flop = 4.0 * B * H * T * T * d / 2
            backend = backend_name(qkv, H, K)
            print(f"{'torch_sdpa':<13} {dname:<5} {B:>3} {H:>3} {K:>3} {T:>5} {d:>3}  {fwd:>9.3f} "
                  f"{flop / (fwd * 1e9):>9.1f}  {fwd_bwd:>9.3f} {3.5 * flop / (fwd_bwd * 1e9):>9.1f}  {'-':>9}  "
                  f"{backend}", flush=True)
            rows.append({"B": B, "H": H, "K": K, "T": T, "d": d, "dtype": dname, "fwd_ms": fwd, "fwd_bwd_ms": fwd_bwd,
                         "fwd_tflops": flop / (fwd * 1e9), "fwd_bwd_tflops": 3.5 * flop / (fwd_bwd * 1e9),
                         "backend": backend})
            del qkv, dy, qkv_grad
    if args.json:
        with open(args.json + ".tmp", "w") as f:
            json.dump({"device": name, "torch_version": torch.__version__, "warmup": args.warmup,
                       "repeats": args.repeats, "rows": rows}, f, indent=2)
        os.replace(args.json + ".tmp", args.json)


if __name__ == "__main__":
    main()
