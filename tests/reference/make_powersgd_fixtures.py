"""Write the PyTorch references of DDP training with the PowerSGD comm hook (tests/fixtures/powersgd_*.safetensors).

    /usr/bin/python3 tests/reference/make_powersgd_fixtures.py [--out-dir tests/fixtures]

Two gloo ranks on 127.0.0.1 run DistributedDataParallel (one bucket) with PyTorch 1.13's unmodified
`powerSGD_hook` and plain SGD for STEPS steps, float32, on the tiny MLP and GPT of models.py. The only
intervention: before the first compressing call the wrapper `fixture_q_hook` fills the hook's warm-start
memory (`state.p_memory_dict` / `state.q_memory_dict`) so that the hook uses the fixture's initial Q
matrices (`q.<name>`, drawn with numpy) instead of drawing them from torch's RNG. The script then re-runs
the algorithm below in float64 numpy (`simulate`) and asserts it lands on the same parameters.

Fixture keys (float32 unless stated; `<name>` = PyTorch/minidp parameter name, registration order):
  param.<name>   initial parameters (identical on both ranks)
  q.<name>       (m, r) initial Q of each compressed parameter, raw (the hook orthogonalises it first)
  inputs         (STEPS, WORLD*B, ...) global batches; rank k takes rows [k*B, (k+1)*B). MLP float32,
                 GPT int32 tokens
  targets        (STEPS, WORLD*B[, T]) int32 class ids
  grad.<name>    (STEPS, *shape) the gradient each step's optimizer used (hook output, same on both ranks)
  loss           (STEPS, WORLD) each rank's loss (mean cross-entropy over its own rows / tokens)
  final.<name>   parameters after STEPS SGD steps (asserted identical on both ranks)
Metadata: see `metadata()` (model config, world, B, steps, lr, rank, start_iter, min_compression_rate, ...).

===================================================================================================
PowerSGD as the installed torch 1.13 source does it
(/usr/lib/python3/dist-packages/torch/distributed/algorithms/ddp_comm_hooks/powerSGD_hook.py, its sha256
is in the metadata as `hook_sha256`; "L<n>" = its line n; "default L<n>" = default_hooks.py in the same
directory). W = world size, r = matrix_approximation_rank (2), one call per DDP bucket per step; the
bucket is one flat float32 buffer `input_tensor` (L392) whose per-parameter views are
`bucket.gradients()` (L426). Each rank holds the buffer of its LOCAL gradient (the mean loss over its own
rows, not divided by W).

Iteration counter (L295-299, L395-397, L625). `state.iter` starts at 0 (L251). `maybe_increase_iter`
adds 1 only when `bucket.is_last()` (the bucket with the highest index), so it counts DDP steps: with one
bucket, the hook runs at step k (0-based) with state.iter == k. Where state.iter < start_powerSGD_iter
(L395) the hook increments the counter at once (L396) and returns the plain average (default L8-21):
`tensor.div_(W)` FIRST (default L15), then an all-reduce SUM (default L18). So with start_iter = 2,
steps 0 and 1 use the exact average and steps 2, 3, 4 compress; a compressing call increments the
counter at its very end (L625). (start_iter must be > 1 with error feedback or warm start, L215-219.)

A compressing call (state.iter >= start_iter), on each rank:
 1. Error feedback (L407-423). If the bucket has an error (L408) it is added in place to the whole
    buffer: M_buf += e (L409). At the first compressing step there is none: e is created as zeros of the
    buffer's length (L416-418) and NOT added. Then a copy of the whole buffer is kept:
    copy = clone(M_buf) (L423), i.e. local grad + error.
 2. Split (L433-448). For each parameter view in bucket order: matrix = tensor.view(shape[0], -1)
    (L434), (n, m) = its shape; r' = min(n, m, r) (L436); it is compressed iff
    (n + m) * r' * min_compression_rate < n * m (`_should_compress`, L91-94, strict <). 1-D tensors view as
    (n, 1), r' = 1, so they are never compressed. Compressed matrices keep bucket order within groups of
    equal shape (L483-485, L489-500: the P/Q memory is laid out shape group by shape group in order of
    first appearance); this layout changes nothing numerically, every matrix is handled on its own.
 3. Uncompressed tensors (L454-458, L555-566): concatenated (a copy) in bucket order, all-reduced SUM
    (L555), then divided by W (L560, sum first, THEN divide, unlike the vanilla path), and copied back
    into their views of the buffer (L562-566).
 4. Q (L464-546). Memory: P of n*r' and Q of m*r' per compressed matrix, flat (L475-480, L512-521).
    - First compressing step (no memory for this bucket yet, L465): Q is filled from torch's RNG seeded
      from numpy (L531-545) and orthogonalised (L546). THIS SCRIPT pre-fills the memory (fixture_q_hook),
      so the hook takes the warm-start branch instead and only orthogonalises (L527-529) the fixture's
      q.<name>. Equivalent spec: Q0 = orthogonalise(q.<name>).
    - Later steps (warm_start=True): Q = the previous step's final Q (after its all-reduce and division,
      step 8), orthogonalised again (L527-529) at the start of the step.
 5. P = M Q per matrix (L549-550: bmm(M (1,n,m), Q (1,m,r')) -> (1,n,r')), where M is the matrix view of
    the buffer after error feedback (local grad + error).
 6. All-reduce SUM of all P's (L570-572), NOT divided (L568 comment: P is orthogonalised next).
    (The all-reduce of P starts after the uncompressed all-reduce finished, L559-575; on gloo both are
    in place, so fut.value() at L578 is the same memory and the P views stay valid.)
 7. Orthogonalise each summed P (L579-580), then Q = M^T P (L583-584: bmm(M^T (1,m,n), P) -> (1,m,r')),
    with the same local M as step 5 (still the buffer before any decompression).
 8. All-reduce SUM of all Q's (L591-593), then divide by W in place (L600). This is also the Q kept for
    the next step's warm start (L600, L527-529).
 9. Decompress: M = P Q^T written into the matrix's view of the buffer (L602-603), overwriting it.
    Now the buffer holds: uncompressed elements = average over ranks, compressed = P Q^T (identical on
    all ranks).
    With W = 2 every sum above is a + b, so the ranks' order cannot matter; the vanilla path's
    a/2 + b/2 equals (a + b)/2 bit for bit (barring subnormals).
10. Error (L618-620): e = copy - buffer over the WHOLE bucket, uncompressed elements included
    (for those e = (local grad + old e) - average, generally non-zero and different per rank; their sum
    over ranks is zero up to rounding).
11. state.iter += 1 if the bucket is the last (L625); the buffer is returned (L627) and DDP copies it
    into the parameters' .grad (gradient_as_bucket_view=False); torch.optim.SGD (foreach off on
    1.13, no momentum) does p.add_(grad, alpha=-lr).

Orthogonalisation (`_orthogonalize`, L20-39): for r' <= 2 (or fp16/bf16) Gram-Schmidt
(`_orthogonalize_gram_schmidt`, L41-70), for r' > 2 in float32 torch.linalg.qr (L33-39). Here r' = 2,
so Gram-Schmidt on the (rows, r') matrix, modified Gram-Schmidt, in place, columns in order:
    for i in 0..r'-1:
        col_i /= ||col_i||_2                         (L57, epsilon == 0; with epsilon != 0:
                                                      col_i /= ||col_i|| + epsilon, L66)
        for every later column j > i (all at once): col_j -= <col_i, col_j> * col_i   (L68-70)
with the current (already normalised / projected) values. epsilon = 0 here; a zero column then gives
NaNs (the ZeroDivisionError branch L58-64 never fires for tensors).
===================================================================================================
"""
import argparse
import hashlib
import os
import socket
import sys
import tempfile

import numpy as np
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch.distributed.algorithms.ddp_comm_hooks import powerSGD_hook as psgd
from torch.nn.parallel import DistributedDataParallel as DDP

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from make_fixtures import save_deterministic  # noqa: E402
from models import GPT, MLP, self_check  # noqa: E402

HOOK_FILE = "/usr/lib/python3/dist-packages/torch/distributed/algorithms/ddp_comm_hooks/powerSGD_hook.py"
WORLD, B, STEPS, LR = 2, 4, 5, 0.05
RANK, START_ITER, MIN_RATE = 2, 2, 2
SEED = 2024
PERTURB = 0.05  # std of the noise added to biases and LayerNorm params so that they matter

MODELS = {
    # 12 -> 16 -> 5: layers.0.weight (16,12) compressed, layers.1.weight (5,16) not (84 >= 80).
    "mlp": {"kind": "mlp", "dims": [12, 16, 5], "init_std": 0.3},
    # width 8: wpe (8,8) and attn.c_proj (8,8) are not compressed (64 >= 64), the other 2-D weights are.
    "gpt": {"kind": "gpt", "vocab_size": 32, "block_size": 8, "n_layer": 2, "n_head": 2, "n_embd": 8,
            "init_std": 0.1},
}


def build_model(cfg):
    if cfg["kind"] == "mlp":
        return MLP(cfg["dims"])
    return GPT(cfg["vocab_size"], cfg["block_size"], cfg["n_layer"], cfg["n_head"], cfg["n_embd"])


def compress_rank(shape):
    """r' if the hook compresses a tensor of this shape (L433-441), else 0."""
    n = shape[0]
    m = int(np.prod(shape[1:])) if len(shape) > 1 else 1
    r = min(n, m, RANK)
    return r if psgd._should_compress(n, m, r, MIN_RATE)[0] else 0


def make_case(cfg):
    """Initial parameters, fixture Q's and the data of one model."""
    torch.manual_seed(SEED)
    model = build_model(cfg)
    self_check(model)
    model.init_weights(cfg["init_std"])
    gen = torch.Generator().manual_seed(SEED)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("bias") or "ln_" in name:
                p.add_(torch.randn(p.shape, generator=gen) * PERTURB)
    params = {n: p.detach().clone().contiguous() for n, p in model.named_parameters()}
    rng = np.random.RandomState(SEED)
    qs = {}
    for n, p in params.items():
        r = compress_rank(tuple(p.shape))
        if r:
            m = p.numel() // p.shape[0]
            qs[n] = torch.from_numpy(rng.standard_normal((m, r)).astype(np.float32))
    rows = WORLD * B
    if cfg["kind"] == "mlp":
        inputs = torch.randn(STEPS, rows, cfg["dims"][0], generator=gen)
        targets = torch.randint(0, cfg["dims"][-1], (STEPS, rows), generator=gen, dtype=torch.int32)
    else:
        V, T = cfg["vocab_size"], cfg["block_size"]
        inputs = torch.randint(0, V, (STEPS, rows, T), generator=gen, dtype=torch.int32)
        targets = torch.randint(0, V, (STEPS, rows, T), generator=gen, dtype=torch.int32)
    return params, qs, inputs, targets


def fixture_q_hook(names_by_param, qs):
    """powerSGD_hook, with the warm-start memory of a bucket filled from `qs` right before the hook's first
    compressing call for it, in the hook's own layout (L433-448, L483-523): compressed matrices grouped
    by shape in order of first appearance, each Q (m, r') row-major; P only needs the right length."""
    def hook(state, bucket):
        idx = bucket.index()
        if state.iter >= state.start_powerSGD_iter and idx not in state.p_memory_dict:
            groups = {}
            for p, g in zip(bucket.parameters(), bucket.gradients()):
                name = names_by_param[id(p)]
                n, m = g.view(g.shape[0], -1).shape
                r = min(n, m, state.matrix_approximation_rank)
                if psgd._should_compress(n, m, r, state.min_compression_rate)[0]:
                    assert name in qs and tuple(qs[name].shape) == (m, r), name
                    groups.setdefault((n, m), []).append((name, n, r))
            order = [e for group in groups.values() for e in group]
            assert sorted(name for name, _, _ in order) == sorted(qs), "compressed set differs from the fixture's"
            state.p_memory_dict[idx] = torch.zeros(sum(n * r for _, n, r in order))
            state.q_memory_dict[idx] = torch.cat([qs[name].reshape(-1) for name, _, _ in order]).clone()
        return psgd.powerSGD_hook(state, bucket)
    return hook


def rank_rows(t, rank):
    return t[rank * B:(rank + 1) * B]


def worker(rank, port, cfg, params, qs, inputs, targets, out_dir):
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=WORLD)
    model = build_model(cfg)
    with torch.no_grad():
        for n, p in model.named_parameters():
            p.copy_(params[n])
    names_by_param = {id(p): n for n, p in model.named_parameters()}
    ddp = DDP(model, bucket_cap_mb=256)
    state = psgd.PowerSGDState(process_group=None, matrix_approximation_rank=RANK, start_powerSGD_iter=START_ITER,
                               min_compression_rate=MIN_RATE, use_error_feedback=True, warm_start=True,
                               orthogonalization_epsilon=0, random_seed=0)
    buckets_seen = set()

    def hook(state_, bucket):
        buckets_seen.add((bucket.index(), bucket.is_last(), len(bucket.parameters())))
        return inner(state_, bucket)
    inner = fixture_q_hook(names_by_param, qs)
    ddp.register_comm_hook(state, hook)
    opt = torch.optim.SGD(ddp.parameters(), lr=LR, momentum=0.0)
    grads = {n: [] for n in params}
    losses = []
    for step in range(STEPS):
        opt.zero_grad(set_to_none=True)
        x, y = rank_rows(inputs[step], rank), rank_rows(targets[step], rank)
        _, loss = ddp(x, y)
        loss.backward()
        losses.append(loss.item())
        for n, p in model.named_parameters():
            grads[n].append(p.grad.detach().clone())
        opt.step()
    assert state.iter == STEPS, state.iter
    assert buckets_seen == {(0, True, len(params))}, f"expected one bucket, saw {buckets_seen}"
    torch.save({"final": {n: p.detach().clone() for n, p in model.named_parameters()},
                "grads": {n: torch.stack(g) for n, g in grads.items()},
                "losses": losses}, os.path.join(out_dir, f"rank{rank}.pt"))
    dist.barrier()
    dist.destroy_process_group()


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_ddp(cfg, params, qs, inputs, targets):
    with tempfile.TemporaryDirectory() as tmp:
        mp.spawn(worker, args=(free_port(), cfg, params, qs, inputs, targets, tmp), nprocs=WORLD, join=True)
        res = [torch.load(os.path.join(tmp, f"rank{r}.pt")) for r in range(WORLD)]
    for n in params:
        assert torch.equal(res[0]["final"][n], res[1]["final"][n]), f"ranks ended with different {n}"
        assert torch.equal(res[0]["grads"][n], res[1]["grads"][n]), f"ranks stepped with different grads of {n}"
    return res


# ---------------------------------------------------------------------------------------------------
# The algorithm of the comment block, in float64 numpy, as an independent check of the spec.

def gram_schmidt(a):
    a = a.copy()
    for i in range(a.shape[1]):
        a[:, i] /= np.linalg.norm(a[:, i])
        a[:, i + 1:] -= (a[:, i:i + 1] * a[:, i + 1:]).sum(axis=0, keepdims=True) * a[:, i:i + 1]
    return a


def simulate(cfg, params, qs, inputs, targets):
    """WORLD ranks in one process, float64 throughout; returns the final parameters and the step grads."""
    model = build_model(cfg).double()
    with torch.no_grad():
        for n, p in model.named_parameters():
            p.copy_(params[n].double())
    names = list(params)
    qmem = {n: q.double().numpy() for n, q in qs.items()}
    err = [{n: np.zeros(params[n].shape) for n in names} for _ in range(WORLD)]
    grads = {n: [] for n in names}
    for step in range(STEPS):
        local = []
        for rank in range(WORLD):
            model.zero_grad(set_to_none=True)
            x, y = rank_rows(inputs[step], rank), rank_rows(targets[step], rank)
            _, loss = model(x.double() if x.is_floating_point() else x, y)
            loss.backward()
            local.append({n: p.grad.numpy().copy() for n, p in model.named_parameters()})
        avg = {}
        if step < START_ITER:
            avg = {n: sum(g[n] for g in local) / WORLD for n in names}
        else:
            bufs = [{n: local[r][n] + err[r][n] for n in names} for r in range(WORLD)]  # e is 0 at first
            for n in names:
                if n not in qmem:
                    avg[n] = sum(b[n] for b in bufs) / WORLD
                    continue
                shape = params[n].shape
                ms = [b[n].reshape(shape[0], -1) for b in bufs]
                q = gram_schmidt(qmem[n])
                p = gram_schmidt(sum(m @ q for m in ms))
                q = sum(m.T @ p for m in ms) / WORLD
                qmem[n] = q
                avg[n] = (p @ q.T).reshape(shape)
            for r in range(WORLD):
                err[r] = {n: bufs[r][n] - avg[n] for n in names}
        with torch.no_grad():
            for n, p in model.named_parameters():
                grads[n].append(avg[n])
                p -= LR * torch.from_numpy(avg[n])
    return ({n: p.detach().numpy() for n, p in model.named_parameters()},
            {n: np.stack(g) for n, g in grads.items()})


def rel_err(a, b):
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    return float(np.abs(a - b).max() / max(np.abs(b).max(), 1e-30))


# ---------------------------------------------------------------------------------------------------

def metadata(cfg, params, qs, dev):
    meta = {"model": cfg["kind"], "world": WORLD, "B": B, "steps": STEPS, "lr": LR, "momentum": 0,
            "optimizer": "torch.optim.SGD, p -= lr * grad, no momentum, no weight decay",
            "rank": RANK, "matrix_approximation_rank": RANK, "start_iter": START_ITER,
            "min_compression_rate": MIN_RATE,
            "use_error_feedback": "true", "warm_start": "true", "orthogonalization_epsilon": 0,
            "compressed": ",".join(qs), "uncompressed": ",".join(n for n in params if n not in qs),
            "param_order": ",".join(params), "dtype": "float32",
            "loss": ("cross-entropy, mean over the rank's own rows (GPT: over its B*T tokens), "
                     "as models.py's forward(inputs, targets)"),
            "data": "step s, rank k uses inputs[s, k*B:(k+1)*B] and targets[s, k*B:(k+1)*B]",
            "hook": "torch.distributed.algorithms.ddp_comm_hooks.powerSGD_hook.powerSGD_hook, unmodified",
            "hook_sha256": hashlib.sha256(open(HOOK_FILE, "rb").read()).hexdigest(),
            "q_init": ("q.<name> (m, r) raw numpy N(0,1) draws, orthogonalised by the hook at the first "
                       "compressing step; r = min(n, m, rank)"),
            "ddp": "gloo, world 2, one bucket (bucket_cap_mb=256), gradient_as_bucket_view=False",
            "torch_version": torch.__version__, "seed": SEED,
            "float64_check_final_rel_err": f"{dev:.3e}",
            "generator": "tests/reference/make_powersgd_fixtures.py"}
    if cfg["kind"] == "mlp":
        meta["dims"] = ",".join(map(str, cfg["dims"]))
    else:
        for k in ("vocab_size", "block_size", "n_layer", "n_head", "n_embd"):
            meta[k] = cfg[k]
        meta.update({"seq_len": cfg["block_size"], "layernorm_eps": "1e-5", "gelu": "tanh",
                     "tied_lm_head": "false"})
    return {k: str(v) for k, v in meta.items()}


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    ap.add_argument("--out-dir", default=os.path.join(root, "fixtures"))
    args = ap.parse_args()
    assert os.path.realpath(psgd.__file__) == os.path.realpath(HOOK_FILE), psgd.__file__
    torch.set_num_threads(1)
    torch.use_deterministic_algorithms(True)
    for key, cfg in MODELS.items():
        params, qs, inputs, targets = make_case(cfg)
        res = run_ddp(cfg, params, qs, inputs, targets)
        final64, grads64 = simulate(cfg, params, qs, inputs, targets)
        dev = max(rel_err(res[0]["final"][n], final64[n]) for n in params)
        gdev = {n: rel_err(res[0]["grads"][n], grads64[n]) for n in params}
        moved = max(rel_err(res[0]["final"][n], params[n]) for n in params if n in qs)
        print(f"{key}: final params vs float64 re-implementation: max rel err {dev:.2e}; "
              f"step grads: max rel err {max(gdev.values()):.2e} ({max(gdev, key=gdev.get)}); "
              f"compressed params moved by up to {moved:.2e} (rel)")
        assert dev < 1e-4 and max(gdev.values()) < 1e-4, "the float64 re-implementation of the spec disagrees"
        tensors = {f"param.{n}": t for n, t in params.items()}
        tensors.update({f"q.{n}": q for n, q in qs.items()})
        tensors["inputs"] = inputs
        tensors["targets"] = targets
        tensors.update({f"grad.{n}": g for n, g in res[0]["grads"].items()})
        tensors["loss"] = torch.tensor([[r["losses"][s] for r in res] for s in range(STEPS)], dtype=torch.float32)
        tensors.update({f"final.{n}": t for n, t in res[0]["final"].items()})
        tensors = {k: v.contiguous() for k, v in tensors.items()}
        path = os.path.join(args.out_dir, f"powersgd_{key}.safetensors")
        save_deterministic(tensors, path, metadata(cfg, params, qs, dev))
        print(f"wrote {os.path.normpath(path)}: {len(tensors)} tensors, {os.path.getsize(path)} bytes; "
              f"compressed: {', '.join(qs)}")


if __name__ == "__main__":
    main()
