#!/usr/bin/env python3
"""minidp's data-parallel planner: step time, exposed communication, H and memory per GPU for 1 ... 1024 GPUs.

    planner.py --profile ONE_GPU.json [--layer-trace TRACE.json] --links NAME=SPEC [NAME=SPEC ...]
               [--intra nvlink] [--gpus-per-host 8] [--gpus 1,2,4,...,1024] [--png OUT.png]

What it models (every number it uses is printed under "assumptions" with where it came from):

Profile (one GPU, measured): a minidp-bench JSON of one rank (`weak_np1.json`, `mdp_gpt2_*.json`): the step,
backward and peak memory of its overlap-off row; the model's shape from its config (GPT: layers, width,
context; the vocabulary is not in the JSON: --vocab, default 50257, the GPT-2 vocabulary of every run here).
The per-layer backward timings come from a minidp-bench trace (--layer-trace: the median over its overlap-off
steps of rank 0's "backward <layer>" spans and of its optimizer phase): the layers' *shares* of backward are
taken from the trace and scaled to the profile's backward time, so an fp32 trace can shape a bf16 profile
(the lm head's share of backward is 23% in fp32 and, from the FLOPs at the bf16 GEMM rate, about the same in
bf16; no bf16 trace exists). Without a trace, shares are proportional to each layer's backward FLOPs.

Buckets: minidp's plan (framework/distributed/gradient/bucket_plan.cpp, replicated here: reverse registration order,
first and last buckets at --first-bucket-mb, one bucket per parameter larger than the cap). A parameter is
ready at the end of its layer's span; buckets run one after another on the comm stream in index order.

Links, per level: alpha (ms) and bus bandwidth B (GB/s) of an all-reduce, t = alpha + 2(W-1)/W * bytes / B,
fitted (least squares in relative error) to a minidp-bench-allreduce JSON where the link was measured, or
stated. For N GPUs with G per host (H hosts), NCCL's algorithms: ring (2(N-1) steps; bandwidth
min(B_intra, NICs per host x B_nic) once it crosses hosts), double binary tree across hosts (2 log2 H network
steps, chains inside hosts) and hierarchical (reduce-scatter inside the host, all-reduce of 1/G across hosts,
all-gather inside); a collective takes the cheapest, as NCCL's tuner would. Each ring step beyond the two of
the measured 2-GPU all-reduce adds the level's hop latency (an assumption per level). Reduce-scatter and
all-gather (ZeRO-1) are rings of (N-1) steps moving (N-1)/N of the buffer.

Step: forward + backward + exposed communication + optimizer. Overlap off: every bucket after backward.
Overlap on: a bucket starts at max(its last gradient ready, the previous bucket's end); the exposed time is how
far the last one ends after backward. Backward slows beside the collectives (measured: compute_ms with overlap
on exceeds off), modelled as the fitted FITTED parameters below: per GB of HBM traffic of the comm stream's
kernels while backward runs, and per collective on each kind of transport; plus a per-bucket cost of every
step (zeroing and events) fitted from the overlap-off runs. The parameters come from `planner.py --fit`, a
least-squares fit to the two-GPU runs in docs/results; tests/train/planner_check.py re-fits them and checks
every two-GPU median against the model.

Methods: DDP with fp32 on the wire; bf16 on the wire (half the bytes; the cast kernels at the rate measured for
the same kind of scalar cast kernel, CAST_GBPS); ZeRO-1 (reduce-scatter per bucket, the optimizer on 1/N, the
parameters all-gathered after the update); PowerSGD at rank r as minidp's hook (framework/distributed/gradient/hooks/
powersgd.cpp) does it: each gradient viewed as n (its first extent) x m (the rest), compressed at r' = min(n, m, r)
when (n + m) r' * 2 < n m; per bucket two collectives, U (the uncompressed gradients) with every P (n r'), then
every Q (m r'); and between and around them its local work on the comm stream: passes over the bucket's fp32
gradients (the error-feedback add, M Q, M^T P, the expansion P Q^T that also updates the error), the products'
work per rank and a cost per bucket (launches, the batched Cholesky-QRs, the split products' partial sums),
POWERSGD_FITTED, fitted to the overlap-off comm times of the hook on the emulated link.

Emulated link (minidp-bench --comm emulated): one process modelling N ranks; each collective holds 16 CTAs on the
comm stream for exactly latency + 2(N-1)/N * bytes / bandwidth (all-gathers (N-1)/N), so its alpha and B are the
run's own flags (Level.emulated) and no ring-step latency is added. Backward slows beside the link's kernel by
EMULATED_FITTED per ms of it, fitted to the emulated runs' compute_ms with overlap on minus off.

Memory per GPU: the profile's measured peak, plus the bf16 wire copy (2 bytes per parameter), minus the
(N-1)/N of the optimizer state that ZeRO-1 shards, plus PowerSGD's error feedback (4 bytes per parameter: the
hook keeps it for whole buckets) and U, P, Q.
"""
import argparse
import collections
import json
import math
import os
import re
import statistics
import sys

import numpy as np

MIB = 1048576.0
HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
RESULTS = os.path.join(ROOT, "docs", "results")

# Fitted by `planner.py --fit` (least squares over every two-GPU minidp-bench pair in docs/results; see
# fit_parameters). tests/train/planner_check.py re-fits and fails when these drift from the fit.
FITTED = {
    "slow_ms_per_gb_fp32": 0.438837,  # fp32 backward slows by this per GB of HBM traffic of comm-stream kernels
    "slow_ms_per_gb_bf16": 0.649412,  # the same for bf16 backward (more of it is memory-bound)
    "slow_ms_per_coll_nvlink": 0.0102274,  # ... and by this per collective launched beside it over NVLink
    "bucket_ms": 0.00569105,  # every step, per bucket (zeroing, events), overlap on or off
}

COPY_GBPS = 4270.1  # device-to-device copy rate of the H200 (docs/results/h200-2026-11-30/bench_kernels.txt)
# The wire casts (kernels/bf16_cast.cu) are scalar grid-stride loops: the rate of the scalar fp32 -> bf16 weight
# casts in the 30 ms profile (docs/results/h200-2026-11-30-s15/profile_gpt2_bf16_b8_30ms.txt: 97 casts per step,
# 123.5 M elements read as fp32 and written as bf16, 741 MB, in 0.479 ms)
CAST_GBPS = 1547.0
POWERSGD_MIN_RATE = 2.0  # the hook's minimum compression rate (powerSGD_hook's min_compression_rate default)
# The hook's local work in fp32 passes (4 bytes read or written per element): a compressed gradient: error += grad
# (3), M Q (1), M^T P (1), bucket = P Q^T with error -= it (3); an uncompressed one: the add (3), packed into U (2),
# U / world unpacked into the bucket with the error update (4). The rate of a pass and the products' cost per rank
# are POWERSGD_FITTED.
POWERSGD_PASSES_COMPRESSED = 8
POWERSGD_PASSES_DENSE = 9

# Fitted by `planner.py --fit-emulated` (least squares over the emulated-link runs of EMULATED_JOBS; see
# fit_emulated). tests/train/planner_check.py re-fits and fails when these drift from the fit.
POWERSGD_FITTED = {
    "pass_gbps": 2888.90,  # HBM rate of the hook's passes over the fp32 gradients
    "ns_per_elem_rank": 0.00150586,  # the products' cost beyond their passes, per compressed element and unit of r'
    "bucket_ms": 0.0610702,  # per bucket: launches, the batched Cholesky-QRs, partial sums, events
    "slow_ms_per_gb": 0.230425,  # backward slows by this per GB of the hook's passes beside it
}
EMULATED_FITTED = {
    "slow_ms_per_link_ms": 0.294381,  # backward slows by this per ms the emulated link's 16 CTAs run beside it
}
ADAMW_STATE_BYTES = 8  # exp_avg + exp_avg_sq, fp32, per parameter

# Where a link cannot be measured here: (alpha ms, busbw GB/s per NIC, hop us, NICs per host, kind, why).
ASSUMED_LINKS = {
    "ib": dict(alpha_ms=0.030, busbw_gbps=45.0, hop_us=5.0, nics_per_host=8, kind="net",
               why="InfiniBand NDR, one 400 Gb/s NIC per GPU (8 per host), 45 GB/s busbw each (90% of 50), "
                   "30 us all-reduce intercept between two hosts, 5 us per network ring step (NCCL net latency)"),
    "ethernet": dict(alpha_ms=0.100, busbw_gbps=10.0, hop_us=25.0, nics_per_host=1, kind="net",
                     why="one 100 Gb/s Ethernet NIC per host through NCCL's socket transport, 10 GB/s busbw "
                         "(80%), 100 us intercept, 25 us per network ring step (TCP)"),
}
NVLINK_HOP_US = 2.0  # per ring step inside a host (assumed); a network level without hop_us: half its intercept


# ------------------------------------------------------------------------------------------------------------
# The model's parameters and minidp's bucket plan


def gpt_params(layers, embd, context, vocab):
    """(name, shape) in minidp's registration order (models/gpt: untied head)."""
    c = embd
    out = [("wte.weight", (vocab, c)), ("wpe.weight", (context, c))]
    for i in range(layers):
        h = f"h.{i}."
        out += [(h + "ln_1.weight", (c,)), (h + "ln_1.bias", (c,)),
                (h + "attn.c_attn.weight", (3 * c, c)), (h + "attn.c_attn.bias", (3 * c,)),
                (h + "attn.c_proj.weight", (c, c)), (h + "attn.c_proj.bias", (c,)),
                (h + "ln_2.weight", (c,)), (h + "ln_2.bias", (c,)),
                (h + "mlp.c_fc.weight", (4 * c, c)), (h + "mlp.c_fc.bias", (4 * c,)),
                (h + "mlp.c_proj.weight", (c, 4 * c)), (h + "mlp.c_proj.bias", (c,))]
    out += [("ln_f.weight", (c,)), ("ln_f.bias", (c,)), ("lm_head.weight", (vocab, c))]
    return out


def numel(shape):
    return int(np.prod(shape))


def layer_of(name):
    """runtime::layerOf: "h.3.attn.c_fc.weight" -> "h.3", "wte.weight" -> "wte"."""
    parts = name.split(".")
    if len(parts) > 1 and parts[1].isdigit():
        return parts[0] + "." + parts[1]
    return parts[0]


def plan_buckets(params, cap_bytes, first_cap_bytes, solo=()):
    """planBuckets of bucket_plan.cpp for one dtype (fp32): lists of registration indices, in launch order."""
    order = list(range(len(params) - 1, -1, -1))
    size = [numel(s) * 4 for _, s in params]
    is_solo = [name in solo for name, _ in params]
    in_last = [False] * len(params)
    taken, full = 0, False
    for i in reversed(order):
        if is_solo[i]:
            continue
        if full or (taken > 0 and taken + size[i] > first_cap_bytes):
            full = True
            continue
        in_last[i] = True
        taken += size[i]
    buckets, cur, cur_bytes, cap, last = [], [], 0, first_cap_bytes, False

    def close():
        nonlocal cur, cur_bytes, cap
        buckets.append(cur)
        cur, cur_bytes, cap = [], 0, cap_bytes

    for i in order:
        if is_solo[i]:
            was_last = last
            if cur:
                close()
            cur, cur_bytes = [i], size[i]
            close()
            last = was_last
            continue
        if in_last[i] and not last:
            if cur:
                close()
            last = True
        elif not in_last[i] and cur and cur_bytes + size[i] > cap:
            close()
        cur.append(i)
        cur_bytes += size[i]
        if not in_last[i] and cur_bytes >= cap:
            close()
    if cur:
        buckets.append(cur)
    return buckets


# ------------------------------------------------------------------------------------------------------------
# The one-GPU profile


class Profile:
    """A measured one-GPU step: totals from a minidp-bench JSON, layer shares from a trace (or FLOPs)."""

    def __init__(self, bench_path, trace_path=None, vocab=50257):
        with open(bench_path) as f:
            bench = json.load(f)
        config = bench["config"]
        if config.get("world") != 1:
            raise SystemExit(f"planner: {bench_path} is a {config.get('world')}-rank run; the profile is one GPU's")
        gpt = config.get("gpt")
        if config.get("model") != "gpt" or not gpt:
            raise SystemExit(f"planner: {bench_path}: only the GPT model is planned")
        self.source = bench_path
        self.config = config
        self.dtype = config["dtype"]
        self.batch = config["batch_size"]
        self.context = gpt["context"]
        self.layers = gpt["layers"]
        self.embd = gpt["embd"]
        self.vocab = vocab
        rows = [r for r in bench["rows"] if r["overlap"] == "off"] or bench["rows"]
        self.step_ms = statistics.median(r["step_ms_median"] for r in rows)
        self.backward_ms = statistics.median(r["backward_ms"] for r in rows)
        self.peak_mib = statistics.median(r["peak_mib"] for r in rows if r.get("peak_mib") is not None)
        self.params = gpt_params(self.layers, self.embd, self.context, vocab)
        self.nparams = sum(numel(s) for _, s in self.params)
        self.trace_path = trace_path
        if trace_path:
            shares, self.optimizer_ms = trace_shares(trace_path)
            self.shares_from = f"the overlap-off steps of {trace_path}"
        else:
            shares, self.optimizer_ms = self.flop_shares(), None
            self.shares_from = "backward FLOPs per layer (no trace given)"
        if self.optimizer_ms is None:
            # AdamW reads and writes its four fp32 arrays once (16 bytes in, 16 out per parameter)
            self.optimizer_ms = 32.0 * self.nparams / (COPY_GBPS * 1e6)
        self.layer_ms = [(name, share * self.backward_ms) for name, share in shares]
        self.forward_ms = self.step_ms - self.backward_ms - self.optimizer_ms
        ends, t = {}, 0.0
        for name, ms in self.layer_ms:
            t += ms
            ends[name] = t
        self.ready_ms = [ends.get(layer_of(name), self.backward_ms) for name, _ in self.params]

    def flop_shares(self):
        c, t, v = self.embd, self.batch * self.context, self.vocab
        block = 4.0 * t * 12 * c * c + 2.5 * 4 * self.batch * self.context ** 2 * c / 2
        flops = [("lm_head", 4.0 * t * c * v), ("ln_f", 1e-3 * block)]
        flops += [(f"h.{i}", block) for i in reversed(range(self.layers))]
        flops += [("wte", 1e-3 * block), ("wpe", 1e-5 * block)]
        total = sum(f for _, f in flops)
        return [(n, f / total) for n, f in flops]

    def describe(self):
        return (f"{self.source}: GPT {self.layers} x {self.embd}, context {self.context}, vocab {self.vocab}, "
                f"{self.dtype} compute, batch {self.batch}: step {self.step_ms:.2f} ms, backward "
                f"{self.backward_ms:.2f} ms, optimizer {self.optimizer_ms:.2f} ms, forward and the rest "
                f"{self.forward_ms:.2f} ms, peak {self.peak_mib:.0f} MiB; layer shares of backward from "
                f"{self.shares_from}")


def trace_steps(trace):
    """Rank 0's traced steps: (label, start, end, [events inside])."""
    events = [e for e in trace["traceEvents"] if e.get("ph") == "X" and e.get("pid") == 0]
    steps = [e for e in events if e.get("cat") == "compute" and "label" in e.get("args", {})]
    out = []
    for s in steps:
        inside = [e for e in events if s["ts"] <= e["ts"] < s["ts"] + s["dur"] and e is not s]
        out.append((s["args"]["label"], s["ts"], s["ts"] + s["dur"], inside))
    return out


def trace_shares(path):
    """Median per-layer backward spans and optimizer phase over a trace's overlap-off steps, as shares."""
    with open(path) as f:
        trace = json.load(f)
    spans, optimizer = {}, []
    order = []
    for label, _, _, inside in trace_steps(trace):
        if "overlap off" not in label:
            continue
        for e in inside:
            if e["name"].startswith("backward ") and e.get("args", {}).get("derived_from"):
                layer = e["name"][len("backward "):]
                if layer not in spans:
                    order.append(layer)
                spans.setdefault(layer, []).append(e["dur"] / 1e3)
            elif e["name"] == "optimizer":
                optimizer.append(e["dur"] / 1e3)
    if not spans:
        raise SystemExit(f"planner: {path} has no overlap-off steps with per-layer backward spans")
    med = [(layer, statistics.median(spans[layer])) for layer in order]
    total = sum(ms for _, ms in med)
    return [(layer, ms / total) for layer, ms in med], (statistics.median(optimizer) if optimizer else None)


# ------------------------------------------------------------------------------------------------------------
# Links and collectives


class Level:
    """One kind of link: alpha (ms) and busbw (GB/s) of a 2-party all-reduce, hop latency, NICs per host."""

    def __init__(self, name, alpha_ms, busbw_gbps, hop_us, nics_per_host, kind, source):
        self.name, self.alpha_ms, self.busbw_gbps = name, alpha_ms, busbw_gbps
        self.hop_ms = hop_us / 1e3
        self.nics_per_host, self.kind, self.source = nics_per_host, kind, source

    @classmethod
    def emulated(cls, config):
        """The emulated link of a minidp-bench run, from its own flags (config["emulated_link"]): exact, no hops."""
        link = config["emulated_link"]
        return cls("emulated", link["latency_us"] / 1e3, link["gbps"], 0.0, 1, "emulated",
                   f"GIVEN: the run's --emulated-gbps {link['gbps']:g} --emulated-latency-us {link['latency_us']:g} "
                   f"(--emulated-world {link['world']})")

    def describe(self):
        return (f"{self.name}: alpha {self.alpha_ms * 1e3:.1f} us, busbw {self.busbw_gbps:.2f} GB/s"
                f"{' per NIC, ' + str(self.nics_per_host) + ' NIC(s) per host' if self.kind == 'net' else ''}, "
                f"hop {self.hop_ms * 1e3:.1f} us per ring step ({self.kind}); {self.source}")


def fit_allreduce(path):
    """alpha (ms), busbw (GB/s) and the relative residuals of t = alpha + 2(W-1)/W bytes / B over a
    minidp-bench-allreduce JSON (least squares in relative error)."""
    with open(path) as f:
        data = json.load(f)
    w = data["world"]
    x = np.array([r["mb"] * MIB * 2 * (w - 1) / w for r in data["rows"]])
    t = np.array([r["time_us"] / 1e3 for r in data["rows"]])
    a = np.stack([np.ones_like(x), x], axis=1) / t[:, None]
    (alpha, per_byte), *_ = np.linalg.lstsq(a, np.ones_like(t), rcond=None)
    alpha = max(alpha, 0.0)
    resid = (alpha + per_byte * x) / t - 1
    return alpha, 1.0 / per_byte / 1e6, [(r["mb"], e) for r, e in zip(data["rows"], resid)]


def parse_level(spec):
    """NAME=FILE.json[,key=value...] (fitted to a minidp-bench-allreduce JSON) or NAME=key=value,... (stated);
    keys alpha_us, busbw_gbps, hop_us, nics_per_host, kind (nvlink | net | emulated: minidp's emulated link, whose
    time per collective is exactly alpha + bytes term), why. NAME alone: a built-in assumption (ib, ethernet)."""
    name, _, rest = spec.partition("=")
    parts = [p for p in rest.split(",") if p] if rest else []
    values, source = {}, None
    if name in ASSUMED_LINKS:
        a = ASSUMED_LINKS[name]
        values = dict(alpha_us=a["alpha_ms"] * 1e3, busbw_gbps=a["busbw_gbps"], hop_us=a["hop_us"],
                      nics_per_host=a["nics_per_host"], kind=a["kind"])
        source = "ASSUMED: " + a["why"]
    if parts and "=" not in parts[0]:
        path = parts.pop(0)
        alpha, busbw, resid = fit_allreduce(path)
        values.update(alpha_us=alpha * 1e3, busbw_gbps=busbw)
        values.setdefault("kind", "nvlink" if "nvlink" in name else "net")
        values.setdefault("nics_per_host", 1)
        source = (f"MEASURED: fitted to {path} (fit within "
                  + ", ".join(f"{mb:g} MB {e * 100:+.0f}%" for mb, e in resid) + ")")
    for p in parts:
        k, _, v = p.partition("=")
        values[k] = v if k in ("kind", "why") else float(v)
    if "why" in values:
        source = "ASSUMED: " + values.pop("why")
    if source is None:
        source = "ASSUMED: as given on the command line"
    missing = {"alpha_us", "busbw_gbps"} - set(values)
    if missing:
        raise SystemExit(f"planner: link '{spec}' lacks {sorted(missing)}")
    kind = values.get("kind", "net")
    hop = values.get("hop_us")
    if kind == "emulated":  # its flags are its time per collective: no ring steps
        hop = 0.0
    elif hop is None:
        hop = NVLINK_HOP_US if kind == "nvlink" else values["alpha_us"] / 2
        source += f"; hop {hop:.1f} us ASSUMED" + (" (half the measured intercept)" if kind != "nvlink" else "")
    return Level(name, values["alpha_us"] / 1e3, values["busbw_gbps"], hop, int(values.get("nics_per_host", 1)),
                 kind, source)


class Topology:
    """N GPUs, G per host over `intra`, hosts joined by `inter` (None: one host)."""

    def __init__(self, n, intra, inter, per_host):
        self.n, self.intra, self.inter = n, intra, inter
        self.g = min(n, per_host) if inter is not None else n
        self.hosts = max(1, math.ceil(n / self.g))
        if self.hosts > 1 and inter is None:
            raise ValueError("more GPUs than one host holds and no link between hosts")

    def levels(self):
        return [lv for lv in (self.intra if self.g > 1 else None, self.inter if self.hosts > 1 else None) if lv]

    def kinds(self):
        return [lv.kind for lv in self.levels()]

    def ring_busbw(self):
        if self.hosts == 1:
            return self.intra.busbw_gbps
        net = self.inter.nics_per_host * self.inter.busbw_gbps
        return min(self.intra.busbw_gbps, net) if self.g > 1 else net

    def base_ms(self):
        return max(max(lv.alpha_ms - 2 * lv.hop_ms, 0.0) for lv in self.levels())

    def ring_steps_ms(self, steps_per_gpu):
        """Latency of `steps_per_gpu` passes around the ring (1: N-1 steps): network steps where it crosses."""
        if self.hosts == 1:
            return steps_per_gpu * (self.n - 1) * self.intra.hop_ms
        crossings = self.hosts if self.hosts > 1 else 0
        intra = (self.n - crossings) * (self.intra.hop_ms if self.g > 1 else 0)
        return steps_per_gpu * (crossings * self.inter.hop_ms + intra) * (self.n - 1) / self.n


def ms_for(nbytes, gbps):
    return nbytes / (gbps * 1e6)


def allreduce_ms(nbytes, topo):
    """(ms, algorithm) of an all-reduce of `nbytes` on every GPU: the cheapest of NCCL's algorithms."""
    n = topo.n
    if n == 1 or nbytes == 0:
        return 0.0, "-"
    base = topo.base_ms()
    ring = base + 2 * topo.ring_steps_ms(1) + ms_for(2 * (n - 1) / n * nbytes, topo.ring_busbw())
    choices = [(ring, "ring")]
    if topo.hosts > 1:
        net_bw = topo.inter.nics_per_host * topo.inter.busbw_gbps
        bw = min(topo.intra.busbw_gbps, net_bw) if topo.g > 1 else net_bw
        intra_hops = (topo.g - 1) * topo.intra.hop_ms if topo.g > 1 else 0
        tree = base + 2 * (math.ceil(math.log2(topo.hosts)) * topo.inter.hop_ms + intra_hops) + ms_for(2 * nbytes, bw)
        choices.append((tree, "tree"))
        if topo.g > 1:
            g, h = topo.g, topo.hosts
            inside = 2 * (topo.intra.alpha_ms + (g - 2) * topo.intra.hop_ms
                          + ms_for((g - 1) / g * nbytes, topo.intra.busbw_gbps))
            across = (topo.inter.alpha_ms + 2 * (h - 2) * topo.inter.hop_ms
                      + ms_for(2 * (h - 1) / h * nbytes / g, net_bw / g))
            choices.append((inside + across, "hierarchical"))
    return min(choices)


def ring_half_ms(nbytes, topo):
    """A reduce-scatter or all-gather over `nbytes` (the whole buffer): a ring of N-1 steps."""
    n = topo.n
    if n == 1 or nbytes == 0:
        return 0.0
    return topo.base_ms() + topo.ring_steps_ms(1) + ms_for((n - 1) / n * nbytes, topo.ring_busbw())


def link_bytes_allreduce(nbytes, n):
    return 2 * (n - 1) / n * nbytes


# ------------------------------------------------------------------------------------------------------------
# Methods: what each bucket costs on the comm stream


class Method:
    """name, wire, zero, powersgd rank, sparse (validation only)."""

    def __init__(self, name, wire="fp32", zero=False, rank=0, sparse=False, gather="end"):
        self.name, self.wire, self.zero, self.rank, self.sparse, self.gather = name, wire, zero, rank, sparse, gather

    def label(self):
        return self.name


def method_from_spec(spec):
    if spec == "ddp":
        return Method("ddp fp32")
    if spec == "bf16":
        return Method("ddp bf16 wire", wire="bf16")
    if spec == "zero1":
        return Method("zero-1", zero=True)
    if spec.startswith("powersgd"):
        r = int(spec[len("powersgd"):] or 4)
        return Method(f"powersgd r{r}", rank=r)
    raise SystemExit(f"planner: unknown method '{spec}' (ddp, bf16, zero1, powersgdR)")


def powersgd_view(shape, r):
    """The hook's view of a gradient: (n, m, r'), n its first extent, m the rest, r' = 0 where it goes uncompressed."""
    n = shape[0] if shape else 1
    m = numel(shape) // n if n else 0
    rr = min(n, m, r)
    return n, m, (rr if (n + m) * rr * POWERSGD_MIN_RATE < n * m else 0)


def powersgd_bucket(profile, bucket, r):
    """(U|P bytes, Q bytes, local-work features) of one bucket; the features, dotted with powersgd_coefs(), are its
    local work in ms: (bytes of its fp32 passes, compressed elements x r', 1 per bucket)."""
    views = [powersgd_view(profile.params[i][1], r) for i in bucket]
    dense = sum(n * m for n, m, rr in views if not rr)
    comp = [(n, m, rr) for n, m, rr in views if rr]
    up = 4.0 * (dense + sum(n * rr for n, _, rr in comp))
    q = 4.0 * sum(m * rr for _, m, rr in comp)
    passes = 4.0 * (POWERSGD_PASSES_COMPRESSED * sum(n * m for n, m, _ in comp) + POWERSGD_PASSES_DENSE * dense)
    return up, q, (passes, float(sum(n * m * rr for n, m, rr in comp)), 1.0)


def powersgd_coefs(pf=None):
    pf = POWERSGD_FITTED if pf is None else pf
    return (1.0 / (pf["pass_gbps"] * 1e6) if pf["pass_gbps"] > 0 else 0.0, pf["ns_per_elem_rank"] * 1e-6,
            pf["bucket_ms"])


BucketCost = collections.namedtuple("BucketCost", "ms gb colls alg link_ms hook_gb")
BucketCost.__doc__ = ("One bucket on the comm stream: its ms, HBM GB of its collectives and casts, collectives, "
                      "algorithm, ms of the collectives alone, HBM GB of PowerSGD's local passes")


def bucket_costs(profile, buckets, method, topo, pf=None):
    """A BucketCost per bucket."""
    out = []
    for b in buckets:
        fp32 = sum(numel(profile.params[i][1]) for i in b) * 4.0
        if method.sparse and len(b) == 1 and profile.params[b[0]][0] == "wte.weight":
            # Row-sparse wte: the ids' all-gather, then every rank's rows (B x T of them, C wide) in the wire dtype
            rows = profile.batch * profile.context
            row_bytes = rows * profile.embd * (2 if method.wire == "bf16" else 4)
            gather = ring_half_ms(row_bytes * topo.n, topo) + ring_half_ms(rows * 4 * topo.n, topo)
            local = ms_for(fp32 + 2 * row_bytes * topo.n, COPY_GBPS)  # zero the dense gradient, add the rows
            out.append(BucketCost(gather + local, (fp32 + 4 * row_bytes * topo.n) / 1e9, 2, "all-gather", gather, 0.0))
            continue
        if method.rank:
            up, q, feats = powersgd_bucket(profile, b, method.rank)
            links = [allreduce_ms(x, topo) for x in (up, q) if x > 0]
            link = sum(t for t, _ in links)
            local = float(np.dot(feats, powersgd_coefs(pf)))
            hbm = 2 * link_bytes_allreduce(up + q, topo.n)
            out.append(BucketCost(link + local, hbm / 1e9, len(links), links[0][1], link, feats[0] / 1e9))
            continue
        wire = fp32 / 2 if method.wire == "bf16" else fp32
        cast = 3 * fp32 if method.wire == "bf16" else 0.0  # fp32 -> bf16 (4 + 2 bytes), back (2 + 4)
        if method.zero:
            cast = cast / 2 + (fp32 / topo.n * 1.5 if method.wire == "bf16" else 0)
            t = ring_half_ms(wire, topo)
            alg = "ring"
            hbm = 2 * (topo.n - 1) / topo.n * wire + cast
        else:
            t, alg = allreduce_ms(wire, topo)
            hbm = 2 * link_bytes_allreduce(wire, topo.n) + cast
        out.append(BucketCost(t + ms_for(cast, CAST_GBPS), hbm / 1e9, 1, alg, t, 0.0))
    return out


# ------------------------------------------------------------------------------------------------------------
# The step


def method_buckets(profile, method, cap_mb, first_mb=1.0):
    """minidp's bucket plan for `method` at cap `cap_mb` (MiB); the row-sparse wte in a bucket of its own."""
    solo = ("wte.weight",) if method.sparse else ()
    return plan_buckets(profile.params, round(cap_mb * MIB), round(min(first_mb, cap_mb) * MIB), solo)


def simulate(profile, method, topo, cap_mb, overlap, first_mb=1.0, fitted=None, pf=None, ef=None):
    """Modelled step of `method` on `topo` at bucket cap `cap_mb` (MiB): dict of step, exposed, comm, ...
    fitted, pf, ef: FITTED, POWERSGD_FITTED and EMULATED_FITTED to use instead of the stored ones."""
    f = FITTED if fitted is None else fitted
    ef = EMULATED_FITTED if ef is None else ef
    bwd, fwd, opt = profile.backward_ms, profile.forward_ms, profile.optimizer_ms
    if topo.n == 1:
        step = profile.step_ms
        return dict(step=step, exposed=0.0, comm=0.0, backward=bwd, slowdown=0.0, buckets=0, alg="-",
                    compute=step)
    buckets = method_buckets(profile, method, cap_mb, first_mb)
    costs = bucket_costs(profile, buckets, method, topo, pf)
    ready = [max(profile.ready_ms[i] for i in b) for b in buckets]
    comm = sum(c.ms for c in costs)
    coll_cost = f["slow_ms_per_coll_nvlink"] if "nvlink" in topo.kinds() else 0.0
    per_gb = f["slow_ms_per_gb_bf16"] if profile.dtype == "bf16" else f["slow_ms_per_gb_fp32"]
    link_cost = ef["slow_ms_per_link_ms"] if "emulated" in topo.kinds() else 0.0
    hook_cost = (POWERSGD_FITTED if pf is None else pf)["slow_ms_per_gb"]
    fixed = f["bucket_ms"] * len(buckets)
    slowdown, beside_gb, beside_colls, beside_link, beside_hook_gb = 0.0, 0.0, 0.0, 0.0, 0.0
    if overlap:
        for _ in range(50):  # the slowdown stretches backward, which changes what overlaps it: a fixed point
            stretch = 1 + slowdown / bwd
            end_bwd = bwd * stretch
            t, beside_gb, beside_colls, beside_link, beside_hook_gb = 0.0, 0.0, 0.0, 0.0, 0.0
            for r, c in zip(ready, costs):
                start = max(r * stretch, t)
                t = start + c.ms
                share = 0.0 if c.ms <= 0 else min(max((end_bwd - start) / c.ms, 0.0), 1.0)
                beside_gb += share * c.gb
                beside_colls += share * c.colls
                beside_link += share * c.link_ms
                beside_hook_gb += share * c.hook_gb
            new = (per_gb * beside_gb + coll_cost * beside_colls + link_cost * beside_link
                   + hook_cost * beside_hook_gb)
            if abs(new - slowdown) < 1e-6:
                break
            slowdown = new
        end_bwd = bwd * (1 + slowdown / bwd)
        exposed = max(0.0, t - end_bwd)
    else:
        end_bwd = bwd
        exposed = comm
    step = fwd + end_bwd + exposed + fixed
    if method.zero:
        shard_opt = opt / topo.n
        gathers = [ring_half_ms(sum(numel(profile.params[i][1]) for i in b) * 4.0, topo) for b in buckets]
        if method.gather == "overlap":
            t = 0.0
            for k, g in enumerate(gathers):
                t = max(shard_opt * (k + 1) / len(gathers), t) + g
            tail = max(t, shard_opt)
        else:
            tail = shard_opt + sum(gathers)
        step += tail
    else:
        step += opt
    algs = sorted({c.alg for c in costs})
    return dict(step=step, exposed=exposed, comm=comm, backward=end_bwd, slowdown=slowdown,
                buckets=len(buckets), alg="/".join(algs), compute=step - exposed, beside_gb=beside_gb,
                beside_colls=beside_colls, beside_link=beside_link, beside_hook_gb=beside_hook_gb)


def hidden_share(profile, method, topo, cap_mb, first_mb=1.0, fitted=None):
    """(on, off, H) with minidp-bench's H = (T_off - T_on) / min(T_comm, T_backward)."""
    on = simulate(profile, method, topo, cap_mb, True, first_mb, fitted)
    off = simulate(profile, method, topo, cap_mb, False, first_mb, fitted)
    hideable = min(off["comm"], off["backward"])
    h = (off["step"] - on["step"]) / hideable if hideable > 0 else float("nan")
    return on, off, h


def memory_mib(profile, method, n):
    p = profile.nparams
    extra = 0.0
    if method.wire == "bf16":
        extra += 2.0 * p
    if method.zero:
        extra -= (n - 1) / n * ADAMW_STATE_BYTES * p
    if method.rank:  # the hook's error feedback covers whole buckets; then U|P and Q
        views = [powersgd_view(s, method.rank) for _, s in profile.params]
        extra += 4.0 * p + 4.0 * sum((n + m) * r if r else n * m for n, m, r in views)
    return profile.peak_mib + (extra / MIB if n > 1 else 0.0)


CAPS_MB = (1, 2, 5, 10, 25, 50, 100, 200, 400)


def best_cap(profile, method, topo, first_mb=1.0):
    best = None
    for cap in CAPS_MB:
        r = simulate(profile, method, topo, cap, True, first_mb)
        if best is None or r["step"] < best[1]["step"] - 1e-9:
            best = (cap, r)
    return best


# ------------------------------------------------------------------------------------------------------------
# The two-GPU measurements (docs/results) and the fit

def measured_job(directory, kind, profile=None, link=None, trace=None):
    """A job that ran minidp-bench on two GPUs: its directory under docs/results, the link kind, the one-GPU profile
    (default: its weak_np1.json), the link's raw all-reduce (its allreduce.json) and the trace that shapes backward
    per layer (its trace_fp32.json)."""
    return dict(dir=directory, kind=kind, profile=profile or f"{directory}/weak_np1.json",
                link=link or f"{directory}/allreduce.json", trace=trace or f"{directory}/trace_fp32.json")


# Where a job lacks one of its inputs, the nearest measurement of the same thing, and why.
_FIRST, _SECOND = "h200x2-2026-11-30", "h200x2-2026-11-30-s16"
MEASURED_JOBS = [
    # the first two-GPU jobs (commit 0ddc8df) kept no trace: the later job's fp32 trace (same model and shape)
    measured_job(f"{_FIRST}/nvlink", "nvlink", trace=f"{_SECOND}/nvlink/trace_fp32.json"),
    measured_job(f"{_FIRST}/socket", "net", trace=f"{_SECOND}/nvlink/trace_fp32.json"),
    measured_job(f"{_SECOND}/nvlink", "nvlink"),
    measured_job(f"{_SECOND}/socket", "net"),
    # bf16 compute: the job ran no one-GPU run and no raw all-reduce: the one-GPU bf16 run of the final one-GPU
    # job (h200-2026-11-30-s15: same shape, batch and code path) and the NVLink all-reduce of the job before it on
    # the same machine kind (its sweeps began 16:40 UTC, this job's 16:52)
    measured_job(f"{_SECOND}/nvlink-bf16", "nvlink", profile="h200-2026-11-30-s15/mdp_gpt2_bf16_b8.json",
                 link=f"{_SECOND}/nvlink/allreduce.json", trace=f"{_SECOND}/nvlink/trace_fp32.json"),
]


def job_topology(job, n=2):
    level = parse_level(f"{'nvlink' if job['kind'] == 'nvlink' else 'socket'}={os.path.join(RESULTS, job['link'])}")
    if job["kind"] == "nvlink":
        return Topology(n, level, None, n)
    return Topology(n, None, level, 1)  # every GPU its own "host": the socket transport joins them all


def measured_runs(results=RESULTS):
    """Every two-GPU minidp-bench median in `results`: dicts of job, file, method, cap, overlap, measured rows.
    Raises if a two-GPU minidp-bench JSON belongs to no job of MEASURED_JOBS."""
    jobs = {j["dir"]: j for j in MEASURED_JOBS}
    runs, skipped = [], []
    for dirpath, _, files in sorted(os.walk(results)):
        for name in sorted(files):
            path = os.path.join(dirpath, name)
            data = bench_json(path)
            if data is None:
                continue
            config = data.get("config", {})
            rel = os.path.relpath(dirpath, results)
            world = config.get("world") or data.get("world")
            if name.startswith("torch_"):
                if world == 2:
                    skipped.append((os.path.join(rel, name), "PyTorch DDP: no one-GPU profile of its fp32 step"))
                continue
            if world != 2 or config.get("emulated") or "step_ms_median" not in (data["rows"] or [{}])[0]:
                continue  # one GPU, or one process modelling a link: no two-GPU measurement
            if rel not in jobs:
                raise SystemExit(f"planner: {path} is a two-GPU run of no job in MEASURED_JOBS")
            job = jobs[rel]
            zero = bool(config.get("zero"))
            wire = "bf16" if "bf16" in (config.get("grad_comm"), config.get("comm_hook")) else "fp32"
            method = Method(name[:-5], wire=wire, zero=zero,
                            sparse="sparse" in name, gather=config.get("zero_gather", "end"))
            runs += median_runs(job, os.path.join(rel, name), method, data)
    return runs, skipped


# Emulated-link runs (minidp-bench --comm emulated): one process on one GPU modelling 2 ranks over a stated link, the
# comm hooks' own work really running. A job: its directory, the comm hooks whose code there is the code modelled
# here, its one-GPU run (hooks_one_gpu.json) as the profile, and the fp32 trace for the layer shares (no bf16 trace
# exists).
def emulated_job(directory, hooks):
    return dict(dir=directory, kind="emulated", hooks=hooks, profile=f"{directory}/hooks_one_gpu.json",
                trace=f"{_SECOND}/nvlink/trace_fp32.json")


EMULATED_JOBS = [
    emulated_job("h200-2026-12-01-b/final", ("powersgd",)),  # PowerSGD at d583825, ranks 4 and 8, caps 25 and 50
    emulated_job("h200-2026-12-01-b/final/with100", ("powersgd",)),  # the same commit, caps 25, 50 and 100
    emulated_job("h200-2026-12-01/hooks_a", ("bf16",)),  # dense bf16 on the wire (0d9273e; the hook unchanged since)
]
# The other emulated runs in docs/results, and why the check leaves them out.
EMULATED_LEFT_OUT = {
    "h200-2026-11-29": "8 emulated ranks at 10 us, GPT 85 M in fp32, no comm hook: not part of the hook check",
    "h200-2026-11-29/run5": "8 emulated ranks at 10 us, GPT 85 M in fp32, no comm hook: not part of the hook check",
    "h200-2026-12-01-b/before": "PowerSGD at 6f307c9 (per-matrix local work, cuBLAS products): not the hook modelled",
    "h200-2026-12-01-b/batched": "PowerSGD at 7576fe0 (products not split into ~528 blocks): not the hook modelled",
    "h200-2026-12-01/hooks_a": "PowerSGD before its local work was batched per bucket: not the hook modelled",
    "h200-2026-12-01/hooks_b": "PowerSGD before its local work was batched per bucket: not the hook modelled",
    "h200-2026-12-01/hooks_c": "PowerSGD before its local work was batched per bucket: not the hook modelled",
    "h200-2026-12-01-c/psgd_batched": "PowerSGD with its products batched too (2071a99): the local-work constants are "
    "fitted to d583825's hook, and these 25 MB runs alone are too few to fit them again",
    "h200-2026-12-01-c/rank6": "PowerSGD with its products batched too (2071a99), rank 6 at 25 MB only: as psgd_batched",
    "h200-2026-12-01-c/gqa": "PowerSGD with its products batched too (2071a99), rank 6 at 25 MB only: as psgd_batched",
    "h100-2026-12-06/zero_emulated": "ZeRO stages against DDP at 8 emulated ranks, no comm hook: not part of the hook "
    "check",
}


def emulated_method(name, config):
    """The comm hook of an emulated run: its config names the hook, the file name its PowerSGD rank."""
    hook = config.get("comm_hook")
    sparse = "sparse" in name
    if hook == "bf16":
        return Method(name[:-5], wire="bf16", sparse=sparse)
    if hook == "powersgd":
        rank = re.search(r"powersgdrank_(\d+)", name)
        if not rank:
            raise SystemExit(f"planner: {name}: a PowerSGD run whose file name gives no rank")
        return Method(name[:-5], rank=int(rank.group(1)), sparse=sparse)
    return None


def emulated_runs(results=RESULTS):
    """Every emulated-link minidp-bench median of EMULATED_JOBS' hooks: dicts as measured_runs', plus the files left
    out with why. Raises if an emulated run belongs to neither EMULATED_JOBS nor EMULATED_LEFT_OUT."""
    jobs = {j["dir"]: j for j in EMULATED_JOBS}
    runs, skipped = [], []
    for dirpath, _, files in sorted(os.walk(results)):
        for name in sorted(files):
            data = bench_json(os.path.join(dirpath, name))
            if data is None or not data.get("config", {}).get("emulated"):
                continue
            config = data["config"]
            rel = os.path.relpath(dirpath, results)
            method = emulated_method(name, config)
            job = jobs.get(rel)
            if job is None or method is None or config.get("comm_hook") not in job["hooks"]:
                if rel not in EMULATED_LEFT_OUT:
                    raise SystemExit(f"planner: {rel}/{name} is an emulated run of no job in EMULATED_JOBS and not in "
                                     f"EMULATED_LEFT_OUT")
                skipped.append((os.path.join(rel, name), EMULATED_LEFT_OUT[rel]))
                continue
            runs += median_runs(job, os.path.join(rel, name), method, data)
    return runs, skipped


def median_runs(job, path, method, data):
    """One run per median row of a minidp-bench result: its job, file, method, cap, overlap, row and config."""
    return [dict(job=job, file=path, method=method, cap=r.get("bucket_mb_used") or r["bucket_mb"],
                 cap_label=str(r["bucket_mb"]), overlap=r["overlap"] == "on", measured=r, config=data["config"])
            for r in data["rows"] if r["repeat"] != "all"]


def bench_json(path):
    """A minidp-bench result (a dict with rows), or None."""
    if not path.endswith(".json"):
        return None
    try:
        with open(path) as f:
            data = json.load(f)
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) and "rows" in data else None


_profiles = {}


def job_profile(job):
    key = (job["profile"], job["trace"])
    if key not in _profiles:
        _profiles[key] = Profile(os.path.join(RESULTS, job["profile"]), os.path.join(RESULTS, job["trace"]))
    return _profiles[key]


def predict_run(run, fitted=None, pf=None, ef=None):
    profile = job_profile(run["job"])
    if run["job"]["kind"] == "emulated":
        n = run["config"]["emulated_link"]["world"]
        topo = Topology(n, Level.emulated(run["config"]), None, n)
    else:
        topo = job_topology(run["job"])
    first = run["config"].get("first_bucket_mb", 1.0)
    return simulate(profile, run["method"], topo, float(run["cap"]), run["overlap"], first, fitted, pf, ef)


def fit_parameters(results=RESULTS, verbose=False):
    """Least squares, in two parts:
    bucket_ms: the overlap-off runs' compute_ms above the one-GPU step, against their number of buckets (through
    the origin; ZeRO runs left out: their compute holds the all-gather);
    the slowdown: the overlap-on runs' compute_ms minus their overlap-off partner's (same file and cap), against
    the modelled HBM GB and collectives of the buckets that ran beside backward (non-negative; iterated because
    what overlaps depends on the slowdown)."""
    runs, _ = measured_runs(results)
    fitted = {k: 0.0 for k in FITTED}
    xs, ys = [], []
    for run in runs:
        if run["overlap"] or run["method"].zero:
            continue
        profile = job_profile(run["job"])
        pred = predict_run(run, fitted)
        xs.append(pred["buckets"])
        ys.append(run["measured"]["compute_ms"] - profile.step_ms)
    fitted["bucket_ms"] = float(np.dot(xs, ys) / np.dot(xs, xs))
    pairs = {}
    for run in runs:
        key = (run["file"], run["cap_label"], run["measured"]["repeat"])
        pairs.setdefault(key, {})[run["overlap"]] = run
    for _ in range(10):
        a, y = [], []
        for key, p in sorted(pairs.items()):
            if True not in p or False not in p or p[True]["method"].zero:
                continue
            on = p[True]
            feats = overlap_features(on, fitted)
            off_buckets = predict_run(p[False], fitted)["buckets"]
            a.append(feats)
            y.append(on["measured"]["compute_ms"] - p[False]["measured"]["compute_ms"]
                     - fitted["bucket_ms"] * (feats[3] - off_buckets))
        a = np.array(a)[:, :3]
        coef = nnls(a, np.array(y))
        new = dict(fitted, slow_ms_per_gb_fp32=coef[0], slow_ms_per_gb_bf16=coef[1], slow_ms_per_coll_nvlink=coef[2])
        if all(abs(new[k] - fitted[k]) < 1e-7 for k in new):
            break
        fitted = new
    if verbose:
        resid = np.array(y) - a @ coef
        print(f"fit over {len(y)} overlap pairs: slowdown residual rms {np.sqrt(np.mean(resid ** 2)):.3f} ms, "
              f"largest {np.max(np.abs(resid)):.3f} ms; bucket_ms over {len(xs)} overlap-off runs")
    return {k: float(v) for k, v in fitted.items()}


def fit_emulated(results=RESULTS, verbose=False):
    """Least squares over the emulated-link runs (EMULATED_JOBS), in two parts:
    POWERSGD_FITTED: the PowerSGD runs' overlap-off comm_ms minus their collectives (the link's exact time), against
    the local-work features of their buckets summed (bytes of the fp32 passes, compressed elements x r', buckets);
    EMULATED_FITTED: every run's compute_ms with overlap on minus its overlap-off partner's, less what the two-GPU
    fit (FITTED) gives the HBM traffic beside backward, against the ms of the link's kernels beside backward
    (through the origin; iterated because what overlaps depends on the slowdown)."""
    runs, _ = emulated_runs(results)
    zero_pf = {k: 0.0 for k in POWERSGD_FITTED}  # local work and its slowdown left out: the collectives alone
    a, y = [], []
    for run in runs:
        if run["overlap"] or not run["method"].rank:
            continue
        profile = job_profile(run["job"])
        buckets = method_buckets(profile, run["method"], float(run["cap"]), run["config"].get("first_bucket_mb", 1.0))
        a.append(np.sum([powersgd_bucket(profile, b, run["method"].rank)[2] for b in buckets], axis=0))
        y.append(run["measured"]["comm_ms"] - predict_run(run, pf=zero_pf)["comm"])
    a, y = np.array(a), np.array(y)
    coef = nnls(a, y)
    pf = dict(pass_gbps=1.0 / (coef[0] * 1e6) if coef[0] > 0 else 0.0, ns_per_elem_rank=coef[1] * 1e6,
              bucket_ms=coef[2], slow_ms_per_gb=0.0)
    if verbose:
        resid = a @ coef - y
        print(f"PowerSGD's local work over {len(y)} overlap-off runs: residual rms {np.sqrt(np.mean(resid ** 2)):.3f} "
              f"ms, largest {np.max(np.abs(resid)):.3f} ms")
    pairs = {}
    for run in runs:
        pairs.setdefault((run["file"], run["cap_label"], run["measured"]["repeat"]), {})[run["overlap"]] = run
    pairs = [p for _, p in sorted(pairs.items()) if True in p and False in p]
    ef = {"slow_ms_per_link_ms": 0.0}
    for _ in range(20):
        xs, ys = [], []
        for p in pairs:
            on = predict_run(p[True], pf=pf, ef=ef)
            per_gb = FITTED["slow_ms_per_gb_bf16" if job_profile(p[True]["job"]).dtype == "bf16" else
                            "slow_ms_per_gb_fp32"]
            xs.append([on["beside_hook_gb"], on["beside_link"]])
            ys.append(p[True]["measured"]["compute_ms"] - p[False]["measured"]["compute_ms"] - per_gb * on["beside_gb"])
        xs, ys = np.array(xs), np.array(ys)
        coef = nnls(xs, ys)
        new_pf, new_ef = dict(pf, slow_ms_per_gb=coef[0]), {"slow_ms_per_link_ms": coef[1]}
        done = all(abs(new_pf[k] - pf[k]) < 1e-7 for k in pf) and \
            abs(new_ef["slow_ms_per_link_ms"] - ef["slow_ms_per_link_ms"]) < 1e-7
        pf, ef = new_pf, new_ef
        if done:
            break
    if verbose:
        resid = ys - xs @ coef
        print(f"backward's slowdown beside the hooks on the emulated link over {len(ys)} pairs: residual rms "
              f"{np.sqrt(np.mean(resid ** 2)):.3f} ms, largest {np.max(np.abs(resid)):.3f} ms")
    return {k: float(v) for k, v in pf.items()}, ef


def overlap_features(run, fitted):
    """(HBM GB beside fp32 backward, HBM GB beside bf16 backward, NVLink collectives, buckets) in the model of an
    overlap-on run: what ran beside backward, each bucket counted by the share of its time that overlapped it."""
    pred = predict_run(run, fitted)
    gb, colls = pred["beside_gb"], pred["beside_colls"]
    nv = colls if run["job"]["kind"] == "nvlink" else 0.0
    bf16 = job_profile(run["job"]).dtype == "bf16"
    return [0.0 if bf16 else gb, gb if bf16 else 0.0, nv, pred["buckets"]]


def nnls(a, y):
    """Non-negative least squares by elimination of negative coefficients (few columns)."""
    active = list(range(a.shape[1]))
    while True:
        coef = np.zeros(a.shape[1])
        if active:
            sol, *_ = np.linalg.lstsq(a[:, active], y, rcond=None)
            coef[active] = sol
        neg = [i for i in active if coef[i] < 0]
        if not neg:
            return coef
        active.remove(min(neg, key=lambda i: coef[i]))


# ------------------------------------------------------------------------------------------------------------
# The command


def parse_gpus(text):
    return [int(x) for x in text.split(",") if x]


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--profile", help="one-GPU minidp-bench JSON (e.g. weak_np1.json)")
    ap.add_argument("--layer-trace", help="minidp-bench trace whose overlap-off steps give backward per layer")
    ap.add_argument("--links", nargs="+", default=[],
                    help="NAME=allreduce.json[,hop_us=..] (measured) or NAME=alpha_us=..,busbw_gbps=..,hop_us=..,"
                         "nics_per_host=..,kind=net,why=.. (stated); ib and ethernet alone take the built-in "
                         "assumptions")
    ap.add_argument("--intra", default="nvlink", help="the link level inside a host")
    ap.add_argument("--gpus-per-host", type=int, default=8)
    ap.add_argument("--gpus", type=parse_gpus, default=[2 ** k for k in range(11)])
    ap.add_argument("--methods", default="ddp,bf16,zero1,powersgd4")
    ap.add_argument("--vocab", type=int, default=50257)
    ap.add_argument("--first-bucket-mb", type=float, default=1.0)
    ap.add_argument("--png", help="draw tokens/s against GPUs per link into this PNG")
    ap.add_argument("--json", help="also write every row as JSON")
    ap.add_argument("--fit", action="store_true", help="fit FITTED to the two-GPU runs in docs/results and print it")
    ap.add_argument("--fit-emulated", action="store_true",
                    help="fit POWERSGD_FITTED and EMULATED_FITTED to the emulated runs in docs/results; print them")
    args = ap.parse_args(argv)
    if args.fit:
        print(json.dumps(fit_parameters(verbose=True), indent=2))
        return 0
    if args.fit_emulated:
        pf, ef = fit_emulated(verbose=True)
        print(json.dumps(dict(POWERSGD_FITTED=pf, EMULATED_FITTED=ef), indent=2))
        return 0
    if not args.profile or not args.links:
        ap.error("--profile and --links are required (or --fit)")
    profile = Profile(args.profile, args.layer_trace, args.vocab)
    levels = {lv.name: lv for lv in (parse_level(s) for s in args.links)}
    if args.intra not in levels:
        ap.error(f"--intra {args.intra}: no such link in --links")
    intra = levels[args.intra]
    methods = [method_from_spec(m) for m in args.methods.split(",")]
    scenarios = [(f"{intra.name} inside a host only", None)] + [
        (f"{intra.name} x{args.gpus_per_host} + {lv.name}", lv) for lv in levels.values() if lv is not intra]
    tokens_per_gpu = profile.batch * profile.context

    print("ASSUMPTIONS AND INPUTS")
    print(f"- profile: {profile.describe()}")
    for lv in levels.values():
        print(f"- link {lv.describe()}")
    print(f"- {args.gpus_per_host} GPUs per host joined by {intra.name}; one host up to {args.gpus_per_host} GPUs; "
          f"NCCL's NVLS/CollNet left out (the measurements ran with NCCL_NVLS_ENABLE=0)")
    print("- FITTED to the two-GPU runs in docs/results (planner.py --fit): backward slows beside the comm stream by "
          f"{FITTED['slow_ms_per_gb_fp32']:.3f} ms (fp32 compute) / {FITTED['slow_ms_per_gb_bf16']:.3f} ms "
          f"(bf16 compute) per GB of HBM traffic of its kernels and "
          f"{FITTED['slow_ms_per_coll_nvlink'] * 1e3:.1f} us per NVLink collective; every step costs "
          f"{FITTED['bucket_ms'] * 1e3:.1f} us per bucket")
    print(f"- bf16 wire casts at {CAST_GBPS:.0f} GB/s (the scalar weight casts of the 30 ms profile, "
          f"docs/results/h200-2026-11-30-s15/profile_gpt2_bf16_b8_30ms.txt); optimizer AdamW (state 8 bytes/param)")
    pf = POWERSGD_FITTED
    print(f"- PowerSGD as minidp's hook: two collectives per bucket (U|P, then Q), compressed when (n + m) r' x "
          f"{POWERSGD_MIN_RATE:g} < n m; its local work per bucket FITTED to the overlap-off comm times of the hook on "
          f"the emulated link (planner.py --fit-emulated; "
          + ", ".join(f"{j['dir']}" for j in EMULATED_JOBS if "powersgd" in j["hooks"])
          + f"): {POWERSGD_PASSES_COMPRESSED} fp32 passes per compressed element ({POWERSGD_PASSES_DENSE} per "
          f"uncompressed) at {pf['pass_gbps']:.0f} GB/s, plus {pf['ns_per_elem_rank'] * 1e3:.2f} ps per compressed "
          f"element and unit of rank, plus {pf['bucket_ms'] * 1e3:.0f} us per bucket; backward slows by "
          f"{pf['slow_ms_per_gb']:.3f} ms per GB of those passes beside it (FITTED, overlap-on pairs); fitted at "
          f"ranks 4 and 8 on one H200")
    if any(lv.kind == "emulated" for lv in levels.values()):
        print(f"- beside minidp's emulated link backward slows by {EMULATED_FITTED['slow_ms_per_link_ms']:.3f} ms "
              f"per ms of the link's kernel (16 CTAs held for its modelled time; FITTED, planner.py --fit-emulated)")
    print(f"- collectives beside backward are not slowed themselves (NVLink buckets lose 13-63% of their bandwidth "
          f"beside backward, docs/benchmarks.md; they stay hidden on these shapes); the batch per GPU is fixed "
          f"({profile.batch} x {profile.context} tokens: weak scaling)")
    print()
    rows = []
    for title, inter in scenarios:
        print(f"## {title}")
        print(f"{'GPUs':>5} {'method':<15} {'cap MB':>6} {'step ms':>9} {'exposed':>8} {'comm ms':>9} {'H':>5} "
              f"{'slow ms':>7} {'mem GiB':>7} {'Mtok/s':>8} {'scaling':>7} {'algorithm':<12}")
        shown = 0
        for n in args.gpus:
            if inter is None and n > args.gpus_per_host:
                continue
            quiet = inter is not None and n <= args.gpus_per_host  # one host: the first table's rows
            topo = Topology(n, intra, inter, args.gpus_per_host)
            for m in methods:
                if n == 1:
                    cap, r = 25, simulate(profile, m, topo, 25, True)
                    h = float("nan")
                else:
                    cap, r = best_cap(profile, m, topo, args.first_bucket_mb)
                    _, _, h = hidden_share(profile, m, topo, cap, args.first_bucket_mb)
                tps = n * tokens_per_gpu / r["step"] * 1e3
                scaling = profile.step_ms / r["step"]
                mem = memory_mib(profile, m, n) / 1024
                if not quiet:
                    shown += 1
                    print(f"{n:>5} {m.label():<15} {cap:>6g} {r['step']:>9.2f} {r['exposed']:>8.2f} "
                          f"{r['comm']:>9.2f} {h:>5.2f} {r['slowdown']:>7.2f} {mem:>7.2f} {tps / 1e6:>8.3f} "
                          f"{scaling:>7.3f} {r['alg']:<12}")
                rows.append(dict(scenario=title, gpus=n, method=m.label(), cap_mb=cap, step_ms=r["step"],
                                 exposed_ms=r["exposed"], comm_ms=r["comm"], H=h, slowdown_ms=r["slowdown"],
                                 memory_gib=mem, tokens_per_s=tps, scaling=scaling, algorithm=r["alg"]))
        if not shown:
            print(f"  (no GPU count above {args.gpus_per_host} asked for)")
        print()
    if args.json:
        with open(args.json, "w") as f:
            json.dump(dict(profile=profile.describe(), links=[lv.describe() for lv in levels.values()],
                           fitted=FITTED, rows=rows), f, indent=1)
    if args.png:
        draw(rows, scenarios, methods, profile, args.png)
    return 0


def draw(rows, scenarios, methods, profile, path):
    """Per link, tokens/s against GPUs (top) and the same per GPU against one GPU's (bottom)."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    one = profile.batch * profile.context / profile.step_ms * 1e3  # one GPU's tokens/s
    fig, axes = plt.subplots(2, len(scenarios), figsize=(4.2 * len(scenarios), 7.2), sharey="row", squeeze=False)
    for col, (title, _) in enumerate(scenarios):
        mine = [r for r in rows if r["scenario"] == title]
        gpus = sorted({r["gpus"] for r in mine})
        top, bottom = axes[0][col], axes[1][col]
        top.plot(gpus, [g * one for g in gpus], "k:", label="linear (one GPU x N)")
        bottom.axhline(1.0, color="k", ls=":")
        for m in methods:
            pts = [(r["gpus"], r["tokens_per_s"]) for r in mine if r["method"] == m.label()]
            top.plot([p[0] for p in pts], [p[1] for p in pts], "o-", ms=3, label=m.label())
            bottom.plot([p[0] for p in pts], [p[1] / (p[0] * one) for p in pts], "o-", ms=3, label=m.label())
        for ax in (top, bottom):
            ax.set_xscale("log", base=2)
            ax.grid(True, which="both", alpha=0.3)
        top.set_yscale("log")
        top.set_title(title, fontsize=10)
        bottom.set_xlabel("GPUs")
        bottom.set_ylim(0, 1.05)
    axes[0][0].set_ylabel("tokens/s (modelled, best bucket cap)")
    axes[1][0].set_ylabel("tokens/s per GPU / one GPU's")
    axes[0][0].legend(fontsize=8)
    fig.suptitle(f"minidp planner (modelled, not measured): GPT {profile.layers} x {profile.embd}, {profile.dtype} "
                 f"compute, batch {profile.batch} x {profile.context} tokens per GPU, overlap on", fontsize=11)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    print(f"picture written to {path}")


if __name__ == "__main__":
    sys.exit(main())
