"""A model variant's figure-10 records beside its base model's, point by point (device README item 63:
resnet1026-cl and vgg416-cl, the convolutional models with channels-last activations, are made again record
by record over several sessions before figure 10 takes them). For each point the base has a record of:
every system's s/iteration in both models, the variant over the base, and Harmony's best mode over each
baseline as C10 measures it, in the base and, where the variant has both sides, in the variant. A record
not there yet reads `pending`. Run from the repository root:

    python experiments/variant_points.py RESULTS BASE=VARIANT [BASE=VARIANT ...] [-o FILE]
"""
from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

from harmony.figures import read_run
from harmony.jsonio import write_text

HARMONY = ("harmony-vDP", "harmony-vPP")
BASELINES = ("swap-dp", "swap-pp", "fsdp-offload", "zero-offload")     # C10's; resident is listed, not compared
SYSTEMS = HARMONY + BASELINES + ("resident",)
FINAL = re.compile(r"^N(\d+)-D(\d+)-(auto|best)\.jsonl$")


def final_time(path: Path) -> tuple[str, float | None]:
    """(status, s/iteration) of a final record; ('pending', None) where there is none yet."""
    if not path.exists():
        return "pending", None
    summary = read_run(str(path))[0]
    if summary is None:
        return "no summary", None
    t = summary.get("iter_time_s") if summary.get("status") == "ok" else None
    return summary.get("status") or "?", t


def points(root: Path, base: str) -> list[tuple[int, int]]:
    """(N, D) of every final record the base model has of Harmony and the baselines (resident's, at N = 1,
    are read at the same D by record_path)."""
    found = set()
    for system in HARMONY + BASELINES:
        for f in (root / "runs" / system / base).glob("N*-D*-*.jsonl"):
            if m := FINAL.match(f.name):
                found.add((int(m[1]), int(m[2])))
    return sorted(found, key=lambda p: (p[1], p[0]))


def record_path(root: Path, system: str, model: str, n: int, d: int) -> Path:
    if system == "resident":
        n = 1
    return root / "runs" / system / model / f"N{n}-D{d}-{'auto' if system in HARMONY else 'best'}.jsonl"


def _cell(status: str, t: float | None) -> str:
    return f"{t:.3f}" if t is not None else status


def table(root: Path, base: str, variant: str) -> list[str]:
    out = [f"## {base} -> {variant} ({root})",
           "N D system | base s/it | variant s/it | variant / base"]
    ratios = []
    for n, d in points(root, base):
        rec = {}     # system -> ((status, s/it) in the base, (status, s/it) in the variant)
        for system in SYSTEMS:
            rec[system] = tuple(final_time(record_path(root, system, m, n, d)) for m in (base, variant))
            (bs, bt), (vs, vt) = rec[system]
            rel = f"{vt / bt:.3f}" if bt and vt else "-"
            out.append(f"{n} {d} {system} | {_cell(bs, bt)} | {_cell(vs, vt)} | {rel}")
        for side, k in (("base", 0), ("variant", 1)):
            h = [rec[s][k][1] for s in HARMONY if rec[s][k][1] is not None]
            if not h:
                continue
            cells = [f"{s} {_cell(*rec[s][k]) if rec[s][k][1] is None else f'{rec[s][k][1] / min(h):.2f}x'}"
                     for s in BASELINES]
            ratios.append(f"{n} {d} {side}: Harmony {min(h):.3f} s; over it " + ", ".join(cells))
    return out + ["", "Each baseline's s/iteration over Harmony's best mode (C10's ratio; a baseline that could"
                  " not train is not counted there):"] + ratios


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("results", type=Path)
    p.add_argument("pairs", nargs="+", metavar="BASE=VARIANT")
    p.add_argument("-o", "--out", type=Path, help="also write the text here")
    a = p.parse_args(argv)
    lines = []
    for pair in a.pairs:
        base, sep, variant = pair.partition("=")
        if not sep or not base or not variant:
            p.error(f"{pair!r} is not BASE=VARIANT (e.g. resnet1026=resnet1026-cl)")
        if not any((a.results / "runs" / s / base).is_dir() for s in SYSTEMS):
            p.error(f"{a.results}/runs has no records of {base!r}")
        lines += table(a.results, base, variant) + [""]
    text = "\n".join(lines)
    print(text, end="")
    if a.out:
        write_text(a.out, text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
