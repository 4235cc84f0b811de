"""Drawing the figures from their rows (harmony/figures.py builds the rows and the CSV).

Conventions on every plot: Harmony in blues (vPP dark, vDP light), baselines in warm/grey colours;
measured = solid, simulated prediction = hatched bar / hollow marker with a dashed line; a configuration
that ran and failed is drawn as a red × at the axis with its status (OOM, infeasible, n/a, error); a grid
point with no record at all (status "missing") as a grey ○ "not run": nothing disappears silently, and
"not run" is never confused with a failure.
"""
from __future__ import annotations

import math
from collections import defaultdict
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from harmony.checks import control_ubatch, is_control, order_shares, start_mismatch  # noqa: E402

COLORS = {"harmony-vPP": "#08519c", "harmony-vDP": "#6baed6", "swap-dp": "#e6550d", "swap-pp": "#fd8d3c",
          "fsdp-offload": "#756bb1", "zero-offload": "#9e9ac8", "resident": "#636363", "pytorch": "#000000",
          "pytorch-reorder": "#969696"}
CONTROL_COLOR = "#bdbdbd"     # the controls `pytorch-reorder-u<k>` (C6), lighter than `pytorch-reorder`
CURVE_LABELS = {"pytorch": "plain PyTorch", "pytorch-reorder": "plain PyTorch, other microbatch (its rounding spread)"}
SHORT = {"oom": "OOM", "infeasible": "infeas.", "unavailable": "n/a", "error": "error", "missing": "not run",
         "interrupted": "interr.", "over-time": "> call"}
GiB = 1024 ** 3


def plot(kind: str, exp: dict, rows: list[dict], title: str, png: Path, pdf: Path) -> None:
    fn = {"throughput": _bars, "breakdown": _breakdown, "configs": _configs, "scaling": _scaling,
          "convergence": _convergence, "table": _table}[kind]
    fig = fn(exp, rows)
    fig.suptitle(title, fontsize=10)
    fig.tight_layout(rect=(0, 0.07 if fig.legends else 0, 1, 1))
    fig.savefig(png, dpi=130)
    fig.savefig(pdf)
    plt.close(fig)


def _ok(r) -> bool:
    return r.get("status") == "ok" and r.get("samples_per_s") not in (None, "")


def _label(r) -> str:
    tag = f"N={r['gpus']}" + (", predicted" if r["kind"] == "predicted" else "")
    return f"{r['system']} ({tag})"


def _mark_failed(ax, x, r, y=0.0, with_system=True):
    not_run = r.get("status") == "missing"
    color = "#888888" if not_run else "red"
    ax.plot([x], [y], marker="o" if not_run else "x", mfc="none", color=color, ms=5 if not_run else 7, zorder=5)
    status = SHORT.get(r.get("status"), r.get("status"))
    pred = " pred." if r.get("kind") == "predicted" else ""
    text = f"{r['system']} N={r['gpus']}{pred}: {status}" if with_system else status
    ax.annotate(text, (x, y), rotation=90, fontsize=5 if not_run else 6, color=color,
                xytext=(0, 6), textcoords="offset points", ha="center", va="bottom")


def _new_label(ax, label: str) -> str | None:
    return None if label in ax.get_legend_handles_labels()[1] else label


def _grid_axes(n: int, w: float = 4.6, h: float = 3.4):
    cols = min(n, 2) if n > 1 else 1
    nrows = math.ceil(n / cols)
    fig, axes = plt.subplots(nrows, cols, figsize=(w * cols, h * nrows + 0.6), squeeze=False)
    flat = [a for row in axes for a in row]
    for a in flat[n:]:
        a.axis("off")
    return fig, flat[:n]


def _series(rows):
    """Bars of one panel: one series per (system, N, measured/predicted), in row order."""
    keys = list(dict.fromkeys((r["system"], r["gpus"], r["kind"], r.get("cfg")) for r in rows))
    return keys


def _bars(exp, rows, metric="samples_per_s", ylabel="samples/s"):
    models = list(dict.fromkeys(r["model"] for r in rows))
    fig, axes = _grid_axes(len(models))
    for ax, model in zip(axes, models):
        mrows = [r for r in rows if r["model"] == model]
        Ds = sorted(dict.fromkeys(r["minibatch"] for r in mrows))
        keys = _series(mrows)
        width = 0.8 / max(len(keys), 1)
        for k, key in enumerate(keys):
            system, n, kind, cfg = key
            for i, D in enumerate(Ds):
                x = i + (k - (len(keys) - 1) / 2) * width
                match = [r for r in mrows if r["minibatch"] == D and (r["system"], r["gpus"], r["kind"], r.get("cfg")) == key]
                if not match:
                    continue
                r = match[0]
                if _ok(r):
                    ax.bar(x, float(r[metric]), width, color=COLORS.get(system, "#999"),
                           hatch="///" if kind == "predicted" else None, edgecolor="white" if kind != "predicted" else "black",
                           linewidth=0.4, label=_new_label(ax, _label(r)))
                else:
                    _mark_failed(ax, x, r)
        ax.set_xticks(range(len(Ds)), [f"D={D}" for D in Ds])
        ax.set_ylim(bottom=0)
        ax.set_title(_model_name(model, mrows), fontsize=9)
        ax.set_ylabel(ylabel, fontsize=8)
        ax.tick_params(labelsize=7)
    _legend(fig, axes)
    return fig


def _legend(fig, axes):
    handles, labels = {}, []
    for ax in axes:
        for h, lab in zip(*ax.get_legend_handles_labels()):
            if lab not in handles:
                handles[lab] = h
                labels.append(lab)
    if handles:
        fig.legend([handles[lab] for lab in labels], labels, loc="lower center", fontsize=7,
                   ncol=min(4, len(labels)), frameon=False)


def _breakdown(exp, rows):
    fig, axes = plt.subplots(1, 2, figsize=(11, 4.2))
    ax1, ax2 = axes
    keys = list(dict.fromkeys((r["minibatch"], r["system"], r["gpus"], r["kind"]) for r in rows))
    xs = range(len(keys))
    bottoms = [0.0] * len(keys)
    parts = [("bytes_h2d", "host→GPU", "#3182bd"), ("bytes_d2h", "GPU→host", "#e6550d"),
             ("bytes_p2p", "GPU↔GPU", "#31a354"), ("bytes_allreduce", "all-reduce", "#756bb1")]
    for col, lab, color in parts:
        vals = []
        for key in keys:
            r = next(r for r in rows if (r["minibatch"], r["system"], r["gpus"], r["kind"]) == key)
            v = r.get(col)
            vals.append(float(v) / GiB if r.get("status") == "ok" and v not in (None, "") else 0.0)
        ax1.bar(xs, vals, bottom=bottoms, color=color, label=lab, width=0.7)
        bottoms = [b + v for b, v in zip(bottoms, vals)]
    for x, key in zip(xs, keys):
        r = next(r for r in rows if (r["minibatch"], r["system"], r["gpus"], r["kind"]) == key)
        if r.get("status") != "ok":
            _mark_failed(ax1, x, r)
            _mark_failed(ax2, x, r)
            continue
        if r["kind"] == "predicted":
            ax1.annotate("pred.", (x, bottoms[x]), fontsize=6, ha="center", va="bottom")
        if r.get("iter_time_s") not in (None, ""):
            ax2.bar(x - 0.18, float(r["iter_time_s"]), 0.36, color=COLORS.get(r["system"], "#999"),
                    hatch="///" if r["kind"] == "predicted" else None,
                    label="measured" if r["kind"] == "measured" else "predicted (N not present)")
        if r["kind"] == "measured" and r.get("predicted_iter_time_s") not in (None, ""):
            ax2.bar(x + 0.18, float(r["predicted_iter_time_s"]), 0.36, color="white", edgecolor="black",
                    hatch="..", label="simulator's prediction")
    ticks = [f"{s}\nD={D} N={n}" for D, s, n, _ in keys]
    for ax in axes:
        ax.set_xticks(list(xs), ticks, rotation=60, fontsize=6, ha="right")
    ax1.set_ylabel("swap volume per iteration (GiB)", fontsize=8)
    ax2.set_ylabel("iteration time (s)", fontsize=8)
    ax1.legend(fontsize=7)
    h, lab = ax2.get_legend_handles_labels()
    uniq = dict(zip(lab, h))
    ax2.legend(uniq.values(), uniq.keys(), fontsize=7)
    return fig


def _configs(exp, rows):
    fig, ax = plt.subplots(figsize=(7, 4))
    cfgs = list(dict.fromkeys(r["cfg"] for r in rows))
    for i, cfg in enumerate(cfgs):
        for r in [r for r in rows if r["cfg"] == cfg]:
            off = 0.2 if r["kind"] == "predicted" else -0.2
            if _ok(r):
                ax.bar(i + off, float(r["samples_per_s"]), 0.38, color=COLORS.get(r["system"], "#999"),
                       hatch="///" if r["kind"] == "predicted" else None, label=_label(r))
                if r["kind"] == "measured" and r.get("predicted_iter_time_s") not in (None, ""):
                    ax.plot([i + off], [r["minibatch"] / float(r["predicted_iter_time_s"])], "k_", ms=14,
                            label="simulator's prediction")
            else:
                _mark_failed(ax, i + off, r)
    names = [("searched" if c == "auto" else c.replace("u", "u_fwd/u_bwd=").replace("-p", ", P=").replace("-", "/"))
             for c in cfgs]
    ax.set_xticks(range(len(cfgs)), names, fontsize=7, rotation=15)
    ax.set_ylabel("samples/s", fontsize=8)
    ax.set_ylim(bottom=0)          # throughput; a grid with nothing run yet would otherwise span -0.05..0.05
    h, lab = ax.get_legend_handles_labels()
    uniq = dict(zip(lab, h))
    if uniq:
        ax.legend(uniq.values(), uniq.keys(), fontsize=7)
    return fig


def _scaling(exp, rows):
    metric = exp.get("metric", "samples_per_s")
    models = list(dict.fromkeys(r["model"] for r in rows))
    fig, ax = plt.subplots(1, 2, figsize=(11, 4.2))
    ylabel = "samples/s" if metric == "samples_per_s" else "swap volume per iteration (GiB)"
    markers = ["o", "s", "^", "D", "v", "P"]
    for mi, model in enumerate(models):
        for si, system in enumerate(("harmony-vDP", "harmony-vPP")):
            a = ax[si]
            rs = sorted([r for r in rows if r["model"] == model and r["system"] == system], key=lambda r: r["gpus"])
            good = [r for r in rs if r.get("status") == "ok" and r.get(metric) not in (None, "")]

            def val(r):
                v = float(r[metric])
                return v if metric == "samples_per_s" else v / GiB
            meas = [r for r in good if r["kind"] == "measured"]
            pred = [r for r in good if r["kind"] == "predicted"]
            color = plt.cm.viridis(mi / max(len(models) - 1, 1))
            name = _model_name(model, rs)
            if meas:
                a.plot([r["gpus"] for r in meas], [val(r) for r in meas], "-", marker=markers[mi % 6], color=color,
                       label=f"{name} measured")
            if pred:
                # Dashed through every point by N (a prediction may lie below or above the measured N).
                chain = sorted(meas + pred, key=lambda r: r["gpus"])
                a.plot([r["gpus"] for r in chain], [val(r) for r in chain], "--", color=color)
                a.plot([r["gpus"] for r in pred], [val(r) for r in pred], linestyle="none", marker=markers[mi % 6],
                       mfc="none", color=color, label=f"{name} predicted")
            for r in rs:
                if r.get("status") != "ok":
                    _mark_failed(a, r["gpus"], r)
    for si, system in enumerate(("harmony-vDP", "harmony-vPP")):
        ax[si].set_title(system, fontsize=9)
        ax[si].set_xlabel("GPUs (N)", fontsize=8)
        ax[si].set_ylabel(ylabel, fontsize=8)
        ax[si].set_xscale("log", base=2)
        ax[si].legend(fontsize=6)
    return fig


def _model_name(model: str, rows) -> str:
    n = next((r.get("model_params") for r in rows if r.get("model_params") not in (None, "")), None)
    if n is None:
        return model
    n = float(n)
    return f"{model} ({n / 1e9:.2f} B)" if n >= 1e8 else f"{model} ({n / 1e6:.2f} M)"


def _convergence(exp, rows):
    fig, ax = plt.subplots(figsize=(7, 4.2))
    curves = defaultdict(list)
    status = {}
    for r in rows:
        key = (r["system"], r["gpus"])
        status[key] = r.get("status")
        if r.get("loss") not in (None, ""):
            curves[key].append((int(r["iteration"]), float(r["loss"])))
    styles = ["-", "--", ":", "-.", (0, (5, 1)), (0, (1, 1))]
    ref = next((dict(pts) for (system, n), pts in curves.items() if system == "pytorch" and str(n) == "1"), {})
    for i, key in enumerate(status):
        system, n = key
        pts = sorted(curves.get(key, []))
        u = control_ubatch(system)
        k = order_shares(system)
        label = CURVE_LABELS.get(system) or (f"plain PyTorch, u = {u} (its rounding spread)" if u else
                                             f"plain PyTorch in Harmony's order, {k} share{'s' * (k > 1)}" if k
                                             else f"{system} N={n}")
        if is_control(system) and start_mismatch(dict(pts), ref):
            label = "plain PyTorch, other microbatch (another starting point: no control, check C6)"
        if pts and status[key] == "ok":
            ax.plot([p[0] for p in pts], [p[1] for p in pts], linestyle=styles[i % len(styles)],
                    color=COLORS.get(system, CONTROL_COLOR if is_control(system) else "#999"), label=label,
                    lw=0.8 if k else 1.3)
        else:
            ax.plot([], [], "x", color="red", label=f"{label}: {SHORT.get(status[key], status[key])}")
    data = next((r.get("data") for r in rows if r.get("data")), "unknown")
    ax.set_title(f"data: {data}", fontsize=7)
    ax.set_xlabel("iteration", fontsize=8)
    ax.set_ylabel("training loss", fontsize=8)
    ax.legend(fontsize=7)
    return fig


def _table(exp, rows):
    cols = [c for c in dict.fromkeys(k for r in rows for k in r)
            if c not in ("figure", "scale", "hardware", "kind", "status")]
    if exp.get("columns"):
        cols = [c for c in exp["columns"] if c in cols]
    fig, ax = plt.subplots(figsize=(min(2 + 1.3 * len(cols), 18), 1.2 + 0.35 * len(rows)))
    ax.axis("off")
    cells = [[_fmt(r.get(c)) for c in cols] for r in rows] or [["(no rows)"] + [""] * (len(cols) - 1)]
    t = ax.table(cellText=cells, colLabels=cols or ["table"], loc="center", cellLoc="center")
    t.auto_set_font_size(False)
    t.set_fontsize(7)
    t.scale(1, 1.3)
    return fig


def _fmt(v) -> str:
    try:
        f = float(v)
        return f"{f:.4g}"
    except (TypeError, ValueError):
        return "" if v is None else str(v)[:40]
