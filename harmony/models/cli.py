"""`harmony models`: every named model with its vLayer count and parameter total next to the paper's.

Counts come from building each chain on the meta device (no memory for weights).
"""
from __future__ import annotations

import sys

from harmony.models.base import get_model, list_models, paper_facts

COLUMNS = ("model", "family", "vLayers", "paper vLayers", "params", "paper params", "diff %")


def model_rows(names: list[str] | None = None) -> list[dict]:
    rows = []
    for name in names or list_models():
        spec = get_model(name)
        layers = spec.build("meta")
        params = sum(p.numel() for p in layers.parameters())
        paper = paper_facts(name)
        pp = paper.get("params")
        rows.append({"model": name, "family": spec.family, "vlayers": len(layers),
                     "paper_vlayers": paper.get("vlayers"), "params": params, "paper_params": pp,
                     "diff_pct": None if pp is None else 100.0 * (params - pp) / pp})
    return rows


def _fmt(row: dict) -> list[str]:
    def opt(v, f):
        return "–" if v is None else f(v)
    return [row["model"], row["family"], str(row["vlayers"]), opt(row["paper_vlayers"], str),
            f"{row['params']:,} ({row['params'] / 1e9:.3f} B)", opt(row["paper_params"], lambda v: f"{v / 1e9:.3f} B"),
            opt(row["diff_pct"], lambda v: f"{v:+.2f}")]


def format_table(rows: list[dict], markdown: bool = False) -> str:
    cells = [_fmt(r) for r in rows]
    if markdown:
        lines = ["| " + " | ".join(COLUMNS) + " |", "|" + "|".join(["---"] * len(COLUMNS)) + "|"]
        lines += ["| " + " | ".join(c) + " |" for c in cells]
        return "\n".join(lines)
    widths = [max(len(x) for x in col) for col in zip(COLUMNS, *cells)]
    fmt = "  ".join(f"{{:{'<' if i < 2 else '>'}{w}}}" for i, w in enumerate(widths))
    return "\n".join([fmt.format(*COLUMNS), *(fmt.format(*c) for c in cells)])


def add_arguments(p) -> None:
    p.add_argument("names", nargs="*", help="models to list (default: all)")
    p.add_argument("--markdown", action="store_true", help="print a Markdown table (docs/models.md)")


def main(args) -> int:
    print(format_table(model_rows(args.names or None), markdown=args.markdown))
    if args.markdown:
        print("\nvLayers include the loss vLayer. Paper: the parameter counts of the paper's profiles "
              "(3 significant digits); diff % = (ours - paper) / paper.", file=sys.stderr)
    return 0
