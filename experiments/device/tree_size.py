"""The size of the working tree as the device tool sees it, before a call: it copies the tracked files and
the untracked ones git does not ignore (`git ls-files -co --exclude-standard`), plus the ignored paths
given in `carry`, and refuses a tree over 64 MiB. Prints the total and the largest folders; exits 1 over
`--limit` (60 MiB by default: some room below the tool's 64).

    python experiments/device/tree_size.py [--carry PATH ...] [--limit MIB] [--top N]

Large results shrink with `python experiments/compact_results.py` (traces gzipped, JSON on one line).
"""
from __future__ import annotations

import argparse
import os
import subprocess
import sys
from collections import Counter
from pathlib import Path

MIB = 1 << 20


def tree_files(repo: Path) -> list[str]:
    out = subprocess.run(["git", "ls-files", "-co", "--exclude-standard", "-z"], cwd=repo, check=True,
                         capture_output=True).stdout
    return sorted({f for f in out.decode().split("\0") if f})


def carried_files(repo: Path, carry: list[str]) -> list[str]:
    out = []
    for c in carry:
        p = repo / c
        if p.is_file() or p.is_symlink():
            out.append(c)
        elif p.is_dir():
            for dirpath, _, names in os.walk(p):
                out += [os.path.relpath(os.path.join(dirpath, n), repo) for n in names]
        else:
            print(f"--carry {c}: not found (skipped)", file=sys.stderr)
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--carry", nargs="*", default=[], help="ignored paths the call carries (counted too)")
    ap.add_argument("--limit", type=float, default=60.0, help="MiB; exit 1 above it (default 60)")
    ap.add_argument("--top", type=int, default=10, help="how many of the largest folders to list")
    ap.add_argument("--repo", default=None, help="repository root (default: the one holding this script)")
    a = ap.parse_args(argv)
    repo = Path(a.repo) if a.repo else Path(__file__).resolve().parents[2]

    sizes: dict[str, int] = {}
    for f in tree_files(repo) + carried_files(repo, a.carry):
        p = repo / f
        if p.is_symlink():
            sizes[f] = len(os.readlink(p))
        elif p.is_file():                               # a tracked file deleted from disk is not copied
            sizes[f] = p.stat().st_size
    total = sum(sizes.values())

    folders: Counter = Counter()                        # bytes under each folder, at every depth
    nfiles: Counter = Counter()
    for f, s in sizes.items():
        parts = Path(f).parts[:-1]
        for i in range(1, len(parts) + 1):
            folders["/".join(parts[:i])] += s
            nfiles["/".join(parts[:i])] += 1
    print(f"{'MiB':>8}  {'files':>6}  folder (the {a.top} largest, nested ones included)")
    for d, s in folders.most_common(a.top):
        print(f"{s / MIB:8.2f}  {nfiles[d]:6d}  {d}/")
    verdict = "over" if total > a.limit * MIB else "under"
    print(f"total: {total:,} bytes = {total / MIB:.2f} MiB in {len(sizes)} files "
          f"({verdict} the {a.limit:g} MiB limit; the device tool refuses more than 64 MiB)")
    return 1 if total > a.limit * MIB else 0


if __name__ == "__main__":
    sys.exit(main())
