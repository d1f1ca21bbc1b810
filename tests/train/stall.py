#!/usr/bin/env python3
"""A rank that stops (SIGSTOP) anywhere must not hang the job: under mpirun -np 2 with --watchdog-s 3, rank 1
is stopped as soon as its process exists (rank 0 waits in MPI_Init), during the start-up checks, mid-training
(also of 3 ranks), after the last step (in the trace gather, and without a trace in the final evaluation, whose
batches each end in a tiny collective, so that rank 0 waits at the next one) and while rank 0 writes the final
--save; every time the job
must end within the watchdog time plus a margin, non-zero, with a "minidp watchdog" line naming the operation
and rank 1 as the rank that did not arrive (stopped before the collective or inside it; in MPI_Init, seen
stopped in /proc), and no MPI_ABORT banner.

Usage: stall.py MPIEXEC MINIDP_TRAIN
"""
import os
import re
import signal
import subprocess
import sys
import tempfile
import threading
import time

from job_tools import rank_pid, write_fashion_mnist, writing_state

mpiexec, train = sys.argv[1:3]
WATCHDOG = 3
# The job must end within the watchdog time + 3 s. On a loaded 2-core machine mpirun's teardown alone takes about a
# second; the census stops waiting for notes once every rank not heard from is seen stopped in /proc.
MARGIN = 3
GPT = ["--model", "gpt", "--layers", "1", "--heads", "2", "--embd", "32", "--context", "32", "--batch-size", "8"]


def scenario(name, args, trigger, names_rank=True, ranks=2):
    """Runs minidp-train; stops rank 1 once `trigger` (a line of rank 0's output, seconds, or a function of
    the run's folder that turns true) happens. `names_rank`: the watchdog's line must name rank 1."""
    with tempfile.TemporaryDirectory() as folder:
        command = [mpiexec, "-np", str(ranks), "--oversubscribe", train, "--watchdog-s", str(WATCHDOG), *args]
        job = subprocess.Popen(command, cwd=folder, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        stopped = []
        lines = []

        def stop():
            for _ in range(500):
                pid = rank_pid(job.pid, 1)
                if pid:
                    os.kill(pid, signal.SIGSTOP)
                    stopped.append((pid, time.monotonic()))
                    return
                time.sleep(0.01)

        def watch_folder():
            pid = None
            while job.poll() is None and not pid:
                pid = rank_pid(job.pid, 1)
            while job.poll() is None:
                if trigger(folder):  # rank 1's pid is known already: the stop comes within a millisecond
                    os.kill(pid, signal.SIGSTOP)
                    stopped.append((pid, time.monotonic()))
                    return
                time.sleep(0.0005)

        if isinstance(trigger, float):
            threading.Timer(trigger, stop).start()
        elif callable(trigger):
            threading.Thread(target=watch_folder, daemon=True).start()
        killer = threading.Timer(WATCHDOG + MARGIN + 60, job.kill)  # a hang fails the test, not ctest's timeout
        killer.start()
        err = []
        reader = threading.Thread(target=lambda: err.append(job.stderr.read()))
        reader.start()
        for line in job.stdout:
            lines.append(line)
            if isinstance(trigger, str) and not stopped and trigger in line:
                stop()
        job.wait()
        killer.cancel()
        reader.join()
        for pid, _ in stopped:  # never leave a stopped process behind
            try:
                os.kill(pid, signal.SIGKILL)
                os.kill(pid, signal.SIGCONT)
            except ProcessLookupError:
                pass
        stderr = err[0] if err else ""
        took = time.monotonic() - stopped[0][1] if stopped else float("nan")
        watchdog = [l for l in stderr.splitlines() if "minidp watchdog" in l]
        problems = []
        if not stopped:
            problems.append("rank 1 was never stopped (the run ended first)")
        elif took > WATCHDOG + MARGIN:
            problems.append(f"ended {took:.1f} s after the stop, more than {WATCHDOG} + {MARGIN} s")
        if job.returncode == 0:
            problems.append("exit status 0")
        if not watchdog:
            problems.append("no 'minidp watchdog' line")
        elif names_rank and not any(re.search(r"rank\(s\) 1 did not arrive", l) for l in watchdog):
            problems.append("the watchdog's line does not name rank 1 as the one that did not arrive")
        elif any(re.search(r"rank\(s\) (?!1 did)[0-9, ]+ did not arrive", l) for l in watchdog):
            problems.append("a watchdog line names a rank that was not stopped")
        if "MPI_ABORT" in stderr:
            problems.append("OpenMPI's MPI_ABORT banner")
        verdict = "ok" if not problems else "FAIL: " + "; ".join(problems)
        print(f"{name:28s} {verdict} ({took:.1f} s after the stop)\n    {watchdog[0] if watchdog else stderr[-2000:]}")
        return not problems


def main():
    data = tempfile.TemporaryDirectory()
    write_fashion_mnist(data.name)  # 64 training and 16 test images: the evaluation takes no time
    results = [
        scenario("MPI start-up", ["--model", "mlp", "--steps", "2000"], 0.0),
        scenario("start-up checks", ["--model", "mlp", "--steps", "2000"], 0.5),
        scenario("mid-step", ["--model", "mlp", "--steps", "100000", "--log-every", "50"], "step 50/"),
        # Rank 2 waits with rank 0: it must not be named.
        scenario("mid-step, 3 ranks", ["--model", "mlp", "--steps", "100000", "--log-every", "50"], "step 50/",
                 ranks=3),
        scenario("trace gather at the end", GPT + ["--steps", "20", "--log-every", "20", "--eval-batches", "300",
                                                    "--trace", "t.json"], "step 20/"),
        scenario("barrier before MPI_Finalize", GPT + ["--steps", "20", "--log-every", "20", "--eval-batches", "300"],
                 "step 20/"),
        # Rank 0 writes 39 MB (about 0.1 s); rank 1 waits for it in the barrier before MPI_Finalize (which can
        # complete on rank 0 when rank 1 posted its part before it stopped: then MPI_Finalize waits).
        scenario("final save", ["--model", "mlp", "--hidden", "4096", "--optimizer", "adamw", "--batch-size", "8",
                                "--steps", "2", "--data-dir", data.name, "--save", "state"],
                 lambda folder: writing_state(folder, "state")),
    ]
    data.cleanup()
    return 0 if all(results) else 1


if __name__ == "__main__":
    sys.exit(main())
