"""PyTorch's side of minidp-bench-attention: causal scaled_dot_product_attention at the same shapes.

The same contract as minidp's op: qkv (B, T, 3C) in, y (B, T, C) out, heads split and merged by views and
transposes as a PyTorch GPT does; forward, and forward + backward (dqkv). fp32 runs with TF32 off. Median
of timed repetitions, CUDA events; FLOPs counted causal (4 B H T^2 d / 2 forward, 2.5 times that backward).
Prints minidp-bench-attention's columns, so one GPU job prints both tables:

    build/bin/minidp-bench-attention && python3 tools/torch_attention_bench.py
"""
import argparse

import torch
import torch.nn.functional as F

SHAPES = [(8, 12, 1024, 64), (16, 12, 1024, 64), (32, 6, 256, 64)]  # (B, H, T, d), as minidp-bench-attention


def attention(qkv, heads):
    B, T, C3 = qkv.shape
    C = C3 // 3
    q, k, v = (t.view(B, T, heads, C // heads).transpose(1, 2) for t in qkv.split(C, dim=2))
    y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
    return y.transpose(1, 2).contiguous().view(B, T, C)


def median_ms(fn, warmup, repeats):
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(repeats):
        start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        stop.record()
        stop.synchronize()
        times.append(start.elapsed_time(stop))
    return sorted(times)[len(times) // 2]


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--repeats", type=int, default=20)
    args = ap.parse_args()
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    print(f"{torch.cuda.get_device_name()}; torch {torch.__version__}; causal SDPA, median of {args.repeats} runs "
          f"after {args.warmup} warm-up; fp32 without TF32")
    print(f"{'impl':<13} {'dtype':<5} {'B':>3} {'H':>3} {'T':>5} {'d':>3}  {'fwd ms':>9} {'TFLOP/s':>9}  "
          f"{'f+b ms':>9} {'TFLOP/s':>9}  {'y vs mat':>9}")
    for B, H, T, d in SHAPES:
        for dtype, name in ((torch.float32, "fp32"), (torch.bfloat16, "bf16")):
            gen = torch.Generator(device="cuda").manual_seed(1)
            qkv = (torch.rand(B, T, 3 * H * d, device="cuda", generator=gen) * 2 - 1).to(dtype)
            dy = (torch.rand(B, T, H * d, device="cuda", generator=gen) * 2 - 1).to(dtype)
            qkv_grad = qkv.clone().requires_grad_(True)

            def forward():
                with torch.no_grad():
                    attention(qkv, H)

            def forward_backward():
                qkv_grad.grad = None
                attention(qkv_grad, H).backward(dy)

            fwd = median_ms(forward, args.warmup, args.repeats)
            fwd_bwd = median_ms(forward_backward, args.warmup, args.repeats)
            flop = 4.0 * B * H * T * T * d / 2
            print(f"{'torch_sdpa':<13} {name:<5} {B:>3} {H:>3} {T:>5} {d:>3}  {fwd:>9.3f} {flop / (fwd * 1e9):>9.1f}  "
                  f"{fwd_bwd:>9.3f} {3.5 * flop / (fwd_bwd * 1e9):>9.1f}  {'-':>9}")


if __name__ == "__main__":
    main()
