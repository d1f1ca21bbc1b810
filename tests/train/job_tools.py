"""What the tests that run minidp-train under mpirun share: finding a rank's process, telling mpirun's own
report of a non-zero exit from the programs' lines, checking a run that must fail with one line and leave
nothing behind, and small Fashion-MNIST folders."""
import gzip
import os
import re
import signal
import stat
import struct
import subprocess

# mpirun's (or mpiexec's) report of a job one of whose ranks exited non-zero, which it prints for every such job.
MPIRUN_EXIT_REPORT = re.compile(r"^-+$|^Primary job +terminated normally, but|^a non-zero exit code\. Per user-direction"
                                r"|^(mpirun|mpiexec|orterun) detected that one or more processes exited"
                                r"|^the job to be terminated\. The first|^ *Process name: |^ *Exit code: |^\s*$")


def rank_pid(parent, rank):
    """The pid of `rank` among the processes mpirun `parent` started; None while there is none."""
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/stat") as f:
                ppid = int(f.read().rsplit(")", 1)[1].split()[1])
            if ppid != parent:
                continue
            with open(f"/proc/{pid}/environ", "rb") as f:
                if f"OMPI_COMM_WORLD_RANK={rank}".encode() in f.read().split(b"\0"):
                    return int(pid)
        except (OSError, ValueError, IndexError):
            continue
    return None


def writing_state(folder, name):
    """Whether a save of `name` in `folder` is being written: a temporary "<name>.tmp.<host>.<pid>.<n>" with bytes
    in it. The start-up check that the folder is writable makes an empty one of the same form and removes it, so
    an empty temporary is not taken for a save."""
    for entry in os.listdir(folder):
        if not entry.startswith(name + ".tmp."):
            continue
        try:
            if os.stat(os.path.join(folder, entry)).st_size > 0:
                return True
        except OSError:  # renamed or removed since it was listed
            continue
    return False


def write_fashion_mnist(folder, train=(64, 64), test=(16, 16)):
    """Fashion-MNIST's four files in `folder`: (images, labels) counts of each split, 28 x 28 pixels."""
    os.makedirs(folder, exist_ok=True)
    for split, (images, labels) in (("train", train), ("t10k", test)):
        with gzip.open(os.path.join(folder, f"{split}-images-idx3-ubyte.gz"), "wb") as f:
            f.write(struct.pack(">IIII", 0x803, images, 28, 28) + bytes(i % 251 for i in range(images * 28 * 28)))
        with gzip.open(os.path.join(folder, f"{split}-labels-idx1-ubyte.gz"), "wb") as f:
            f.write(struct.pack(">II", 0x801, labels) + bytes(i % 10 for i in range(labels)))


def run_job(command, cwd, env=None, timeout=120):
    """(exit status, stderr) of the command, or None when it ran past `timeout` s (then it and what it started
    are killed: a run that takes no signal mid-step, mpirun's ranks)."""
    job = subprocess.Popen(command, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                           start_new_session=True)
    try:
        stderr = job.communicate(timeout=timeout)[1]
        return job.returncode, stderr
    except subprocess.TimeoutExpired:
        os.killpg(job.pid, signal.SIGKILL)
        job.communicate()
        return None


def snapshot(root):
    """Every file and folder under `root`: a file's kind, size, modification time and, below 16 MB, its bytes
    (terabyte files are sparse: size and time only); a folder's kind."""
    state = {}
    for folder, dirs, files in os.walk(root):
        for name in dirs:
            state[os.path.join(folder, name)] = (os.lstat(os.path.join(folder, name)).st_mode,)
        for name in files:
            path = os.path.join(folder, name)
            st = os.lstat(path)
            content = None
            if stat.S_ISREG(st.st_mode) and st.st_size < (16 << 20):
                with open(path, "rb") as f:
                    content = f.read()
            state[path] = (st.st_mode, st.st_size, st.st_mtime_ns, content)
    return state


def expect_one_line(command, cwd, status, text, watched, env=None, under_mpirun=False):
    """Runs `command` in `cwd` (within 120 s), which must fail cleanly: exit `status`, exactly one line on stderr
    (under mpirun: besides mpirun's own report of a non-zero exit) that holds `text`, no source path and no
    MPI_ABORT banner, and every file and folder under `watched` as it was, none added. Returns the problems
    (none: it did so) and what to show: the line, or all of stderr."""
    snapshot_before = snapshot(watched)
    finished = run_job(command, cwd, env)
    if finished is None:
        return ["no end within 120 s (killed)"], ""
    returncode, stderr = finished
    lines = [l for l in stderr.splitlines() if l.strip()]
    if under_mpirun:
        lines = [l for l in lines if not MPIRUN_EXIT_REPORT.search(l)]
    problems = []
    if returncode != status:
        problems.append(f"exit {returncode}, expected {status}")
    if len(lines) != 1:
        problems.append(f"{len(lines)} lines on stderr, expected one")
    elif text not in lines[0]:
        problems.append(f"the line does not name {text!r}")
    elif ".cpp:" in lines[0] or ".h:" in lines[0] or len(lines[0]) > 400:
        problems.append("the line holds a source path or is too long")
    if "MPI_ABORT" in stderr:
        problems.append("OpenMPI's MPI_ABORT banner")
    after = snapshot(watched)
    left = sorted(set(after) - set(snapshot_before))
    if left:
        problems.append(f"files left behind: {left}")
    changed = sorted(path for path, was in snapshot_before.items() if after.get(path) != was)
    if changed:
        problems.append(f"inputs changed: {changed}")
    return problems, lines[0] if len(lines) == 1 else stderr.strip()


def report(case, problems, shown, failures, width):
    """Prints `case` (padded to `width`) with ok or its problems, and what the run showed; a failing case joins
    `failures`."""
    print(f"{case:{width}s} {'ok' if not problems else 'FAIL: ' + '; '.join(problems)}\n    {shown}")
    if problems:
        failures.append(case)


def summary(count, failures):
    """Prints how many of `count` cases passed; the exit status: 1 when any failed."""
    print(f"{count - len(failures)} of {count} cases pass")
    return 1 if failures else 0
