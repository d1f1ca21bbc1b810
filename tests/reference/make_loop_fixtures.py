"""Write the PyTorch references of the training loop's learning-rate schedules and gradient clipping.

lr_schedules.safetensors: for each case `<kind>_w<warmup>_n<steps>_f<min_lr_frac>`, float64 [steps], the
learning rate torch.optim.lr_scheduler.LambdaLR gives each optimizer step with the llm.c / nanoGPT formula
(the same formula train/schedule.cpp implements); the case parameters are in `__metadata__`.

clip_grad_norm.safetensors: float32 parameters `param.<i>`, the gradients of two ranks `grad0.<i>`,
`grad1.<i>`, and for each max norm `<m>` (metadata `max_norms`) torch.nn.utils.clip_grad_norm_'s total
norm of the averaged gradients `norm.<m>` (float64 [1]) and the parameters after one SGD step (lr 0.1, no
momentum) on the clipped gradients, `stepped.<m>.<i>`.

    /usr/bin/python3 tests/reference/make_loop_fixtures.py [--out-dir tests/fixtures]
"""
import argparse
import math
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from make_fixtures import save_deterministic  # noqa: E402

SCHEDULES = [("cosine", 100, 400, 0.1), ("cosine", 0, 25, 0.0), ("linear", 10, 50, 0.0),
             ("linear", 3, 20, 0.25), ("constant", 5, 30, 0.0), ("constant", 0, 10, 0.0)]
SHAPES = [(4, 3), (3,), (7,), (5, 2)]
MAX_NORMS = [1.0, 100.0]
LR = 0.1


def schedule_lambda(kind, warmup, steps, min_frac, lr):
    """The multiplier of the base lr at step s (from 0), llm.c / nanoGPT."""
    def f(s):
        if s < warmup:
            return (s + 1) / warmup
        if kind == "constant":
            return 1.0
        r = min(max((s - warmup) / max(steps - 1 - warmup, 1), 0.0), 1.0)
        min_lr = lr * min_frac
        if kind == "cosine":
            return (min_lr + (lr - min_lr) * 0.5 * (1 + math.cos(math.pi * r))) / lr
        return (lr - (lr - min_lr) * r) / lr
    return f


def lr_schedules():
    tensors, meta = {}, {}
    for kind, warmup, steps, min_frac in SCHEDULES:
        lr = 3e-4
        p = torch.nn.Parameter(torch.zeros(1, dtype=torch.float64))
        opt = torch.optim.SGD([p], lr=lr)
        sched = torch.optim.lr_scheduler.LambdaLR(opt, schedule_lambda(kind, warmup, steps, min_frac, lr))
        lrs = []
        for _ in range(steps):
            lrs.append(opt.param_groups[0]["lr"])
            opt.step()
            sched.step()
        name = f"{kind}_w{warmup}_n{steps}_f{min_frac}"
        tensors[name] = torch.tensor(lrs, dtype=torch.float64)
        meta[name] = f"{kind} {warmup} {steps} {min_frac} {lr}"
    return tensors, meta


def clip_grad_norm():
    gen = torch.Generator().manual_seed(1234)
    tensors = {}
    params = [torch.randn(s, generator=gen) for s in SHAPES]
    grads = [[torch.randn(s, generator=gen) * 0.7 for s in SHAPES] for _ in range(2)]
    for i, p in enumerate(params):
        tensors[f"param.{i}"] = p.clone()
        tensors[f"grad0.{i}"] = grads[0][i].clone()
        tensors[f"grad1.{i}"] = grads[1][i].clone()
    for m in MAX_NORMS:
        ps = [torch.nn.Parameter(p.clone()) for p in params]
        for i, p in enumerate(ps):
            p.grad = (grads[0][i] + grads[1][i]) / 2
        norm = torch.nn.utils.clip_grad_norm_(ps, max_norm=m)
        torch.optim.SGD(ps, lr=LR).step()
        tensors[f"norm.{m:g}"] = norm.detach().double().reshape(1)
        for i, p in enumerate(ps):
            tensors[f"stepped.{m:g}.{i}"] = p.detach().clone()
    return tensors, {"max_norms": " ".join(f"{m:g}" for m in MAX_NORMS), "count": str(len(SHAPES)), "lr": str(LR)}


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out-dir", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "fixtures"))
    args = ap.parse_args()
    for name, (tensors, meta) in {"lr_schedules": lr_schedules(), "clip_grad_norm": clip_grad_norm()}.items():
        path = os.path.join(args.out_dir, name + ".safetensors")
        save_deterministic(tensors, path, meta)
        print("wrote", os.path.normpath(path))


if __name__ == "__main__":
    main()
