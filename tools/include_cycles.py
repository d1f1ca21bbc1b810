#!/usr/bin/env python3
"""Include cycles in the tracked C++/CUDA sources, at three grains: modules (a header with its sources:
foo.h, foo.cpp, foo.cu, foo_cpu.cpp... share the stem foo), files, and folders (the top-level folders, with
framework/ and framework/distributed/ split one level further). tests/ and examples/ are left out: nothing
includes them. The files are git's tracked ones, or, outside a checkout, those under the source folders. Prints every cycle and each folder's dependencies; exits 1 when there is a cycle.

Usage: tools/include_cycles.py [REPO]   (default: the repository this file is in)
"""
import collections
import os
import re
import subprocess
import sys

INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.M)


def module_of(path):
    stem = os.path.splitext(path)[0]
    return stem[: -len("_cpu")] if stem.endswith("_cpu") else stem


def folder_of(path):
    parts = path.split("/")
    depth = 1
    if parts[0] == "framework":
        depth = 3 if len(parts) > 3 and parts[1] == "distributed" else 2
    return "/".join(parts[: min(depth, len(parts) - 1)])


def cycles(graph):
    """Strongly connected components of more than one node (Tarjan, iterative)."""
    index, low, on_stack, stack, found = {}, {}, set(), [], []
    counter = 0
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            node, edges = work[-1]
            advanced = False
            for nxt in edges:
                if nxt not in index:
                    index[nxt] = low[nxt] = counter
                    counter += 1
                    stack.append(nxt)
                    on_stack.add(nxt)
                    work.append((nxt, iter(sorted(graph[nxt]))))
                    advanced = True
                    break
                if nxt in on_stack:
                    low[node] = min(low[node], index[nxt])
            if advanced:
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


def main():
    repo = sys.argv[1] if len(sys.argv) > 1 else os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    try:
        files = subprocess.check_output(["git", "-C", repo, "ls-files", "*.h", "*.cpp", "*.cu", "*.cuh"], text=True,
                                        stderr=subprocess.DEVNULL).split()
    except (OSError, subprocess.CalledProcessError):  # not a git checkout: every source under the folders
        files = [os.path.relpath(os.path.join(top, name), repo)
                 for folder in ("base", "kernels", "framework", "models", "data", "train")
                 for top, _, names in os.walk(os.path.join(repo, folder))
                 for name in names if name.endswith((".h", ".cpp", ".cu", ".cuh"))]
    tracked = set(files)
    graphs = {grain: collections.defaultdict(set) for grain in ("module", "file", "folder")}
    for path in files:
        if path.startswith(("tests/", "examples/")):
            continue
        with open(os.path.join(repo, path), errors="replace") as source:
            included = [name for name in INCLUDE.findall(source.read()) if name in tracked]
        for name in included:
            for grain, key in (("module", module_of), ("file", lambda p: p), ("folder", folder_of)):
                graphs[grain][key(path)]
                graphs[grain][key(name)]
                if key(name) != key(path):
                    graphs[grain][key(path)].add(key(name))
    any_cycle = False
    for grain, graph in graphs.items():
        found = cycles(graph)
        any_cycle |= bool(found)
        print(f"{grain} cycles: {len(found)}")
        for component in found:
            print("  " + " <-> ".join(component))
    print("folders and what they include:")
    for folder, deps in sorted(graphs["folder"].items()):
        print(f"  {folder} -> {', '.join(sorted(deps)) or '-'}")
    return 1 if any_cycle else 0


if __name__ == "__main__":
    sys.exit(main())
