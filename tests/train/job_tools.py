"""What the tests that run minidp-train under mpirun share: finding a rank's process, telling mpirun's own
report of a non-zero exit from the programs' lines, and small Fashion-MNIST folders."""
import gzip
import os
import re
import struct

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


def write_fashion_mnist(folder, train=(64, 64), test=(16, 16)):
    """Fashion-MNIST's four files in `folder`: (images, labels) counts of each split, 28 x 28 pixels."""
    os.makedirs(folder, exist_ok=True)
    for split, (images, labels) in (("train", train), ("t10k", test)):
        with gzip.open(os.path.join(folder, f"{split}-images-idx3-ubyte.gz"), "wb") as f:
            f.write(struct.pack(">IIII", 0x803, images, 28, 28) + bytes(i % 251 for i in range(images * 28 * 28)))
        with gzip.open(os.path.join(folder, f"{split}-labels-idx1-ubyte.gz"), "wb") as f:
            f.write(struct.pack(">II", 0x801, labels) + bytes(i % 10 for i in range(labels)))
