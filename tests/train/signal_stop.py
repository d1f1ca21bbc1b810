#!/usr/bin/env python3
"""SIGTERM, SIGINT and SIGHUP stop a run cleanly: a 2-rank CPU run whose rank 1 alone gets SIGTERM mid-training
stops on both ranks at one step, writes --save, says so in one line and exits 143; resumed from that file, it
ends with the same bytes as the run that was never interrupted; so does the state a Ctrl-C to mpirun saves (the
line names mpirun's SIGTERM). Alone, SIGINT does the same with exit status 130, SIGHUP with 129. Any of them
during start-up (alone, or to one rank) ends the run before its first step with one line; one after the last step is named in the
closing line; a second SIGINT ends the process at once. Under mpirun, SIGTERM to every rank, SIGINT or SIGHUP to one,
and SIGTERM to the writing rank in the middle of a periodic save each stop the job with the signal's exit status and a
state that resumes to the uninterrupted bytes.

Usage: signal_stop.py MPIEXEC MINIDP_TRAIN
"""
import json
import os
import re
import signal
import struct
import subprocess
import sys
import tempfile
import threading
import time

from job_tools import MPIRUN_EXIT_REPORT, rank_pid, writing_state

mpiexec, train = sys.argv[1:3]
MLP = ["--model", "mlp", "--hidden", "32", "--batch-size", "8", "--log-every", "100"]
STEPS = 30000  # long enough that mpirun passes "step 100/" on before the run ends, even under load


def saved_step(path):
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
    return json.loads(header["__metadata__"]["minidp"])["step"]


def same_bytes(a, b):
    with open(a, "rb") as fa, open(b, "rb") as fb:
        return fa.read() == fb.read()


def run(command, folder, trigger=None, send=None):
    """Runs `command` in `folder`; when `trigger` shows on stdout, calls send(job). Returns the exit status,
    stderr's lines (mpirun's exit-status banner left out) and the seconds from send to the end."""
    job = subprocess.Popen(command, cwd=folder, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    killer = threading.Timer(120, job.kill)  # a hang fails the test, not ctest's timeout
    killer.start()
    err = []
    reader = threading.Thread(target=lambda: err.append(job.stderr.read()))
    reader.start()
    sent = None
    for line in job.stdout:
        if trigger and sent is None and trigger in line:
            send(job)
            sent = time.monotonic()
    job.wait()
    killer.cancel()
    reader.join()
    took = time.monotonic() - sent if sent else float("nan")
    lines = [l for l in err[0].splitlines() if not MPIRUN_EXIT_REPORT.search(l)]
    return job.returncode, lines, took


def check(name, problems):
    print(f"{name:55s} {'ok' if not problems else 'FAIL: ' + '; '.join(problems)}")
    return not problems


def stops_and_resumes(folder):
    """2 ranks, SIGTERM to rank 1 alone at step ~100: both stop at one step, save, exit 143; the resumed run
    ends with the bytes of the uninterrupted one."""
    p = lambda name: os.path.join(folder, name)
    mpi = [mpiexec, "-np", "2", "--oversubscribe", train, *MLP, "--steps", str(STEPS)]
    status, lines, _ = run(mpi + ["--save", p("full")], folder)
    problems = [f"the uninterrupted run exited {status}: {lines}"] if status != 0 else []

    def term_rank_1(job):
        os.kill(rank_pid(job.pid, 1), signal.SIGTERM)

    status, lines, took = run(mpi + ["--save", p("half")], folder, "step 100/", term_rank_1)
    if status != 128 + signal.SIGTERM:
        problems.append(f"exit {status}, expected 143")
    if len(lines) != 1 or not re.search(rf"stopped by SIGTERM after step \d+ of {STEPS}; the training state is saved",
                                        lines[0]):
        problems.append(f"stderr {lines}, expected one 'stopped by SIGTERM' line")
    elif not 100 <= saved_step(p("half")) < STEPS or f"after step {saved_step(p('half'))} " not in lines[0]:
        problems.append(f"the file holds step {saved_step(p('half'))}; the line says {lines[0]!r}")
    if took > 10:
        problems.append(f"ended {took:.1f} s after the signal")
    print(f"    {lines[0] if lines else ''} ({took:.2f} s after the signal)")
    status, lines, _ = run(mpi + ["--resume", p("half"), "--save", p("resumed")], folder)
    if status != 0:
        problems.append(f"the resumed run exited {status}: {lines}")
    elif not same_bytes(p("full"), p("resumed")):
        problems.append("the resumed run does not end with the uninterrupted run's bytes")
    # Ctrl-C to mpirun: it sends SIGTERM to every rank (and exits 1 itself); the ranks name it, save, and the
    # state resumes to the same bytes.
    status, lines, _ = run(mpi + ["--save", p("ctrl_c")], folder, "step 100/",
                           lambda job: job.send_signal(signal.SIGINT))
    if len(lines) != 1 or not re.search(r"stopped by SIGTERM from (mpirun|mpiexec|orterun) .* is saved in", lines[0]):
        problems.append(f"Ctrl-C to mpirun: stderr {lines}, expected one 'stopped by SIGTERM from mpirun' line")
    print(f"    {lines[0] if lines else ''}")
    status, lines, _ = run(mpi + ["--resume", p("ctrl_c"), "--save", p("resumed_ctrl_c")], folder)
    if status != 0 or not same_bytes(p("full"), p("resumed_ctrl_c")):
        problems.append(f"the state saved on Ctrl-C to mpirun does not resume to the uninterrupted bytes ({status})")
    left = sorted(set(os.listdir(folder)) - {"full", "half", "resumed", "ctrl_c", "resumed_ctrl_c"})
    if left:
        problems.append(f"files left behind: {left}")
    return check("2 ranks, SIGTERM to rank 1 and Ctrl-C to mpirun, resumed == uninterrupted", problems)


def every_kind_to_ranks(folder):
    """2 ranks: SIGTERM to every rank, SIGINT to rank 1 and SIGHUP to rank 1, each at step ~100: one line naming the
    signal, exit 128 + the signal, and the saved state resumes to the uninterrupted run's bytes."""
    p = lambda name: os.path.join(folder, name)
    # A shorter run than STEPS: the stop comes a step after "step 100/", and four runs finish the rest (the
    # sanitizer build runs this suite too).
    steps = 5000
    mpi = [mpiexec, "-np", "2", "--oversubscribe", train, *MLP, "--steps", str(steps)]
    status, lines, _ = run(mpi + ["--save", p("full")], folder)
    problems = [f"the uninterrupted run exited {status}: {lines}"] if status != 0 else []

    def to_ranks(sig, ranks):
        def send(job):
            pids = [rank_pid(job.pid, r) for r in ranks]
            for pid in pids:
                os.kill(pid, sig)
        return send

    cases = [("SIGTERM to every rank", signal.SIGTERM, (0, 1)), ("SIGINT to rank 1", signal.SIGINT, (1,)),
             ("SIGHUP to rank 1", signal.SIGHUP, (1,))]
    for i, (label, sig, ranks) in enumerate(cases):
        name = signal.Signals(sig).name
        status, lines, took = run(mpi + ["--save", p(f"cut{i}")], folder, "step 100/", to_ranks(sig, ranks))
        if status != 128 + sig:
            problems.append(f"{label}: exit {status}, expected {128 + sig}")
        if len(lines) != 1 or not re.search(rf"stopped by {name}\b.* after step \d+ of {steps}; the training state is "
                                            "saved", lines[0]):
            problems.append(f"{label}: stderr {lines}, expected one 'stopped by {name}' line")
            continue
        if took > 10:
            problems.append(f"{label}: ended {took:.1f} s after the signal")
        status, lines, _ = run(mpi + ["--resume", p(f"cut{i}"), "--save", p(f"resumed{i}")], folder)
        if status != 0 or not same_bytes(p("full"), p(f"resumed{i}")):
            problems.append(f"{label}: the saved state does not resume to the uninterrupted bytes ({status} {lines})")
    left = [n for n in os.listdir(folder) if not re.fullmatch(r"full|cut\d|resumed\d", n)]
    if left:
        problems.append(f"files left behind: {left}")
    return check("2 ranks: SIGTERM to every rank, SIGINT and SIGHUP to one", problems)


def mid_save(folder):
    """2 ranks, --save-every 20: SIGTERM to rank 0 while it writes a periodic state (its temporary file has bytes in it). The
    write completes, the run stops at a step boundary (the ranks agree on it a step later) with the state saved,
    exit 143, and it resumes to the bytes of the uninterrupted run."""
    p = lambda name: os.path.join(folder, name)
    big = ["--model", "mlp", "--hidden", "2048", "--batch-size", "8", "--log-every", "1000", "--steps", "200",
           "--save-every", "20"]
    mpi = [mpiexec, "-np", "2", "--oversubscribe", train, *big]
    status, lines, _ = run(mpi + ["--save", p("full")], folder)
    problems = [f"the uninterrupted run exited {status}: {lines}"] if status != 0 else []
    cut = p("cut")
    job = subprocess.Popen(mpi + ["--save", cut], cwd=folder, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                           text=True)
    sent = []

    def watch():
        pid = None
        while job.poll() is None and not pid:
            pid = rank_pid(job.pid, 0)
        while job.poll() is None:
            if writing_state(folder, "cut"):
                os.kill(pid, signal.SIGTERM)
                sent.append(time.monotonic())
                return
            time.sleep(0.0005)

    threading.Thread(target=watch, daemon=True).start()
    err = job.communicate(timeout=120)[1]
    lines = [l for l in err.splitlines() if not MPIRUN_EXIT_REPORT.search(l)]
    if not sent:
        problems.append("no periodic save was seen being written")
    if job.returncode != 128 + signal.SIGTERM:
        problems.append(f"exit {job.returncode}, expected 143")
    if len(lines) != 1 or not re.search(r"stopped by SIGTERM\b.* after step (\d+) of 200; the training state is saved",
                                        lines[0]):
        problems.append(f"stderr {lines}, expected one 'stopped by SIGTERM' line")
    elif not 20 <= saved_step(cut) < 200:
        problems.append(f"the file holds step {saved_step(cut)}, not one at or after the interrupted save")
    else:
        status, lines, _ = run(mpi + ["--resume", cut, "--save", p("resumed")], folder)
        if status != 0 or not same_bytes(p("full"), p("resumed")):
            problems.append(f"the state does not resume to the uninterrupted bytes ({status} {lines})")
    left = sorted(set(os.listdir(folder)) - {"full", "cut", "resumed"})
    if left:
        problems.append(f"files left behind: {left}")
    return check("2 ranks, SIGTERM to the writer mid-save: saved, resumed == uninterrupted", problems)


def sigint_alone(folder):
    """One process: SIGINT stops it at a step boundary with the state saved, exit 130."""
    p = lambda name: os.path.join(folder, name)

    def interrupt(job):
        job.send_signal(signal.SIGINT)

    status, lines, took = run([train, *MLP, "--steps", "1000000", "--save", p("alone")], folder, "step 500/",
                              interrupt)
    problems = []
    if status != 128 + signal.SIGINT:
        problems.append(f"exit {status}, expected 130")
    if len(lines) != 1 or "stopped by SIGINT after step" not in lines[0]:
        problems.append(f"stderr {lines}, expected one 'stopped by SIGINT' line")
    elif f"after step {saved_step(p('alone'))} " not in lines[0]:
        problems.append(f"the file holds step {saved_step(p('alone'))}; the line says {lines[0]!r}")
    if os.listdir(folder) != ["alone"]:
        problems.append(f"files in the folder: {os.listdir(folder)}")
    print(f"    {lines[0] if lines else ''} ({took:.2f} s after the signal)")
    return check("alone, SIGINT: saved, exit 130", problems)


def sighup_alone(folder):
    """A closed terminal (SIGHUP) stops a run as SIGTERM does: saved, one line, exit 129; it resumes."""
    p = lambda name: os.path.join(folder, name)
    status, lines, took = run([train, *MLP, "--steps", "1000000", "--save", p("hup")], folder, "step 500/",
                              lambda job: job.send_signal(signal.SIGHUP))
    problems = []
    if status != 128 + signal.SIGHUP:
        problems.append(f"exit {status}, expected 129")
    if len(lines) != 1 or f"stopped by SIGHUP after step {saved_step(p('hup'))} " not in lines[0]:
        problems.append(f"stderr {lines}, expected one 'stopped by SIGHUP' line naming the saved step")
    print(f"    {lines[0] if lines else ''} ({took:.2f} s after the signal)")
    return check("alone, SIGHUP: saved, exit 129", problems)


def before_first_step(folder):
    """A signal during start-up (data loading, MPI start-up), to one process or to one rank: one line 'before the
    first step', nothing saved, the signal's exit status. (Not to mpirun: while its ranks start, Open MPI's mpirun
    does not always pass a signal of its own on.)"""
    results = []
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        for target in ("alone", "rank 1"):
            command = [train, *MLP, "--steps", "100", "--save", os.path.join(folder, "early")]
            if target != "alone":
                command = [mpiexec, "-np", "2", "--oversubscribe", *command]
            job = subprocess.Popen(command, cwd=folder, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
            deadline = time.monotonic() + 30
            rank = job.pid if target == "alone" else None
            while rank is None and time.monotonic() < deadline:  # mpirun started rank 1
                rank = rank_pid(job.pid, 1)
                time.sleep(0.01)
            time.sleep(0.3)  # into the start-up: the data take over a second to load
            os.kill(rank, sig)
            err = job.communicate(timeout=120)[1]
            lines = [l for l in err.splitlines() if not MPIRUN_EXIT_REPORT.search(l)]
            name = signal.Signals(sig).name
            expected = 128 + sig
            problems = []
            if job.returncode != expected:
                problems.append(f"exit {job.returncode}, expected {expected}")
            if len(lines) != 1 or f"stopped by {name}" not in lines[0] or "before the first step" not in lines[0]:
                problems.append(f"stderr {lines}, expected one 'stopped by {name} ... before the first step' line")
            if os.listdir(folder):
                problems.append(f"files left: {os.listdir(folder)}")
                for name in os.listdir(folder):
                    os.remove(os.path.join(folder, name))
            results.append(check(f"{signal.Signals(sig).name} to {target} at start-up: one line, nothing saved",
                                 problems))
    return all(results)


def after_last_step(folder):
    """SIGTERM while the final state is written: the run finished, and its closing JSON line says the signal came."""
    big = ["--model", "mlp", "--hidden", "2048", "2048", "--batch-size", "8", "--log-every", "1"]
    job = subprocess.Popen([train, *big, "--steps", "2", "--save", os.path.join(folder, "last")], cwd=folder,
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    out = []
    for line in job.stdout:
        out.append(line)
        if line.startswith("test loss"):
            job.send_signal(signal.SIGTERM)
    err = job.communicate(timeout=120)[1]
    summary = json.loads(out[-1]) if out and out[-1].startswith("{") else {}
    problems = []
    if job.returncode != 0 or err.strip():
        problems.append(f"exit {job.returncode}, stderr {err.strip()!r}: expected 0 and nothing")
    if "SIGTERM came after the last step" not in summary.get("signal", ""):
        problems.append(f"the closing line {out[-1].strip() if out else ''!r} does not name the signal")
    return check("alone, SIGTERM after the last step: finished, named in the closing line", problems)


def second_signal(folder):
    """A second SIGINT, sent while the step the first one waits for runs, ends the process at once."""

    def twice(job):
        time.sleep(0.05)  # into step 3: the line comes right before step 2's boundary
        job.send_signal(signal.SIGINT)
        time.sleep(0.01)
        job.send_signal(signal.SIGINT)

    # Steps of ~0.3 s: both signals come well before step 3's boundary.
    big = ["--model", "mlp", "--hidden", "1024", "1024", "--batch-size", "512", "--log-every", "1"]
    status, lines, took = run([train, *big, "--steps", "1000"], folder, "step 2/", twice)
    problems = []
    if status != -signal.SIGINT:
        problems.append(f"exit {status}, expected death by SIGINT ({-signal.SIGINT})")
    if took > 2:
        problems.append(f"ended {took:.1f} s after the second signal")
    if lines:
        problems.append(f"stderr {lines}")
    return check("alone, a second SIGINT ends it at once", problems)


def main():
    results = []
    for case in (stops_and_resumes, every_kind_to_ranks, mid_save, sigint_alone, sighup_alone, before_first_step, after_last_step, second_signal):
        with tempfile.TemporaryDirectory() as folder:
            results.append(case(folder))
    return 0 if all(results) else 1


if __name__ == "__main__":
    sys.exit(main())
