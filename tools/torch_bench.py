"""PyTorch side-by-side benchmark for minidp: the same MLP/GPT/LLaMA, same step, timed the same way.

The anchor, as a PyTorch expert would build it (everything it runs is printed before the table):
  optimizer  torch.optim.AdamW(..., fused=True) on CUDA (one fused kernel set; foreach=True on the CPU, where
             fused AdamW is not offered); weight decay 0 as minidp-bench's default. --adamw-impl picks another.
  compile    torch.compile(model, mode=M) for each --compile-mode M (default, max-autotune-no-cudagraphs,
             max-autotune) beside eager (--compile off); each mode is its own run, after torch._dynamo.reset().
  attention  F.scaled_dot_product_attention(is_causal=True; enable_gqa=True for grouped key/value heads) with
             --attention sdpa; the backend SDPA picks for the model's q, k, v is asked (torch._fused_sdp_choice)
             and the attention kernels of one profiled step after the timed ones are listed (CUDA).
  precision  --dtype bf16: autocast bf16 around forward and loss (fp32 master weights, fp32 optimizer), TF32
             allowed for the fp32 matmuls that remain.
  model      the modules of tests/reference/models.py, wrapped so that forward returns the loss only (logits
             are not kept alive through backward), built on the device.

One training step = zero_grad + forward + loss + backward + gradient all-reduce + optimizer step, on random
tokens (generated once, before timing) or windows of an llm.c token file (--data). Each step is synchronised
and timed on its own (CUDA events; the host clock on the CPU); --warmup untimed steps first (the first one
compiles), then --steps timed steps: median and p90 in ms. Peak memory: torch.cuda.max_memory_allocated over
the timed steps (reset after the warm-up, so compile-time autotuning buffers are not counted): bytes held by
tensors (parameters, gradients, optimizer state, activations), not the allocator's cache.

Each config (--dtype x compile) is one set of runs; per bucket size it alternates overlap "off" and "on" runs
(as minidp does), excluding warmup steps:
  on:  DDP(bucket_cap_mb=bucket) - all-reduce overlapped with backward.
  off: backward under ddp.no_sync(), then the grads are packed into buckets of
       bucket_mb (reverse parameter order), all-reduced (SUM, then /world) and
       copied back - same communication volume, no overlap.
  --grad-comm bf16: DDP with bf16_compress_hook (on), the buckets /world, cast to
       bf16, summed and cast back (off) - minidp's --grad-comm bf16.
World size 1: plain model, no communication; one row (overlap "off").
Step time of a step = max over ranks; reported median/p90 in ms, tokens/s, peak GPU memory and, for the
token models on CUDA, MFU against the bf16 GEMM rate measured in this process (an 8192^3 bf16 matmul).

    python3 tools/torch_bench.py --model gpt --layers 2 --embd 64 --device cpu --steps 5
    python3 tools/torch_bench.py --model gpt --dtype bf16 --compile off on --attention sdpa --batch-size 8 \\
        --json torch_gpt2.json    # GPT-2 small (defaults): eager and torch.compile(mode="default")
    python3 tools/torch_bench.py --model llama --layers 12 --embd 1024 --heads 8 --kv-heads 4 --hidden 2816 \\
        --vocab 32000 --dtype bf16 --compile on --compile-mode default max-autotune-no-cudagraphs --attention sdpa
    torchrun --nproc_per_node 8 tools/torch_bench.py --model gpt --bucket-mb 1 25 --json out.json
    mpirun -np 2 python3 tools/torch_bench.py --model mlp --device cpu   # gloo
"""
import argparse
import gc
import itertools
import json
import os
import re
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
COMPILE_MODES = ["default", "max-autotune-no-cudagraphs", "max-autotune"]
SDPA_BACKENDS = {"flash": "enable_flash_sdp", "efficient": "enable_mem_efficient_sdp", "cudnn": "enable_cudnn_sdp",
                 "math": "enable_math_sdp"}
# Kernel names of attention in a profiled step: FlashAttention (flash_fwd/bwd), cuDNN's (cudnn, fmha), the
# memory-efficient kernels (fmha_cutlass, efficient_attention) and the math path's batched GEMMs are not named.
ATTENTION_KERNEL = re.compile(r"flash|fmha|cudnn.*(attn|attention|sdpa)|efficient_attention|sdpa", re.I)


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
    ap.add_argument("--compile-mode", choices=COMPILE_MODES, nargs="+", default=["default"],
                    help="torch.compile modes of the 'on' runs, one run each (default: default)")
    ap.add_argument("--attention", choices=["explicit", "sdpa"], default="explicit",
                    help="explicit (B,H,T,T) softmax as tests/reference/models.py, or "
                         "F.scaled_dot_product_attention (the backend it picks is printed)")
    ap.add_argument("--sdpa-backend", choices=["auto"] + list(SDPA_BACKENDS), default="auto",
                    help="--attention sdpa: auto (PyTorch's own choice) or only this backend enabled")
    ap.add_argument("--optimizer", choices=["adamw", "sgd"], default="adamw")
    ap.add_argument("--adamw-impl", choices=["fused", "foreach", "for-loop"],
                    help="AdamW's implementation (default: fused on CUDA, foreach on the CPU, where PyTorch has no "
                         "fused AdamW)")
    ap.add_argument("--lr", type=float, default=3e-4)
    ap.add_argument("--weight-decay", type=float, default=0.0, help="AdamW's (minidp-bench's default: 0)")
    ap.add_argument("--device", choices=["cuda", "cpu"], default="cuda")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--grad-comm", choices=["fp32", "bf16"], default="fp32",
                    help="gradients on the wire; bf16: DDP's bf16_compress_hook")
    ap.add_argument("--json", help="write results here (rank 0)")
    def error(message):  # one line naming the flag, exit status 2
        print(f"{ap.prog}: error: {message}", file=sys.stderr)
        sys.exit(2)

    ap.error = error
    args = ap.parse_args()
    args.compile = args.compile or ["on"]
    if args.adamw_impl is None:
        args.adamw_impl = "fused" if args.device == "cuda" else "foreach"
    if args.adamw_impl == "fused" and args.device != "cuda":
        ap.error("--adamw-impl fused: PyTorch's fused AdamW is CUDA-only here; use foreach on the CPU")
    if "on" in args.compile and not hasattr(torch, "compile"):
        ap.error(f"--compile on: torch.compile needs PyTorch 2 (this is torch {torch.__version__})")
    if args.model == "llama" and args.heads % args.kv_heads:
        ap.error(f"--kv-heads {args.kv_heads} does not divide --heads {args.heads}")
    return args


def compile_specs(args):
    """The compile settings to run, in order: None (eager) for 'off', a torch.compile mode per 'on' mode."""
    specs = []
    for c in args.compile:
        specs += [None] if c == "off" else list(args.compile_mode)
    return list(dict.fromkeys(specs))


def dist_env():
    """(rank, world, local_rank) from torchrun, OpenMPI or Slurm's srun environment variables."""
    env = os.environ
    rank = int(env.get("RANK", env.get("OMPI_COMM_WORLD_RANK", env.get("SLURM_PROCID", 0))))
    world = int(env.get("WORLD_SIZE", env.get("OMPI_COMM_WORLD_SIZE", env.get("SLURM_STEP_NUM_TASKS", 1))))
    local = int(env.get("LOCAL_RANK", env.get("OMPI_COMM_WORLD_LOCAL_RANK", env.get("SLURM_LOCALID", 0))))
    return rank, world, local


class LossOnly(torch.nn.Module):
    """The model's forward returning the loss alone: the logits are not an output kept alive through backward
    and the optimizer step (minidp keeps none either)."""

    def __init__(self, model):
        super().__init__()
        self.model = model

    def forward(self, x, y):
        return self.model(x, y)[1]


def build_model(args, device):
    """The model, initialised on `device` (the meta device: shapes only)."""
    torch.manual_seed(args.seed)
    if device.type != "cpu" and hasattr(torch.device, "__enter__"):  # PyTorch 2: build it there, not on the CPU
        with device:
            return build_model_here(args, device)
    return build_model_here(args, device).to(device)


def build_model_here(args, device):
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
    if device.type != "meta":
        model.init_weights()
    return model


class SdpaCausalSelfAttention(CausalSelfAttention):
    """The same parameters and math through F.scaled_dot_product_attention: no (B,H,T,T) buffer."""

    def forward(self, x):
        B, t, C = x.shape
        q, k, v = (z.view(B, t, self.n_head, C // self.n_head).transpose(1, 2)
                   for z in self.c_attn(x).split(C, dim=2))
        y = sdpa(q, k, v)
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
        y = sdpa(q, k, v)
        return self.o_proj(y.transpose(1, 2).contiguous().view(B, t, H * d))


def sdpa_supports_gqa():
    """Whether F.scaled_dot_product_attention takes enable_gqa (PyTorch 2.5 on): asked by a tiny call, since
    inspect.signature cannot read the builtin's parameters."""
    try:
        q = torch.zeros(1, 2, 1, 8)
        F.scaled_dot_product_attention(q, q[:, :1], q[:, :1], enable_gqa=True)
        return True
    except (AttributeError, TypeError, RuntimeError):
        return False


HAS_SDPA = hasattr(F, "scaled_dot_product_attention")
SDPA_GQA = HAS_SDPA and sdpa_supports_gqa()


def sdpa(q, k, v):
    """Causal attention of q (B, H, T, d) over k, v (B, K, T, d), K dividing H: SDPA with enable_gqa where
    PyTorch has it (2.5 on), else k and v repeated to H heads first; without SDPA (PyTorch 1), the explicit
    softmax."""
    H, K = q.shape[1], k.shape[1]
    if K != H and not SDPA_GQA:
        k, v = k.repeat_interleave(H // K, dim=1), v.repeat_interleave(H // K, dim=1)
    if not HAS_SDPA:
        t = q.shape[2]
        att = (q @ k.transpose(-2, -1)) / (q.shape[-1] ** 0.5)
        mask = torch.ones(t, t, dtype=torch.bool, device=q.device).triu(1)
        return att.masked_fill(mask, float("-inf")).softmax(dim=-1) @ v
    if K != H:
        return F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
    return F.scaled_dot_product_attention(q, k, v, is_causal=True)


def attention_shape(args):
    """(B, H, K, T, d) of the token models' attention, None for the MLP."""
    if args.model == "mlp":
        return None
    K = args.kv_heads if args.model == "llama" else args.heads
    return args.batch_size, args.heads, K, args.context, args.embd // args.heads


def set_sdpa_backend(name):
    """Only `name`'s SDPA backend enabled (auto: PyTorch's defaults, untouched)."""
    if name == "auto":
        return
    for backend, setter in SDPA_BACKENDS.items():
        if hasattr(torch.backends.cuda, setter):
            getattr(torch.backends.cuda, setter)(backend == name)


def sdpa_choice(args, device, dtype):
    """What F.scaled_dot_product_attention runs for this model's q, k, v in `dtype` on `device`, in words."""
    if args.attention != "sdpa":
        return "explicit (B, H, T, T) softmax (tests/reference/models.py)"
    if not HAS_SDPA:
        return f"explicit softmax (no F.scaled_dot_product_attention in torch {torch.__version__})"
    B, H, K, T, d = attention_shape(args)
    call = "F.scaled_dot_product_attention(is_causal=True" + (
        ", enable_gqa=True)" if K != H and SDPA_GQA else ")" if K == H else ") on k, v repeated to H heads")
    choose = getattr(torch, "_fused_sdp_choice", None)
    if device.type != "cuda" or choose is None:
        return f"{call}; backend: PyTorch's CPU kernels" if device.type == "cpu" else call
    # As in training: operands that take gradients (some backends' backward limits decide the choice).
    q = torch.empty(B, H, T, d, device=device, dtype=dtype, requires_grad=True)
    kv = torch.empty(B, K if SDPA_GQA else H, T, d, device=device, dtype=dtype, requires_grad=True)
    try:
        kwargs = {"enable_gqa": True} if K != H and SDPA_GQA else {}
        index = choose(q, kv, kv, None, 0.0, True, **kwargs)
    except (RuntimeError, TypeError) as e:
        return f"{call}; backend choice not reported ({e.__class__.__name__})"
    names = {0: "MATH", 1: "FLASH_ATTENTION", 2: "EFFICIENT_ATTENTION", 3: "CUDNN_ATTENTION", 4: "OVERRIDEABLE"}
    try:
        from torch.nn.attention import SDPBackend
        name = SDPBackend(index).name
    except (ImportError, ValueError):
        name = names.get(index, str(index))
    return f"{call}; SDPA picks {name} for (B, H, K, T, d) = {(B, H, K, T, d)} {str(dtype).replace('torch.', '')}"


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


def make_optimizer(args, model):
    """The optimizer and its description: AdamW as --adamw-impl says (fused on CUDA), or SGD."""
    if args.optimizer == "sgd":
        return torch.optim.SGD(model.parameters(), lr=args.lr), f"torch.optim.SGD(lr={args.lr:g})"
    impl = {"fused": {"fused": True}, "foreach": {"foreach": True}, "for-loop": {"foreach": False}}[args.adamw_impl]
    opt = torch.optim.AdamW(model.parameters(), lr=args.lr, weight_decay=args.weight_decay, **impl)
    flags = ", ".join(f"{k}={v}" for k, v in impl.items())
    return opt, f"torch.optim.AdamW(lr={args.lr:g}, weight_decay={args.weight_decay:g}, {flags})"


def is_oom(e):
    return isinstance(e, getattr(torch.cuda, "OutOfMemoryError", ())) or "out of memory" in str(e)


def attention_kernels(step, device):
    """Names of the attention kernels one call of `step` launches (CUDA profiler), shortened."""
    if device.type != "cuda":
        return []
    from torch.profiler import ProfilerActivity, profile
    try:  # a diagnosis only: a profiler that fails (no CUPTI) costs the list, not the measurement
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            step()
            torch.cuda.synchronize()
        names = sorted({e.key for e in prof.key_averages() if ATTENTION_KERNEL.search(e.key)})
    except RuntimeError as e:
        return [f"not listed: the profiler failed ({str(e).splitlines()[0][:80]})"]
    return [n if len(n) <= 90 else n[:87] + "..." for n in names]


def run(args, device, world, overlap, bucket_mb, batches, dtype, mode):
    """One run (mode: None eager, else a torch.compile mode); returns per-step times in ms (max over ranks),
    warmup excluded, peak memory in MiB over the timed steps, seconds of the first step (compilation
    included), the optimizer's description and the attention kernels of one profiled step after timing."""
    torch.backends.cuda.matmul.allow_tf32 = dtype == "bf16" or args.tf32
    torch.backends.cudnn.allow_tf32 = dtype == "bf16" or args.tf32
    if mode is not None:
        torch._dynamo.reset()  # a fresh compilation for each mode
    model = build_model(args, device)
    loss_of = LossOnly(model)
    wrapped = torch.compile(loss_of, mode=mode) if mode is not None else loss_of
    if world > 1:
        wrapped = wrap_ddp(wrapped, device, bucket_mb, args.grad_comm)
    opt, opt_text = make_optimizer(args, model)
    buckets = make_buckets(list(model.parameters()), bucket_mb) if world > 1 and overlap == "off" else None
    cuda = device.type == "cuda"
    autocast = torch.autocast(device.type, dtype=torch.bfloat16, enabled=dtype == "bf16")

    def step(x, y):
        opt.zero_grad(set_to_none=True)
        if buckets is not None:
            with wrapped.no_sync():
                with autocast:
                    loss = wrapped(x, y)
                loss.backward()
            allreduce_buckets(buckets, world, args.grad_comm)
        else:
            with autocast:
                loss = wrapped(x, y)
            loss.backward()
        opt.step()

    if cuda:
        gc.collect()
        torch.cuda.empty_cache()
    times, first_s = [], None
    for i in range(args.warmup + args.steps):
        x, y = batches[i % len(batches)]
        if i == args.warmup and cuda:  # the peak of the timed steps: compile-time buffers are not counted
            torch.cuda.synchronize()
            torch.cuda.reset_peak_memory_stats(device)
        if cuda:
            torch.cuda.synchronize()
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
        t0 = time.perf_counter()
        step(x, y)
        if cuda:
            end.record()
            torch.cuda.synchronize()
            ms = start.elapsed_time(end)
        else:
            ms = (time.perf_counter() - t0) * 1e3
        if i == 0:
            first_s = time.perf_counter() - t0
        if i >= args.warmup:
            times.append(ms)
    peak_mib = torch.cuda.max_memory_allocated(device) / 2 ** 20 if cuda else None
    kernels = attention_kernels(lambda: step(*batches[0]), device) if args.model != "mlp" and world == 1 else []
    t = torch.tensor(times, dtype=torch.float64, device=device)
    if world > 1:
        dist.all_reduce(t, op=dist.ReduceOp.MAX)
    del wrapped, loss_of, model, opt, buckets
    gc.collect()
    if cuda:
        torch.cuda.empty_cache()
    return t.tolist(), peak_mib, first_s, opt_text, kernels


def summarize(times, samples_per_step, tokens_per_step):
    s = sorted(times)
    med = statistics.median(s)
    p90 = s[min(len(s) - 1, int(round(0.9 * (len(s) - 1))))]
    row = {"step_ms_median": med, "step_ms_p90": p90,
           "samples_per_s": samples_per_step / (med / 1e3)}
    if tokens_per_step:
        row["tokens_per_s"] = tokens_per_step / (med / 1e3)
    return row


def describe(args, device, world, n_params, opt_text, attention):
    """What this process runs, as lines: the anchor's configuration in words."""
    gpu = f" on {torch.cuda.get_device_name(device)}" if device.type == "cuda" else " on the CPU"
    lines = [f"anchor: PyTorch {torch.__version__}{gpu}, {world} rank(s)"]
    if args.model == "gpt":
        shape = f"{args.layers} layers, width {args.embd}, {args.heads} heads, context {args.context}"
    elif args.model == "llama":
        shape = (f"{args.layers} layers, width {args.embd}, {args.heads}/{args.kv_heads} heads, SwiGLU {args.hidden}, "
                 f"context {args.context}")
    else:
        shape = f"dims {args.dims}"
    vocab = f", vocabulary {args.vocab}" if args.model != "mlp" else ""
    lines.append(f"  model: {args.model} ({shape}{vocab}; {n_params / 1e6:.1f} M parameters), batch "
                 f"{args.batch_size} per rank; forward returns the loss only")
    cpu_note = "  (fused AdamW is CUDA-only: foreach on the CPU)" \
        if device.type == "cpu" and "foreach=True" in opt_text else ""
    lines.append(f"  optimizer: {opt_text}{cpu_note}")
    precision = {"fp32": "fp32" + (" (TF32 matmuls)" if args.tf32 else ""),
                 "bf16": "autocast bf16 (fp32 master weights and optimizer; TF32 for remaining fp32 matmuls)"}
    lines.append("  precision: " + "; ".join(precision[d] for d in args.dtype))
    modes = ["eager" if m is None else f'torch.compile(mode="{m}")' for m in compile_specs(args)]
    lines.append("  compile: " + ", ".join(modes) + " (one run each)")
    if args.model != "mlp":
        backend = "" if args.sdpa_backend == "auto" else f" (only the {args.sdpa_backend} backend enabled)"
        lines.append(f"  attention: {attention}{backend}")
    sync = "CUDA events" if device.type == "cuda" else "host clock"
    lines.append(f"  timed: the whole step (zero_grad, forward + loss, backward{', all-reduce' if world > 1 else ''}, "
                 f"optimizer.step), synchronised per step, {sync}; {args.warmup} warm-up steps"
                 f"{' (the first compiles)' if any(compile_specs(args)) else ''}, then {args.steps} timed: "
                 "median and p90")
    if device.type == "cuda":
        lines.append("  peak memory: torch.cuda.max_memory_allocated over the timed steps (reset after warm-up): "
                     "bytes held by tensors, not the allocator's cache")
    return lines


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
    set_sdpa_backend(args.sdpa_backend)

    batches = make_batches(args, device, rank)
    samples = args.batch_size * world
    tokens = samples * args.context if args.model != "mlp" else 0
    n_params = sum(p.numel() for p in build_model(args, torch.device("meta")).parameters())
    measure_mfu = args.model != "mlp" and device.type == "cuda"
    ceiling = gemm_ceiling_tflops(device) if measure_mfu else None
    attention = sdpa_choice(args, device, torch.bfloat16 if "bf16" in args.dtype else torch.float32) \
        if args.model != "mlp" else None
    rows, described = [], False
    for dtype, mode in itertools.product(args.dtype, compile_specs(args)):
        for bucket_mb in args.bucket_mb:
            for overlap in (["off", "on"] if world > 1 else ["off"]):
                row = {"dtype": dtype, "compile": "off" if mode is None else "on", "compile_mode": mode,
                       "overlap": overlap, "bucket_mb": bucket_mb, "grad_comm": args.grad_comm}
                try:
                    times, peak_mib, first_s, opt_text, kernels = run(args, device, world, overlap, bucket_mb,
                                                                      batches, dtype, mode)
                except (RuntimeError, MemoryError) as e:  # out of memory: a row that says so; anything else stops
                    if not is_oom(e):
                        raise
                    gc.collect()
                    if device.type == "cuda":
                        torch.cuda.empty_cache()
                    row["error"] = "out of memory"
                    rows.append(row)
                    continue
                if rank == 0 and not described:
                    print("\n".join(describe(args, device, world, n_params, opt_text, attention)))
                    described = True
                row.update({**summarize(times, samples, tokens), "peak_mem_mib": peak_mib, "first_step_s": first_s,
                            "optimizer": opt_text, "attention_kernels": kernels, "step_ms": times})
                if rank == 0 and kernels:
                    print(f"  attention kernels in a profiled step ({'eager' if mode is None else mode}): "
                          + "; ".join(kernels))
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
                        and o["dtype"] == r["dtype"] and o["compile_mode"] == r["compile_mode"]
                        and "error" not in o), None)
            r["speedup"] = off["step_ms_median"] / r["step_ms_median"] \
                if off and r["overlap"] == "on" and "error" not in r else None
        hdr = ["framework", "model", "world", "dtype", "compile", "bucket_mb", "overlap", "step_ms", "p90_ms",
               "compute_ms", "comm_ms", "exposed_ms", "E", "speed-up", "samples_per_s", "tokens_per_s",
               "mfu", "peak_mib"]
        if ceiling:
            print(f"bf16 GEMM ceiling ({GEMM_CEILING_N}^3): {ceiling:.1f} TFLOP/s")
        print(f"gradients on the wire: {args.grad_comm}")
        print(" ".join(f"{h:>26}" if h == "compile" else f"{h:>13}" for h in hdr))
        for r in rows:
            compile_cell = r["compile_mode"] or "off"
            if "error" in r:
                vals = ["pytorch", model_name, world, r["dtype"], compile_cell, f"{r['bucket_mb']:g}", r["overlap"],
                        r["error"]]
            else:
                vals = ["pytorch", model_name, world, r["dtype"], compile_cell, f"{r['bucket_mb']:g}", r["overlap"],
                        f"{r['step_ms_median']:.3f}", f"{r['step_ms_p90']:.3f}", "-", "-", "-", "-",
                        f"{r['speedup']:.3f}" if r["speedup"] else "-", f"{r['samples_per_s']:.1f}",
                        f"{r['tokens_per_s']:.0f}" if "tokens_per_s" in r else "-",
                        f"{100 * r['mfu']:.1f}%" if "mfu" in r else "-",
                        f"{r['peak_mem_mib']:.0f}" if r["peak_mem_mib"] is not None else "-"]
            print(" ".join(f"{str(v):>26}" if i == 4 else f"{str(v):>13}" for i, v in enumerate(vals)))
        config = {k: v for k, v in vars(args).items() if k != "json"}
        config.update({"n_params": n_params, "torch_version": torch.__version__,
                       "gemm_ceiling_tflops": ceiling,
                       "flops_per_token": flops_per_token(args, n_params) if measure_mfu else None,
                       "backend": dist.get_backend() if world > 1 else None,
                       "attention": attention,
                       "anchor": describe(args, device, world, n_params,
                                          next((r["optimizer"] for r in rows if "optimizer" in r), "-"), attention),
                       "step_time": "max over ranks of per-step time; warmup excluded",
                       "peak_memory": "torch.cuda.max_memory_allocated over the timed steps",
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
