#!/usr/bin/env python3
"""Nothing a user owns is lost or replaced by a run:
- --save, --metrics and --trace onto a FIFO, a symbolic link or (as root) a character device made with
  mknod (a copy of /dev/null in a temporary folder; the real one is never touched) are refused in one line,
  and the path is what it was before;
- two runs on one --save path never touch each other's temporaries: a live writer's temporary stays, a gone
  writer's is removed; two runs saving to one path at once both end well;
- --metrics leaves no file behind when a run fails before its first line, and an earlier metrics file
  untouched;
- a full disk (a private 256 KiB tmpfs, where this machine lets an unprivileged mount namespace mount one):
  the error names the target and "no space left on device", and leaves no temporary and no empty metrics file.

Usage: data_at_risk.py MINIDP_TRAIN
"""
import glob
import os
import shutil
import socket
import stat
import subprocess
import sys
import tempfile
import time

train = sys.argv[1]
QUICK = ["--steps", "2", "--hidden", "16", "--batch-size", "8", "--eval-batches", "1"]
failures = []


def check(ok, what):
    print(f"{'ok  ' if ok else 'FAIL'} {what}")
    if not ok:
        failures.append(what)


def run(args, cwd, timeout=60):
    """(exit status, stderr lines); a run that does not end within `timeout` counts as status None."""
    try:
        r = subprocess.run([train, *args], cwd=cwd, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return None, ["(no end within %d s)" % timeout]
    return r.returncode, [line for line in r.stderr.splitlines() if line.strip()]


def identity(path):
    st = os.lstat(path)
    return stat.S_IFMT(st.st_mode), st.st_ino, st.st_rdev


def special_files(d):
    """name -> path of the things that are not regular files."""
    out = {"FIFO": os.path.join(d, "fifo"), "symbolic link": os.path.join(d, "link")}
    os.mkfifo(out["FIFO"])
    with open(os.path.join(d, "file"), "w") as f:
        f.write("the user's file\n")
    os.symlink(os.path.join(d, "file"), out["symbolic link"])
    if os.geteuid() == 0:
        out["character device"] = os.path.join(d, "null")
        os.mknod(out["character device"], 0o666 | stat.S_IFCHR, os.makedev(1, 3))
    return out


def not_regular_files(d):
    for kind, path in special_files(d).items():
        for flag in ("--save", "--metrics", "--trace"):
            before = identity(path)
            status, lines = run(QUICK + [flag, path], d, timeout=30)
            check(status == 1 and len(lines) == 1 and flag in lines[0] and kind in lines[0],
                  f"{flag} onto a {kind}: refused in one line ({status}: {' | '.join(lines)})")
            check(identity(path) == before, f"{flag} onto a {kind}: still the same {kind}")
    with open(os.path.join(d, "file")) as f:
        check(f.read() == "the user's file\n", "the linked file is untouched")
    check(not glob.glob(os.path.join(d, "*.tmp.*")), "no temporaries left beside them")


def two_runs_on_one_save(d):
    save = os.path.join(d, "state.safetensors")
    host = socket.gethostname()
    live = subprocess.Popen(["sleep", "120"])
    gone = subprocess.Popen(["true"])
    gone.wait()
    try:
        live_tmp = f"{save}.tmp.{host}.{live.pid}.0"  # another run, mid-save
        gone_tmp = f"{save}.tmp.{host}.{gone.pid}.0"  # a save killed midway
        other_tmp = f"{save}.tmp.otherhost.{gone.pid}.0"  # another host's: its writer cannot be seen from here
        for name in (live_tmp, gone_tmp, other_tmp):
            open(name, "w").close()
        status, lines = run(QUICK + ["--save", save], d)
        check(status == 0, f"a run beside other writers' temporaries ends well ({status}: {' | '.join(lines)})")
        check(os.path.exists(live_tmp), "a live writer's temporary is left alone")
        check(os.path.exists(other_tmp), "another host's temporary is left alone")
        check(not os.path.exists(gone_tmp), "a gone writer's temporary is removed")
    finally:
        live.kill()
        live.wait()
    for name in glob.glob(save + ".tmp.*"):
        os.remove(name)
    # Two runs at once: the first saves every step while the second starts and saves to the same path.
    first = subprocess.Popen([train, "--steps", "400", "--hidden", "16", "--batch-size", "8", "--eval-batches", "1",
                              "--log-every", "100", "--save-every", "1", "--save", save], cwd=d,
                             stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    deadline = time.time() + 60
    while not os.path.exists(save) and time.time() < deadline and first.poll() is None:
        time.sleep(0.01)
    status, lines = run(QUICK + ["--save", save], d)
    first_err = first.communicate(timeout=120)[1].strip()
    check(status == 0 and first.returncode == 0,
          f"two runs saving to one path both end well ({first.returncode}: {first_err!r}; {status}: {lines})")
    check(not glob.glob(save + ".tmp.*"), "and leave no temporaries")


def metrics_on_failure(d):
    metrics = os.path.join(d, "m.jsonl")
    diverge = ["--steps", "60", "--hidden", "16", "--lr", "1e6", "--weight-decay", "1e6", "--check-finite",
               "--log-every", "1000"]
    status, lines = run(diverge + ["--metrics", metrics], d)
    check(status == 1 and not os.path.exists(metrics),
          f"a run failing before its first metrics line leaves no metrics file ({status}: {lines})")
    with open(metrics, "w") as f:
        f.write('{"step": 1}\n')
    run(diverge + ["--metrics", metrics], d)
    with open(metrics) as f:
        check(f.read() == '{"step": 1}\n', "nor touches an earlier one")


def full_disk(d):
    """Runs in a mount namespace of its own with a 256 KiB tmpfs at `d`/disk; returns False where it cannot."""
    disk = os.path.join(d, "disk")
    os.mkdir(disk)
    out = os.path.join(d, "out")  # outside the small disk: what the shell records
    os.mkdir(out)
    script = ('mount -t tmpfs -o size=256k minidp-full "$0" || exit 97; cd "$0"; '
              # A checkpoint of 784 x 128 floats does not fit.
              '"$1" --steps 2 --hidden 128 --batch-size 8 --eval-batches 1 --save "$0/state.safetensors" '
              '2>"$2/save.err" >/dev/null; echo "save $?" >> "$2/status"; '
              # A full disk under the first metrics line.
              'head -c 1M /dev/zero > "$0/filler" 2>/dev/null; '
              '"$1" --steps 2 --hidden 16 --batch-size 8 --eval-batches 1 --log-every 1 --metrics "$0/m.jsonl" '
              '2>"$2/metrics.err" >/dev/null; echo "metrics $?" >> "$2/status"; '
              'for f in save.err metrics.err status; do echo "== $f"; cat "$2/$f"; done; echo "== files"; ls -A')
    try:
        r = subprocess.run(["unshare", "--map-root-user", "--mount", "sh", "-c", script, disk, train, out],
                           capture_output=True, text=True, timeout=120)
    except (OSError, subprocess.TimeoutExpired) as e:
        print(f"skip full disk: {e}")
        return False
    if r.returncode == 97 or "== status" not in r.stdout:
        print(f"skip full disk: no private tmpfs here ({r.stderr.strip()})")
        return False
    parts = {}
    for block in r.stdout.split("== ")[1:]:
        name, _, body = block.partition("\n")
        parts[name] = [line for line in body.splitlines() if line.strip()]
    status = dict(line.split() for line in parts["status"])
    target = os.path.join(disk, "state.safetensors")
    save_err, metrics_err = parts["save.err"], parts["metrics.err"]
    check(status.get("save") == "1" and len(save_err) == 1 and target in save_err[0] and
          "no space left on device" in save_err[0],
          f"a full disk at --save: one line naming the target and the cause ({status.get('save')}: {save_err})")
    metrics = os.path.join(disk, "m.jsonl")
    check(status.get("metrics") == "1" and len(metrics_err) == 1 and metrics in metrics_err[0] and
          "no space left on device" in metrics_err[0],
          f"a full disk at --metrics: one line naming the file and the cause ({status.get('metrics')}: {metrics_err})")
    left = sorted(set(parts["files"]) - {"filler"})
    check(left == [], f"a full disk leaves no temporary and no empty metrics file ({left})")
    return True


def main():
    root = tempfile.mkdtemp()
    try:
        for part in (not_regular_files, two_runs_on_one_save, metrics_on_failure, full_disk):
            d = tempfile.mkdtemp(dir=root)
            part(d)
    finally:
        shutil.rmtree(root)
    print("FAILED: " + "; ".join(failures) if failures else "all data-at-risk checks pass")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
