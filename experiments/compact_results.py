"""Shrink the committed results losslessly, so that the working tree stays under the device tool's limit.

Why: the remote GPU tool copies the whole working tree (tracked and untracked-not-ignored files) to the
GPU machine and refuses a tree over 64 MiB (`experiments/device/tree_size.py` prints what it would see).
Most of the tree is results/: the simulator's Chrome traces, the profiles and the schedules. New ones are
already written small (`harmony schedule --trace X.trace.json.gz` writes gzip, harmony/jsonio.py; profiles
and schedules are one-line JSON, `write_json(..., indent=None)`); this script converts the old ones:

  *.trace.json                              -> *.trace.json.gz (gzip of the same bytes; the original is deleted)
  JSON with "artifact": "profile"/"schedule" -> rewritten as one line, as write_json(path, obj, indent=None)

A file is replaced only after checking that the new one holds the same content (the trace's bytes after
decompression; `json.loads(new) == json.loads(old)` for the JSON, floats round-trip exactly). Each
file keeps its mtime (snakemake decides what to rebuild by mtimes) and mode. Models, calibrations and the
small records are left as they are. Re-runnable: files already in the compact form are skipped.

    python experiments/compact_results.py [ROOT ...] [--dry-run]      (ROOT: results/ by default)
"""
from __future__ import annotations

import argparse
import gzip
import json
import math
import os
import sys
import tempfile
from pathlib import Path

from harmony.jsonio import encode_json, gzip_bytes     # exactly what write_json writes

KINDS = ("profile", "schedule")
TRACE = ".trace.json"


def _same(a, b) -> bool:
    """Equal JSON values; NaN equals NaN (json.loads gives a new float object for each)."""
    if isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b):
        return True
    if type(a) is not type(b):
        return False
    if isinstance(a, dict):
        return list(a) == list(b) and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, list):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    return a == b


def _write_like(dst: Path, data: bytes, like: os.stat_result) -> None:
    """Write `data` to `dst` atomically with the mode and atime/mtime of `like`."""
    fd, tmp = tempfile.mkstemp(dir=dst.parent, prefix=f".{dst.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.chmod(tmp, like.st_mode & 0o7777)
        os.utime(tmp, ns=(like.st_atime_ns, like.st_mtime_ns))
        os.replace(tmp, dst)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def plan_trace(path: Path) -> tuple[Path, bytes] | None:
    old = path.read_bytes()
    new = gzip_bytes(old)
    if gzip.decompress(new) != old:
        raise RuntimeError(f"{path}: gzip does not give back the same bytes")
    return path.with_name(path.name + ".gz"), new


def plan_json(path: Path) -> tuple[Path, bytes] | None:
    old = path.read_bytes()
    if b'"artifact"' not in old:
        return None
    try:
        obj = json.loads(old)
    except (json.JSONDecodeError, UnicodeDecodeError):
        return None
    if not isinstance(obj, dict) or obj.get("artifact") not in KINDS:
        return None
    new = encode_json(obj, indent=None)
    if new == old:
        return None                                      # already compact
    if not _same(json.loads(new), obj):
        raise RuntimeError(f"{path}: the compact JSON does not read back equal")
    return path, new


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("roots", nargs="*", default=["results"], help="folders to convert (default: results)")
    ap.add_argument("--dry-run", action="store_true", help="check and report, change nothing")
    ap.add_argument("-v", "--verbose", action="store_true", help="list every file converted")
    a = ap.parse_args(argv)

    before = after = 0
    n_trace = n_json = 0
    kept_before = 0
    for root in a.roots:
        root = Path(root)
        if not root.is_dir():
            print(f"{root}: not a folder", file=sys.stderr)
            return 2
        for path in sorted(p for p in root.rglob("*") if p.is_file() and not p.is_symlink()):
            size = path.stat().st_size
            kept_before += size
            if path.name.endswith(TRACE):
                plan, kind = plan_trace(path), "trace"
            elif path.name.endswith(".json"):
                plan, kind = plan_json(path), "json"
            else:
                plan = None
            if plan is None:
                continue
            dst, data = plan
            before += size
            after += len(data)
            if kind == "trace":
                n_trace += 1
            else:
                n_json += 1
            if a.verbose:
                print(f"{path} -> {dst.name}: {size:,} -> {len(data):,} bytes")
            if a.dry_run:
                continue
            st = path.stat()
            _write_like(dst, data, st)
            if dst != path:
                path.unlink()

    total_after = kept_before - before + after
    mib = 1 << 20
    verb = "would convert" if a.dry_run else "converted"
    print(f"{verb} {n_trace} traces (-> .trace.json.gz) and {n_json} profiles/schedules (-> one-line JSON): "
          f"{before:,} -> {after:,} bytes ({(before - after) / mib:.1f} MiB less)")
    print(f"all files under {', '.join(a.roots)}: {kept_before:,} bytes ({kept_before / mib:.1f} MiB) -> "
          f"{total_after:,} bytes ({total_after / mib:.1f} MiB)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
