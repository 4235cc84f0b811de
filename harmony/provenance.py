"""`harmony provenance`: which commit's code made a run record.

A record's `git_commit` comes from the `.git` beside the code, and on the lent GPU machines that metadata
can lag the files it travels with: h100-hostab1/2 and h100-samehost10 to 13 ran code of 3663b7c-f8ec990
but say 8f09b40-dirty (results/paper/1xH100-80GB-HBM3/NOTES.md). So every environment record also carries
`source_trees`: git's own tree hash of the code folders (`harmony/`, `baselines/`), computed from the files
on disk. It equals `git rev-parse COMMIT:harmony` for a commit with the same files, whatever `.git` says,
so the code that ran can be found in any clone:

    harmony provenance results/paper/1xH100-80GB-HBM3/runs/harmony-vPP/bert96/N1-D16-auto.jsonl

lists the commits whose code folders hold exactly those files ("uncommitted" when none does).
"""
from __future__ import annotations

import hashlib
import json
import os
import subprocess
from pathlib import Path

# the folders whose code makes a record's numbers (the workflow, experiments and docs do not)
SOURCE_DIRS = ("harmony", "baselines")
# what the checkout's .gitignore keeps out of git inside those folders: made by Python and pip, not code
_IGNORED_DIRS = {"__pycache__"}
_IGNORED_SUFFIXES = (".pyc", ".pyo", ".egg-info", ".tmp")

REPO_ROOT = Path(__file__).resolve().parent.parent


def _object_id(kind: str, body: bytes) -> bytes:
    return hashlib.sha1(kind.encode() + b" " + str(len(body)).encode() + b"\0" + body).digest()


def _tree_id(folder: Path) -> bytes | None:
    """Git's object id of `folder` as a tree (None when it holds no file git would keep: git has no empty
    trees). Entries sort by name, a folder's name as if it ended in '/', as git sorts them."""
    entries = []
    for entry in os.scandir(folder):
        name = entry.name
        if name in _IGNORED_DIRS or name.endswith(_IGNORED_SUFFIXES):
            continue
        if entry.is_symlink():
            entries.append((name, b"120000", _object_id("blob", os.readlink(entry.path).encode())))
        elif entry.is_dir():
            sub = _tree_id(Path(entry.path))
            if sub is not None:
                entries.append((name + "/", b"40000", sub))
        elif entry.is_file():
            mode = b"100755" if os.access(entry.path, os.X_OK) else b"100644"
            entries.append((name, mode, _object_id("blob", Path(entry.path).read_bytes())))
    if not entries:
        return None
    body = b"".join(mode + b" " + name.rstrip("/").encode() + b"\0" + oid
                    for name, mode, oid in sorted(entries, key=lambda e: e[0].encode()))
    return _object_id("tree", body)


def tree_hash(folder: str | os.PathLike) -> str | None:
    """Git's tree hash (hex) of the files under `folder`, as `git rev-parse COMMIT:folder` gives it for a
    commit holding the same files; None for a folder that does not exist or holds nothing git would keep."""
    folder = Path(folder)
    if not folder.is_dir():
        return None
    oid = _tree_id(folder)
    return oid.hex() if oid is not None else None


def source_trees(root: str | os.PathLike = REPO_ROOT, dirs: tuple[str, ...] = SOURCE_DIRS) -> dict[str, str | None]:
    """The tree hash of each of `dirs` (by default the code folders, SOURCE_DIRS) of the checkout at `root`."""
    return {d: tree_hash(Path(root) / d) for d in dirs}


def commits_with(trees: dict[str, str | None], repo: str | os.PathLike = REPO_ROOT,
                 max_count: int = 2000) -> list[str]:
    """The commits (newest first, of the last `max_count` on HEAD's history) whose folders have exactly
    these tree hashes. Several when commits that followed changed none of those folders."""
    wanted = {d: t for d, t in trees.items() if t}
    if not wanted:
        raise ValueError("no source tree hashes to look for (the record has no `source_trees`)")
    git = ["git", "-C", str(repo)]
    log = subprocess.run(git + ["log", f"--max-count={max_count}", "--format=%H"], capture_output=True, text=True)
    if log.returncode != 0:
        raise ValueError(f"{repo} is not a git checkout with history: {log.stderr.strip()}")
    commits = log.stdout.split()
    dirs = sorted(wanted)
    found = []
    for i in range(0, len(commits), 200):            # one git call per 200 commits
        chunk = commits[i:i + 200]
        specs = "".join(f"{c}:{d}\n" for c in chunk for d in dirs)
        out = subprocess.run(git + ["cat-file", "--batch-check=%(objectname)"], input=specs,
                             capture_output=True, text=True).stdout.split("\n")
        for j, c in enumerate(chunk):
            got = out[j * len(dirs):(j + 1) * len(dirs)]
            if all(g.strip() == wanted[d] for g, d in zip(got, dirs)):
                found.append(c)
    return found


def record_env(path: str | os.PathLike) -> dict:
    """The environment record of a run record (.jsonl: its summary's `env`) or of an env.json."""
    path = Path(path)
    text = path.read_text()
    if path.suffix == ".jsonl":
        for line in reversed(text.splitlines()):
            if line.strip():
                rec = json.loads(line)
                if "env" in rec:
                    return rec["env"]
        raise ValueError(f"{path}: no record with an `env` (a run record's summary carries one)")
    rec = json.loads(text)
    return rec.get("env", rec)


def add_arguments(p):
    p.add_argument("records", nargs="+", help="run records (.jsonl) or environment records (env.json)")
    p.add_argument("--repo", default=str(REPO_ROOT), help="the git checkout to search (default: this one)")
    p.add_argument("--max-count", type=int, default=2000, help="how many commits back to look (default 2000)")


def main(args) -> int:
    status = 0
    for path in args.records:
        env = record_env(path)
        trees = env.get("source_trees")
        said = env.get("git_commit") or "none"
        if not trees:
            print(f"{path}: no source_trees (made before they were recorded); its git_commit says {said}")
            status = 1
            continue
        commits = commits_with(trees, args.repo, args.max_count)
        if commits:
            more = f" (and {len(commits) - 1} later commit(s) with the same code)" if len(commits) > 1 else ""
            print(f"{path}: code of {commits[-1][:12]}{more}; its git_commit says {said}")
        else:
            print(f"{path}: code of no commit in the last {args.max_count} (uncommitted changes); its "
                  f"git_commit says {said}; trees {trees}")
            status = 1
    return status
