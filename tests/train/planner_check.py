#!/usr/bin/env python3
"""tools/planner.py against every two-GPU median recorded in docs/results (CPU only, no build needed).

    python3 tests/train/planner_check.py

1. The fit: `fit_parameters()` over the two-GPU runs gives the FITTED constants stored in planner.py (so the
   constants are the fit's, not tuned by hand).
2. The bucket plans: every plan minidp-bench printed in docs/results is the planner's plan at some cap.
3. The step: for every minidp-bench row of every two-GPU job in docs/results (NVLink and socket; fp32 and bf16
   compute; fp32, bf16 and row-sparse wires; ZeRO-1; each cap; overlap on and off) the planner predicts the
   median step from the job's one-GPU profile, its link's raw all-reduce and the fitted parameters; each error
   is printed. Every prediction must be within 10% of the measured median, except the KNOWN_MISSES below: those
   are printed with what the link did in that run, and must still miss (so the list stays true).
   PyTorch DDP rows are listed as not modelled (no one-GPU profile of its fp32 step exists).
4. The comm hooks on the emulated link: for every median of the hooks modelled in the emulated-link jobs (PowerSGD
   at ranks 4 and 8, dense bf16 on the wire with and without the row-sparse wte; each cap; overlap on and off) the
   planner predicts the median step from the same job's one-GPU run, the link's own flags and the fitted
   parameters (POWERSGD_FITTED and EMULATED_FITTED, re-fitted in 1); each error is printed, every prediction must
   be within 10%. The emulated runs it leaves out are printed with why.
5. Memory: the modelled memory per GPU against the measured peaks (within 3% where the cap was fixed, ZeRO off).
6. The command: planner.py's table for 1, 2, 8 and 64 GPUs runs and prints.
"""
import glob
import io
import os
import re
import sys
from contextlib import redirect_stdout

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "tools"))
import planner  # noqa: E402

BAR = 0.10

# The two-GPU medians the model cannot bring within 10%, all over the socket transport: in those runs the link
# itself ran 15-30% away from the raw all-reduce the job measured before them (printed beside each: the run's
# measured comm time against the model's at the raw link speed). The loopback socket's speed drifts between
# runs of one job (docs/benchmarks.md, "Bucket all-reduces inside training": 2.8-3.8 GB/s; minidp-bench's own
# link probes (`--bucket-mb auto`) in those jobs: 4.3-4.5 GB/s in h200x2-2026-11-30's fp32 sweep, 3.3-3.4 in its
# bf16 sweep; 3.5-3.7 and 2.7-2.9 in h200x2-2026-11-30-s16's), which no link measurement taken before a run can
# predict.
KNOWN_MISSES = {
    ("h200x2-2026-11-30-s16/socket/bench_fp32.json", "auto", "on"): "link faster than its raw all-reduce",
    ("h200x2-2026-11-30-s16/socket/bench_fp32.json", "5.0", "off"): "link faster than its raw all-reduce",
    ("h200x2-2026-11-30-s16/socket/bench_fp32.json", "5.0", "on"): "link faster than its raw all-reduce",
    ("h200x2-2026-11-30/socket/bench_bf16.json", "25.0", "off"): "link slower than its raw all-reduce",
    ("h200x2-2026-11-30/socket/bench_fp32.json", "25.0", "on"): "link slower than its raw all-reduce",
    ("h200x2-2026-11-30/socket/bench_zero_end.json", "200.0", "off"): "reduce-scatter/all-gather slower than the raw",
    ("h200x2-2026-11-30/socket/bench_zero_end.json", "200.0", "on"): "reduce-scatter/all-gather slower than the raw",
    ("h200x2-2026-11-30/socket/bench_zero_overlap.json", "200.0", "off"): "reduce-scatter/all-gather slower",
    ("h200x2-2026-11-30/socket/bench_zero_overlap.json", "200.0", "on"): "reduce-scatter/all-gather slower",
}


def check_fit():
    pf, ef = planner.fit_emulated()
    ok = True
    for name, command, fitted, stored in (("FITTED", "--fit", planner.fit_parameters(), planner.FITTED),
                                          ("POWERSGD_FITTED", "--fit-emulated", pf, planner.POWERSGD_FITTED),
                                          ("EMULATED_FITTED", "--fit-emulated", ef, planner.EMULATED_FITTED)):
        print(f"fitted parameters (planner.py {command}) against planner.{name}:")
        bad = []
        for key, value in fitted.items():
            print(f"  {key:<26} fit {value:.6g}  stored {stored[key]:.6g}")
            if abs(value - stored[key]) > 1e-4 * max(abs(value), 1e-6):
                bad.append(key)
        if bad:
            print(f"FAIL: {name} differs from the fit in {bad}: run tools/planner.py {command} and store its output")
            ok = False
    return ok


def check_plans():
    params = planner.gpt_params(12, 768, 1024, 50257)
    mine = []
    for solo in ((), ("wte.weight",)):
        for cap in (1, 2, 5, 10, 25, 50, 100, 200, 400, 622):
            plan = planner.plan_buckets(params, round(cap * planner.MIB), round(min(1, cap) * planner.MIB), solo)
            mine.append([sum(planner.numel(params[i][1]) * 4 for i in b) for b in plan])
    count, missing = 0, 0
    for path in sorted(glob.glob(os.path.join(planner.RESULTS, "h200x2-*", "*", "bench_*.txt"))):
        with open(path) as f:
            text = f.read()
        for block in text.split("bucket plan: ")[1:]:
            n = int(block.split()[0])
            sizes = [int(x) for x in re.findall(r"^  bucket \d+: F32, (\d+) bytes", block, re.M)][:n]
            count += 1
            if sizes not in mine:
                missing += 1
                print(f"FAIL: a plan of {n} buckets in {path} is not the planner's at any cap")
    print(f"bucket plans: {count} printed in docs/results, {count - missing} reproduced by planner.plan_buckets")
    return count > 0 and missing == 0


def check_steps():
    runs, skipped = planner.measured_runs()
    print(f"\n{len(runs)} two-GPU minidp-bench medians; prediction error = predicted / measured - 1")
    header = (f"{'run (docs/results/...)':<52} {'cap':>9} {'ovl':>3} {'measured':>9} {'predicted':>9} {'error':>7}  "
              f"note")
    print(header)
    failures, known_hit, known_gone = [], [], []
    worst = 0.0
    for run in runs:
        m = run["measured"]
        pred = planner.predict_run(run)
        err = pred["step"] / m["step_ms_median"] - 1
        worst = max(worst, abs(err))
        overlap = "on" if run["overlap"] else "off"
        key = (run["file"], run["cap_label"], overlap)
        cap = f"{run['cap_label']}" + (f"({float(run['cap']):g})" if run["cap_label"] == "auto" else "")
        note = ""
        if key in KNOWN_MISSES:
            link = pred["comm"] / m["comm_ms"] if m["comm_ms"] > 0 else float("nan")
            note = (f"KNOWN MISS: {KNOWN_MISSES[key]}: this run's collectives took {m['comm_ms']:.1f} ms, the model's "
                    f"at the raw link {pred['comm']:.1f} ms (link at {link:.2f}x its raw speed)")
            (known_hit if abs(err) > BAR else known_gone).append(key)
        elif abs(err) > BAR:
            note = "FAIL: beyond 10%"
            failures.append(key)
        print(f"{run['file']:<52} {cap:>9} {overlap:>3} {m['step_ms_median']:>9.2f} {pred['step']:>9.2f} "
              f"{err * 100:>+6.1f}%  {note}")
    for path, why in skipped:
        print(f"{path:<52} not modelled: {why}")
    inside = len(runs) - len(failures) - len(known_hit)
    print(f"\n{inside} of {len(runs)} within 10% (largest error of all {worst * 100:.1f}%); "
          f"{len(known_hit)} known misses, all over the socket transport; {len(failures)} unexpected misses")
    ok = True
    if failures:
        print(f"FAIL: {len(failures)} prediction(s) beyond 10%: {failures}")
        ok = False
    if known_gone:
        print(f"FAIL: known misses now within 10% (remove them from KNOWN_MISSES): {known_gone}")
        ok = False
    listed = {k for k in KNOWN_MISSES}
    present = {(r["file"], r["cap_label"], "on" if r["overlap"] else "off") for r in runs}
    if listed - present:
        print(f"FAIL: KNOWN_MISSES names runs that are not in docs/results: {sorted(listed - present)}")
        ok = False
    return ok


def emulated_group(run):
    m = run["method"]
    if m.rank:
        return f"PowerSGD rank {m.rank}"
    return "bf16 wire, row-sparse wte" if m.sparse else "bf16 wire"


def check_emulated():
    runs, skipped = planner.emulated_runs()
    print(f"\n{len(runs)} emulated-link medians of the comm hooks (one GPU modelling 2 ranks); error = predicted / "
          f"measured - 1")
    print(f"{'run (docs/results/...)':<72} {'cap':>5} {'ovl':>3} {'measured':>9} {'predicted':>9} {'error':>7}")
    groups, failures = {}, []
    for run in runs:
        m = run["measured"]
        predicted = planner.predict_run(run)["step"]
        err = predicted / m["step_ms_median"] - 1
        overlap = "on" if run["overlap"] else "off"
        groups.setdefault(emulated_group(run), []).append(err)
        note = ""
        if abs(err) > BAR:
            note = "  FAIL: beyond 10%"
            failures.append((run["file"], run["cap_label"], overlap))
        print(f"{run['file']:<72} {run['cap_label']:>5} {overlap:>3} {m['step_ms_median']:>9.2f} "
              f"{predicted:>9.2f} {err * 100:>+6.1f}%{note}")
    for path, why in skipped:
        print(f"{path:<72} left out: {why}")
    print(f"\n{'emulated runs':<28} {'medians':>7} {'within 10%':>10} {'largest':>8} {'mean |error|':>12}")
    for name, errs in sorted(groups.items()):
        print(f"{name:<28} {len(errs):>7} {sum(abs(e) <= BAR for e in errs):>10} "
              f"{max(abs(e) for e in errs) * 100:>7.1f}% {sum(abs(e) for e in errs) / len(errs) * 100:>11.1f}%")
    if failures:
        print(f"FAIL: {len(failures)} emulated prediction(s) beyond 10%: {failures}")
    return bool(runs) and not failures


def check_memory():
    """The modelled memory per GPU against each run's measured peak (overlap-off rows). Asserted within 3% where the
    cap was fixed and ZeRO off; `--bucket-mb auto` runs hold the first plan's buckets through the re-plan and
    ZeRO-1 runs hold more than the model says: both printed, not asserted."""
    runs, _ = planner.measured_runs()
    errors = {"fixed cap, no ZeRO": [], "--bucket-mb auto": [], "ZeRO-1": []}
    for run in runs:
        if run["overlap"]:
            continue
        modelled = planner.memory_mib(planner.job_profile(run["job"]), run["method"], 2)
        measured = run["measured"]["peak_mib"]
        kind = "ZeRO-1" if run["method"].zero else "--bucket-mb auto" if run["cap_label"] == "auto" else \
            "fixed cap, no ZeRO"
        errors[kind].append((modelled / measured - 1, measured - modelled))
    for kind, errs in errors.items():
        low, high = min(e for e, _ in errs), max(e for e, _ in errs)
        above = (min(d for _, d in errs), max(d for _, d in errs))
        print(f"memory per GPU, {kind}: model {low * 100:+.1f}% to {high * 100:+.1f}% of the measured peak (measured "
              f"{above[0]:+.0f} to {above[1]:+.0f} MiB above the model) over {len(errs)} runs"
              + ("" if kind.startswith("fixed") else ", not asserted"))
    ok = all(abs(e) <= 0.03 for e, _ in errors["fixed cap, no ZeRO"])
    if not ok:
        print("FAIL: a fixed-cap run's memory is more than 3% away from the model")
    return ok


def check_command():
    r = planner.RESULTS
    out = io.StringIO()
    with redirect_stdout(out):
        status = planner.main([
            "--profile", os.path.join(r, "h200-2026-11-30-s15", "mdp_gpt2_bf16_b8.json"),
            "--layer-trace", os.path.join(r, "h200x2-2026-11-30-s16", "nvlink", "trace_fp32.json"),
            "--links", "nvlink=" + os.path.join(r, "h200x2-2026-11-30-s16", "nvlink", "allreduce.json"), "ib",
            "--gpus", "1,2,8,64"])
    text = out.getvalue()
    rows = [line for line in text.splitlines() if re.match(r"\s+64 ", line)]
    print(f"\nplanner.py table (bf16 compute, NVLink + ib): exit {status}, {len(rows)} rows at 64 GPUs")
    for line in rows:
        print(line)
    return status == 0 and len(rows) == 4 and "ASSUMED" in text and "MEASURED" in text


def main():
    results = [check_fit(), check_plans(), check_steps(), check_emulated(), check_memory(), check_command()]
    if not all(results):
        print("planner_check: FAILED")
        return 1
    print("planner_check: passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
