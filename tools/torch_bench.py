"""PyTorch side-by-side benchmark for minidp: the same MLP/GPT, same step, timed the same way.

One training step = forward + loss + backward + gradient all-reduce + optimizer step,
on random tokens (generated once, before timing) or windows of an llm.c token file (--data). Each config
(--dtype x --compile) is one set of runs; per bucket size it
alternates overlap "off" and "on" runs (as minidp does), excluding warmup steps:
  on:  DDP(bucket_cap_mb=bucket) - all-reduce overlapped with backward.
  off: backward under ddp.no_sync(), then the grads are packed into buckets of
       bucket_mb (reverse parameter order), all-reduced (SUM, then /world) and
       copied back - same communication volume, no overlap.
  --grad-comm bf16: DDP with bf16_compress_hook (on), the buckets /world, cast to
       bf16, summed and cast back (off) - minidp's --grad-comm bf16.
World size 1: plain model, no communication; one row (overlap "off").
Step time of a step = max over ranks; reported median/p90 in ms, tokens/s, peak GPU memory
(torch.cuda.max_memory_allocated) and, for the GPT on CUDA, MFU against the bf16 GEMM rate measured in
this process (an 8192^3 bf16 matmul).

    python3 tools/torch_bench.py --model gpt --layers 2 --embd 64 --device cpu --steps 5
    python3 tools/torch_bench.py --model gpt --dtype bf16 --compile off on --attention sdpa --batch-size 8 \
        --bucket-mb 25 --json torch_gpt2.json    # GPT-2 small (defaults), eager and compiled
    python3 tools/torch_bench.py --model llama --layers 12 --embd 1024 --heads 8 --kv-heads 4 --hidden 2816 \
        --vocab 32000 --dtype bf16 --compile off on --attention sdpa    # minidp's llama model, HF names
    torchrun --nproc_per_node 8 tools/torch_bench.py --model gpt --bucket-mb 1 25 --json out.json
    mpirun -np 2 python3 tools/torch_bench.py --model mlp --device cpu   # gloo
"""
import argparse
import gc
import itertools
import json
import os
import statistics
import sys
import time

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "reference"))
from models import GPT, MLP, CausalSelfAttention, Llama, LlamaAttention  # noqa: E402

import torch.nn.functional as F  # noqa: E402

GEMM_CEILING_N = 8192  # the bf16 matmul whose rate MFU is measured against


def parse_args():
    ap = argparse.ArgumentParser(description="PyTorch DDP benchmark matching minidp")
    ap.add_argument("--model", choices=["mlp", "gpt", "llama"], default="mlp")
    ap.add_argument("--dims", default="784,256,256,10", help="MLP layer sizes")
    ap.add_argument("--layers", type=int, default=12)
    ap.add_argument("--heads", type=int, default=12)
    ap.add_argument("--embd", type=int, default=768)
    ap.add_argument("--kv-heads", type=int, default=4, help="llama: key/value heads")
    ap.add_argument("--hidden", type=int, default=2816, help="llama: SwiGLU width")
    ap.add_argument("--rope-theta", type=float, default=10000.0, help="llama: rotary base")
    ap.add_argument("--context", type=int, default=1024)
    ap.add_argument("--vocab", type=int, default=50257, help="random-token vocabulary (GPT-2: 50257)")
    ap.add_argument("--data", help="llm.c token file (.bin, uint16 tokens) to draw the batches from")
    ap.add_argument("--batch-size", type=int, default=8, help="per rank")
    ap.add_argument("--bucket-mb", type=float, nargs="+", default=[25.0])
    ap.add_argument("--steps", type=int, default=20, help="timed steps per run")
    ap.add_argument("--warmup", type=int, default=5, help="untimed steps per run")
    ap.add_argument("--dtype", choices=["fp32", "bf16"], nargs="+", default=["fp32"],
                    help="fp32; bf16 = autocast bf16 (fp32 master weights) with TF32 for the rest")
    ap.add_argument("--tf32", action="store_true", help="allow TF32 matmuls in fp32 runs")
    ap.add_argument("--compile", choices=["off", "on"], nargs="*", default=["off"],
                    help="torch.compile the model; alone means on, 'off on' runs both")
    ap.add_argument("--attention", choices=["explicit", "sdpa"], default="explicit",
                    help="explicit (B,H,T,T) softmax as tests/reference/models.py, or "
                         "F.scaled_dot_product_attention (flash)")
    ap.add_argument("--optimizer", choices=["adamw", "sgd"], default="adamw")
    ap.add_argument("--lr", type=float, default=3e-4)
    ap.add_argument("--device", choices=["cuda", "cpu"], default="cuda")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--grad-comm", choices=["fp32", "bf16"], default="fp32",
                    help="gradients on the wire; bf16: DDP's bf16_compress_hook")
    ap.add_argument("--json", help="write results here (rank 0)")
    args = ap.parse_args()
    args.compile = args.compile or ["on"]
    return args


def dist_env():
    """(rank, world, local_rank) from torchrun, OpenMPI or Slurm's srun environment variables."""
    env = os.environ
    rank = int(env.get("RANK", env.get("OMPI_COMM_WORLD_RANK", env.get("SLURM_PROCID", 0))))
    world = int(env.get("WORLD_SIZE", env.get("OMPI_COMM_WORLD_SIZE", env.get("SLURM_STEP_NUM_TASKS", 1))))
    local = int(env.get("LOCAL_RANK", env.get("OMPI_COMM_WORLD_LOCAL_RANK", env.get("SLURM_LOCALID", 0))))
    return rank, world, local


def build_model(args, device):
    torch.manual_seed(args.seed)
    if args.model == "mlp":
        model = MLP([int(d) for d in args.dims.split(",")])
    elif args.model == "llama":
        model = Llama(args.vocab, args.context, args.layers, args.heads, args.kv_heads, args.embd, args.hidden,
                      args.rope_theta)
        if args.attention == "sdpa":
            for layer in model.model.layers:
                layer.self_attn.__class__ = SdpaLlamaAttention
    else:
        model = GPT(args.vocab, args.context, args.layers, args.heads, args.embd)
        if args.attention == "sdpa":
            for block in model.h:
                block.attn.__class__ = SdpaCausalSelfAttention
    model.init_weights()
    return model.to(device)


class SdpaCausalSelfAttention(CausalSelfAttention):
    """The same parameters and math through F.scaled_dot_product_attention: no (B,H,T,T) buffer."""

    def forward(self, x):
        B, t, C = x.shape
        q, k, v = (z.view(B, t, self.n_head, C // self.n_head).transpose(1, 2)
                   for z in self.c_attn(x).split(C, dim=2))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.c_proj(y.transpose(1, 2).contiguous().view(B, t, C))


class SdpaLlamaAttention(LlamaAttention):
    """The same parameters and math through F.scaled_dot_product_attention with grouped-query heads
    (enable_gqa), the rotary tables computed in fp32 each forward (as Hugging Face's LlamaRotaryEmbedding),
    the rotation in the activations' dtype."""

    def forward(self, x):
        B, t, _ = x.shape
        H, K, d = self.n_head, self.n_kv_head, self.head_dim
        inv_freq = 1.0 / (self.rope_theta ** (torch.arange(0, d, 2, device=x.device, dtype=torch.float32) / d))
        angles = torch.outer(torch.arange(t, device=x.device, dtype=torch.float32), inv_freq)
        q, k, v = self.q_proj(x), self.k_proj(x), self.v_proj(x)
        cos, sin = angles.cos().to(q.dtype)[None, :, None, :], angles.sin().to(q.dtype)[None, :, None, :]

        def turn(z):
            z1, z2 = z[..., : d // 2], z[..., d // 2:]
            return torch.cat([z1 * cos - z2 * sin, z2 * cos + z1 * sin], dim=-1)

        q = turn(q.view(B, t, H, d)).transpose(1, 2)
        k = turn(k.view(B, t, K, d)).transpose(1, 2)
        v = v.view(B, t, K, d).transpose(1, 2)
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
        return self.o_proj(y.transpose(1, 2).contiguous().view(B, t, H * d))


def read_llmc_tokens(path):
    """Tokens of an llm.c .bin file: 256 int32 header (magic 20240520, version 1, count), uint16 tokens."""
    header = torch.from_file(path, size=256, dtype=torch.int32)
    assert header[0].item() == 20240520 and header[1].item() == 1, f"{path}: not an llm.c v1 token file"
    count = header[2].item()
    raw = torch.from_file(path, size=512 + count, dtype=torch.int16)[512:]
    return raw.to(torch.int32) & 0xFFFF  # uint16 stored as int16


def make_batches(args, device, rank, n=4):
    g = torch.Generator().manual_seed(1000 + rank)
    B, out = args.batch_size, []
    tokens = read_llmc_tokens(args.data) if args.model != "mlp" and args.data else None
    for _ in range(n):
        if args.model == "mlp":
            dims = [int(d) for d in args.dims.split(",")]
            x = torch.randn(B, dims[0], generator=g)
            y = torch.randint(0, dims[-1], (B,), generator=g)
        elif tokens is not None:  # B random windows of context + 1 tokens: inputs and next-token targets
            starts = torch.randint(0, len(tokens) - args.context - 1, (B,), generator=g)
            windows = torch.stack([tokens[s:s + args.context + 1] for s in starts.tolist()])
            assert windows.max().item() < args.vocab, f"{args.data} holds tokens >= --vocab {args.vocab}"
            x, y = windows[:, :-1].contiguous(), windows[:, 1:].contiguous()
        else:
            x = torch.randint(0, args.vocab, (B, args.context), generator=g)
            y = torch.randint(0, args.vocab, (B, args.context), generator=g)
        out.append((x.to(device), y.to(device)))
    return out


def make_buckets(params, bucket_mb):
    """Group params (reverse registration order) into flat fp32 buffers of <= bucket_mb."""
    cap = max(1, int(bucket_mb * 1024 * 1024) // 4)
    buckets, cur, size = [], [], 0
    for p in reversed(params):
        if cur and size + p.numel() > cap:
            buckets.append(cur)
            cur, size = [], 0
        cur.append(p)
        size += p.numel()
    if cur:
        buckets.append(cur)
    return [(b, torch.empty(sum(p.numel() for p in b), device=b[0].device)) for b in buckets]


def allreduce_buckets(buckets, world, grad_comm):
    for params, flat in buckets:
        off = 0
        for p in params:
            flat[off:off + p.numel()].copy_(p.grad.reshape(-1))
            off += p.numel()
        if grad_comm == "bf16":  # what bf16_compress_hook does: /world, bf16 sum, back to fp32
            wire = flat.div_(world).to(torch.bfloat16)
            dist.all_reduce(wire, op=dist.ReduceOp.SUM)
            flat.copy_(wire)
        else:
            dist.all_reduce(flat, op=dist.ReduceOp.SUM)
            flat.div_(world)
        off = 0
        for p in params:
            p.grad.copy_(flat[off:off + p.numel()].view_as(p.grad))
            off += p.numel()


def gemm_ceiling_tflops(device, repeats=20):
    """Rate of an 8192^3 bf16 matmul on `device` in TFLOP/s: the ceiling MFU is measured against."""
    n = GEMM_CEILING_N
    a = torch.randn(n, n, device=device, dtype=torch.bfloat16)
    b = torch.randn(n, n, device=device, dtype=torch.bfloat16)
    for _ in range(3):
        a @ b
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(repeats):
        a @ b
    end.record()
    torch.cuda.synchronize()
    return 2 * n ** 3 * repeats / (start.elapsed_time(end) * 1e-3) / 1e12


def flops_per_token(args, n_params):
    """6 x the matmul parameters (all but the lookups: wte and wpe, or llama's embed_tokens) + 12 L C T for
    attention's two T x T products, forward and backward (the PaLM/nanoGPT estimate; the causal half is
    counted too)."""
    lookups = args.vocab * args.embd + (args.context * args.embd if args.model == "gpt" else 0)
    return 6 * (n_params - lookups) + 12 * args.layers * args.embd * args.context


def wrap_ddp(model, device, bucket_mb, grad_comm):
    """DDP with minidp's bucket cap; bf16 gradients on the wire through bf16_compress_hook."""
    from torch.distributed.algorithms.ddp_comm_hooks import default_hooks
    ids = [device.index] if device.type == "cuda" else None
    wrapped = DDP(model, device_ids=ids, bucket_cap_mb=bucket_mb)
    if grad_comm == "bf16":
        wrapped.register_comm_hook(None, default_hooks.bf16_compress_hook)
    return wrapped


def run(args, device, world, overlap, bucket_mb, batches, dtype, compiled):
    """One run; returns per-step times in ms (max over ranks), warmup excluded, and peak memory in MiB."""
    torch.backends.cuda.matmul.allow_tf32 = dtype == "bf16" or args.tf32
    torch.backends.cudnn.allow_tf32 = dtype == "bf16" or args.tf32
    model = build_model(args, device)
    wrapped = torch.compile(model) if compiled == "on" else model
    if world > 1:
        wrapped = wrap_ddp(wrapped, device, bucket_mb, args.grad_comm)
    if args.optimizer == "adamw":
        opt = torch.optim.AdamW(model.parameters(), lr=args.lr)
    else:
        opt = torch.optim.SGD(model.parameters(), lr=args.lr)
    buckets = make_buckets(list(model.parameters()), bucket_mb) if world > 1 and overlap == "off" else None
    cuda = device.type == "cuda"
    autocast = torch.autocast(device.type, dtype=torch.bfloat16, enabled=dtype == "bf16")
    if cuda:
        gc.collect()
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats(device)
    times = []
    for step in range(args.warmup + args.steps):
        x, y = batches[step % len(batches)]
        if cuda:
            torch.cuda.synchronize()
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
        else:
            t0 = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        if buckets is not None:
            with wrapped.no_sync():
                with autocast:
                    _, loss = wrapped(x, y)
                loss.backward()
            allreduce_buckets(buckets, world, args.grad_comm)
        else:
            with autocast:
                _, loss = wrapped(x, y)
            loss.backward()
        opt.step()
        if cuda:
            end.record()
            torch.cuda.synchronize()
            ms = start.elapsed_time(end)
        else:
            ms = (time.perf_counter() - t0) * 1e3
        if step >= args.warmup:
            times.append(ms)
    peak_mib = torch.cuda.max_memory_allocated(device) / 2 ** 20 if cuda else None
    t = torch.tensor(times, dtype=torch.float64, device=device)
    if world > 1:
        dist.all_reduce(t, op=dist.ReduceOp.MAX)
    del wrapped, model, opt, buckets
    gc.collect()
    return t.tolist(), peak_mib


def summarize(times, samples_per_step, tokens_per_step):
    s = sorted(times)
    med = statistics.median(s)
    p90 = s[min(len(s) - 1, int(round(0.9 * (len(s) - 1))))]
    row = {"step_ms_median": med, "step_ms_p90": p90,
           "samples_per_s": samples_per_step / (med / 1e3)}
    if tokens_per_step:
        row["tokens_per_s"] = tokens_per_step / (med / 1e3)
    return row


def main():
    args = parse_args()
    rank, world, local = dist_env()
    if args.device == "cuda":
        torch.cuda.set_device(local)
        device = torch.device("cuda", local)
    else:
        device = torch.device("cpu")
    if world > 1:
        os.environ.setdefault("MASTER_ADDR", "localhost")
        os.environ.setdefault("MASTER_PORT", "29511")
        dist.init_process_group("nccl" if args.device == "cuda" else "gloo",
                                rank=rank, world_size=world)

    batches = make_batches(args, device, rank)
    samples = args.batch_size * world
    tokens = samples * args.context if args.model != "mlp" else 0
    n_params = sum(p.numel() for p in build_model(args, torch.device("cpu")).parameters())
    measure_mfu = args.model != "mlp" and device.type == "cuda"
    ceiling = gemm_ceiling_tflops(device) if measure_mfu else None
    rows = []
    for dtype, compiled in itertools.product(args.dtype, args.compile):
        for bucket_mb in args.bucket_mb:
            for overlap in (["off", "on"] if world > 1 else ["off"]):
                times, peak_mib = run(args, device, world, overlap, bucket_mb, batches, dtype, compiled)
                row = {"dtype": dtype, "compile": compiled, "overlap": overlap, "bucket_mb": bucket_mb,
                       "grad_comm": args.grad_comm, **summarize(times, samples, tokens), "peak_mem_mib": peak_mib}
                if measure_mfu:  # per GPU: tokens/s of one rank against one GPU's ceiling
                    flops = flops_per_token(args, n_params) * row["tokens_per_s"] / world
                    row["mfu"] = flops / (ceiling * 1e12)
                rows.append(row)
            if world == 1:
                break  # no communication: bucket size and overlap do not matter

    if rank == 0:
        model_name = args.model
        # minidp-bench's columns; PyTorch does not expose per-bucket timings, so compute, comm, exposed and E
        # are not measured here ("-"), and the speed-up is T_off / T_on of the same bucket size.
        for r in rows:
            off = next((o for o in rows if o["bucket_mb"] == r["bucket_mb"] and o["overlap"] == "off"
                        and o["dtype"] == r["dtype"] and o["compile"] == r["compile"]), None)
            r["speedup"] = off["step_ms_median"] / r["step_ms_median"] if off and r["overlap"] == "on" else None
        hdr = ["framework", "model", "world", "dtype", "compile", "bucket_mb", "overlap", "step_ms", "p90_ms",
               "compute_ms", "comm_ms", "exposed_ms", "E", "speed-up", "samples_per_s", "tokens_per_s",
               "mfu", "peak_mib"]
        if ceiling:
            print(f"bf16 GEMM ceiling ({GEMM_CEILING_N}^3): {ceiling:.1f} TFLOP/s")
        print(f"gradients on the wire: {args.grad_comm}")
        print(" ".join(f"{h:>13}" for h in hdr))
        for r in rows:
            vals = ["pytorch", model_name, world, r["dtype"], r["compile"], f"{r['bucket_mb']:g}", r["overlap"],
                    f"{r['step_ms_median']:.3f}", f"{r['step_ms_p90']:.3f}", "-", "-", "-", "-",
                    f"{r['speedup']:.3f}" if r["speedup"] else "-", f"{r['samples_per_s']:.1f}",
                    f"{r['tokens_per_s']:.0f}" if "tokens_per_s" in r else "-",
                    f"{100 * r['mfu']:.1f}%" if "mfu" in r else "-",
                    f"{r['peak_mem_mib']:.0f}" if r["peak_mem_mib"] is not None else "-"]
            print(" ".join(f"{str(v):>13}" for v in vals))
        config = {k: v for k, v in vars(args).items() if k != "json"}
        config.update({"n_params": n_params, "torch_version": torch.__version__,
                       "gemm_ceiling_tflops": ceiling,
                       "flops_per_token": flops_per_token(args, n_params) if measure_mfu else None,
                       "backend": dist.get_backend() if world > 1 else None,
                       "step_time": "max over ranks of per-step time; warmup excluded",
                       "ddp_first_bucket_mb": 1.0 if world > 1 else None})
        if args.device == "cuda":
            config["gpu"] = torch.cuda.get_device_name(device)
        result = {"framework": "pytorch", "model": model_name, "world": world,
                  "device": args.device, "rows": rows, "config": config}
        if args.json:
            tmp = args.json + ".tmp"  # complete or absent: write, then rename
            with open(tmp, "w") as f:
                json.dump(result, f, indent=2)
            os.replace(tmp, args.json)
            print(f"wrote {args.json}")
    if world > 1:
        dist.barrier()
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
