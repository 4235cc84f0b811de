"""The experiment plan behind the Snakemake workflow: grids -> the list of artifacts to produce.

Snakemake (workflows/common.smk) and `harmony figure --from` both use this module, so the file layout
under results/<scale>/<hardware>/ is defined once:

  env.json  calibration.json  models/<model>.json  profiles/<model>.json
  schedules/<model>/<mode>-N<n>-D<d>-<cfg>.json   (+ .csv every candidate, .trace.json.gz)
  runs/<system>/<model>/N<n>-D<d>-<cfg>.jsonl      throughput runs (Harmony and baselines)
  convergence/<figure>/<model>/<system>-N<n>.jsonl loss curves (figures 13, 21)
  <figure>.csv .png .pdf .env.json                 the plotted numbers, the plots, their environment
  logs/<stage>/...                                 one log per job

<cfg> is `auto` (schedule searched) or `u<fwd>-<bwd>-p<pack>` (fixed microbatch sizes and pack size).
<system> is `harmony-vPP`, `harmony-vDP`, a baseline name, or `pytorch` (plain PyTorch, convergence;
`pytorch-reorder`, `pytorch-reorder-u<k>`: plain PyTorch at another microbatch size, check C6's controls
for rounding).

It also has three small commands used by the rules (`python -m harmony.workflow ...`):
  guard      run a stage command; if it fails, still leave a record saying so (status error/oom/infeasible)
  reference  plain PyTorch training on real data (the reference loss curve)
  joblist    turn `snakemake -n -p` output into a shell script for a machine without snakemake
"""
from __future__ import annotations

import argparse
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import yaml

from harmony.jsonio import (DEFERRED_EXIT, call_window_s, candidate_paths, had_whole_call, partial_path,
                            undo_interrupted)

FIGURES = ("figure8", "figure10", "figure12", "figure13", "figure17", "figure18", "figure21", "table1")
SCALES = ("smoke", "paper", "large")
BASELINES = ("swap-dp", "swap-pp", "fsdp-offload", "zero-offload", "resident")
HARMONY = ("harmony-vPP", "harmony-vDP")

RUN_RE = re.compile(r"runs/(?P<system>[^/]+)/(?P<model>[^/]+)/N(?P<gpus>\d+)-D(?P<minibatch>\d+)-(?P<cfg>[^/]+)\.jsonl$")
CONV_RE = re.compile(r"convergence/(?P<figure>[^/]+)/(?P<model>[^/]+)/(?P<system>[^/]+)-N(?P<gpus>\d+)\.jsonl$")
SCHED_RE = re.compile(r"schedules/(?P<model>[^/]+)/(?P<mode>vPP|vDP)-N(?P<gpus>\d+)-D(?P<minibatch>\d+)-(?P<cfg>[^/]+)\.json$")


# ------------------------------------------------------------------------------------------------
# Names <-> arguments
# ------------------------------------------------------------------------------------------------
def cfg_name(sched) -> str:
    """'auto' or {'ubatch_fwd': 10, 'ubatch_bwd': 5, 'pack_size': 14} -> 'auto' / 'u10-5-p14'."""
    if sched in (None, "auto"):
        return "auto"
    return f"u{sched['ubatch_fwd']}-{sched['ubatch_bwd']}-p{sched['pack_size']}"


def cfg_args(cfg: str) -> str:
    """'u10-5-p14' -> '--ubatch-fwd 10 --ubatch-bwd 5 --pack-size 14'; 'auto' -> ''."""
    if cfg == "auto":
        return ""
    m = re.fullmatch(r"u(\d+)-(\d+)-p(\d+)", cfg)
    if not m:
        raise ValueError(f"bad schedule configuration name {cfg!r}: use 'auto' or u<fwd>-<bwd>-p<pack>")
    return f"--ubatch-fwd {m[1]} --ubatch-bwd {m[2]} --pack-size {m[3]}"


def parse_path(path: str) -> dict | None:
    """Identity of a run record or schedule from its path (the path is authoritative for the grid key)."""
    p = str(path).replace(os.sep, "/")
    for kind, rx in (("run", RUN_RE), ("convergence", CONV_RE), ("schedule", SCHED_RE)):
        m = rx.search(p)
        if m:
            d = {"kind": kind, **m.groupdict()}
            for k in ("gpus", "minibatch"):
                if k in d:
                    d[k] = int(d[k])
            if kind == "schedule":
                d["system"] = f"harmony-{d['mode']}"
            return d
    return None


def run_gpus(wanted: list[int], present: int) -> tuple[list[int], list[int]]:
    """(N to run, N to predict) of a figure's GPU counts on a machine with `present` GPUs."""
    run = [n for n in wanted if n <= present]
    predict = [n for n in wanted if n > present]
    if predict and present >= 1 and not run:
        run = [present]
    return run, predict


# ------------------------------------------------------------------------------------------------
# The plan
# ------------------------------------------------------------------------------------------------
def detect_cuda() -> tuple[bool, int, str]:
    """(cuda available, GPU count, hardware tag) of this machine."""
    try:
        import torch
        if torch.cuda.is_available():
            from harmony.metrics import hardware_tag
            n = torch.cuda.device_count()
            return True, n, hardware_tag({"gpu": torch.cuda.get_device_name(0), "gpu_count": n})
    except Exception:  # noqa: BLE001 - no torch / broken CUDA: plan for the CPU
        pass
    return False, 0, "cpu"


def parse_ubatch_override(value) -> str | list[int]:
    """`baseline_ubatch` from the command line: `search`, an int, or a comma list (`--config baseline_ubatch=4,8`)."""
    if value == "search":
        return "search"
    items = value if isinstance(value, (list, tuple)) else str(value).split(",")
    try:
        us = [int(u) for u in items]
    except ValueError:
        raise ValueError(f"baseline_ubatch={value!r}: give `search` or microbatch sizes, e.g. baseline_ubatch=4,8") from None
    if not us or min(us) < 1:
        raise ValueError(f"baseline_ubatch={value!r}: microbatch sizes must be positive integers")
    return us


def grid_of(exp: dict, scale: str, hardware: str) -> dict:
    """A figure's grid at `scale` for one results folder: its model ids replaced where the figure's
    `variants` names a variant for that scale and hardware (device README item 63: a folder's figure 10
    takes resnet1026-cl, the channels-last alias, once every system has run it there; other folders keep
    the base). The workflow's targets and the figure's rows both read the grid through this."""
    grid = exp["grid"][scale]
    rename = ((exp.get("variants") or {}).get(scale) or {}).get(hardware) or {}
    unknown = sorted(set(rename) - set(grid.get("models") or {}))
    if unknown:
        raise ValueError(f"{exp.get('figure', 'a figure')}: variants for {scale}/{hardware} name "
                         f"{', '.join(unknown)}, not models of its {scale} grid; use the grid's model ids as keys")
    if not rename:
        return grid
    return {**grid, "models": {rename.get(m, m): v for m, v in grid["models"].items()}}


SEARCH_UBATCHES = (1, 2, 4, 8, 16, 32, 64, 128, 256)


def baseline_ubatches(minibatch: int, gpus: int, spec="search") -> list[int]:
    """The microbatch sizes a baseline's search tries: `search` = the powers of two that divide D/N, a list
    = those of its candidates that divide D/N; D/N alone when none does."""
    per_gpu = max(minibatch // max(gpus, 1), 1)
    cands = SEARCH_UBATCHES if spec == "search" else tuple(spec)
    return [u for u in cands if u <= per_gpu and per_gpu % u == 0] or [per_gpu]


@dataclass
class Plan:
    scale: str
    hardware: str
    gpus_present: int
    settings: dict          # experiments/scales.yaml[scale]
    aliases: dict           # experiments/scales.yaml["models"]
    experiments: dict       # figure -> its YAML
    data_dir: str = "data"
    record_failures: bool = True

    @staticmethod
    def from_config(config: dict, root: str | os.PathLike = ".") -> "Plan":
        root = Path(root)
        exp_dir = root / config.get("experiments_dir", "experiments")
        scales = yaml.safe_load((exp_dir / "scales.yaml").read_text())
        scale, hardware, gpus = config.get("scale", "auto"), config.get("hardware", "auto"), config.get("gpus_present", "auto")
        need_detect = scale == "auto" or (hardware == "auto" and scale != "smoke") or (gpus == "auto" and scale != "smoke")
        cuda, n_cuda, tag = detect_cuda() if need_detect else (False, 0, "cpu")
        if scale == "auto":
            scale = "paper" if cuda else "smoke"
        if scale not in SCALES:
            raise ValueError(f"scale {scale!r} is not one of auto, {', '.join(SCALES)}")
        settings = dict(scales[scale])
        # Device-time overrides (each run records its iterations and the baseline search its candidates):
        # shorter convergence curves, fewer timed iterations per throughput run, fewer baseline microbatches.
        if config.get("convergence_iters"):
            settings["convergence_iters"] = int(config["convergence_iters"])
        if config.get("iters"):
            settings["iters"] = int(config["iters"])
        if config.get("baseline_ubatch"):
            settings["baseline_ubatch"] = parse_ubatch_override(config["baseline_ubatch"])
        if config.get("baseline_ubatch_start_from"):
            start_from = Path(config["baseline_ubatch_start_from"])
            if not (start_from / "runs").is_dir():
                raise ValueError(f"baseline_ubatch_start_from={start_from}: no runs/ folder there; give a results "
                                 f"folder such as results/paper/1xH100-80GB-HBM3")
            settings["baseline_ubatch_start_from"] = str(start_from)
        if hardware == "auto":
            hardware = "cpu" if scale == "smoke" else tag
        if gpus == "auto":
            gpus = settings["max_gpus"] if scale == "smoke" else n_cuda
        if scale != "smoke" and isinstance(settings.get("max_gpus"), int):
            gpus = min(gpus, settings["max_gpus"])
        experiments = {f: yaml.safe_load((exp_dir / f"{f}.yaml").read_text()) for f in FIGURES}
        return Plan(scale, hardware, int(gpus), settings, scales.get("models", {}), experiments,
                    config.get("data_dir", "data"), bool(config.get("record_failures", True)))

    # -- layout ------------------------------------------------------------------------------------
    @property
    def root(self) -> str:
        return f"results/{self.scale}/{self.hardware}"

    @property
    def device(self) -> str:
        return self.settings["device"]

    def grid(self, figure: str) -> dict:
        return grid_of(self.experiments[figure], self.scale, self.hardware)

    def run_path(self, system, model, gpus, minibatch, cfg) -> str:
        return f"{self.root}/runs/{system}/{model}/N{gpus}-D{minibatch}-{cfg}.jsonl"

    def schedule_path(self, mode, model, gpus, minibatch, cfg) -> str:
        return f"{self.root}/schedules/{model}/{mode}-N{gpus}-D{minibatch}-{cfg}.json"

    def convergence_path(self, figure, model, system, gpus) -> str:
        return f"{self.root}/convergence/{figure}/{model}/{system}-N{gpus}.jsonl"

    # -- what a figure needs ------------------------------------------------------------------------
    def run_gpus(self, wanted: list[int]) -> tuple[list[int], list[int]]:
        """(N to run, N to predict): run every N <= GPUs present; for larger N, run at the largest N
        present (the figure's N capped) and let the simulator predict the figure's N."""
        return run_gpus(wanted, self.gpus_present)

    def figure_inputs(self, figure: str) -> dict[str, list[str]]:
        """{'runs': run records, 'predictions': schedules simulated for N not present, 'tables': ...}."""
        exp, grid = self.experiments[figure], self.grid(figure)
        runs, preds, tables = [], [], []
        if exp["kind"] == "table":
            tables.append(f"{self.root}/table1-search.csv")
        elif exp["kind"] == "convergence":
            for model in grid["models"]:
                for c in grid["curves"]:
                    if c["gpus"] <= max(self.gpus_present, 1):
                        runs.append(self.convergence_path(figure, model, c["system"], c["gpus"]))
        else:
            for model, minibatches in grid["models"].items():
                for D in minibatches:
                    for system, wanted in grid["systems"].items():
                        run_n, pred_n = self.run_gpus(wanted)
                        for sched in (grid.get("schedules") or ["auto"]):
                            cfg = cfg_name(sched) if system in HARMONY else "best"
                            runs += [self.run_path(system, model, n, D, cfg) for n in run_n]
                            if system in HARMONY:
                                mode = system.split("-")[1]
                                preds += [self.schedule_path(mode, model, n, D, cfg) for n in pred_n]
        return {"runs": _unique(runs), "predictions": _unique(preds), "tables": tables}

    def all_inputs(self, figure: str) -> list[str]:
        d = self.figure_inputs(figure)
        return d["runs"] + d["predictions"] + d["tables"]

    def figure_outputs(self, figures) -> list[str]:
        """The CSV, PNG, PDF and environment record of each figure."""
        return [f"{self.root}/{f}.{ext}" for f in figures for ext in ("csv", "png", "pdf", "env.json")]

    def target_inputs(self, figures) -> list[str]:
        """What a target rule asks for: the figures and, explicitly, every record they plot, so that a
        deleted run record is re-made (and then the figure, whose input is newer) even when the figure
        files are still there."""
        return self.figure_outputs(figures) + [f for fig in figures for f in self.all_inputs(fig)]

    def table_models(self) -> list[str]:
        return list(self.grid("table1")["models"])

    # -- arguments of the stage commands ------------------------------------------------------------
    def decompose_args(self, model: str) -> str:
        """`harmony decompose` arguments for a model id (zoo name, or alias = zoo model + overrides)."""
        a = self.aliases.get(model)
        if not a:
            return model
        sets = " ".join(f"--set {k}={v}" for k, v in (a.get("set") or {}).items())
        return f"{a['base']} {sets} --name {model}".replace("  ", " ")

    def cap_args(self) -> str:
        cap = self.settings.get("gpu_memory")
        return f"--gpu-memory {cap}" if cap else ""

    def ubatch_args(self) -> str:
        u = self.settings.get("profile_ubatch")
        return f"--ubatch {u}" if u else ""

    def baseline_ubatch_args(self, minibatch: int, gpus: int, system: str | None = None,
                             model: str | None = None) -> str:
        """`--ubatch` of a baseline: `search` = powers of two up to D/N (the baseline keeps the fastest that
        fits: its best setting); a list = those candidates that divide D/N; absent = the baseline's default.
        With `baseline_ubatch_start_from` (a results folder of another machine) and a search, also
        `--ubatch-start`: the best u of the same system, model and D there (the climb starts at it). Without
        such a record, swap-dp and swap-pp start where the simulator predicts their fastest u that fits
        (`--ubatch-start predicted`, from the profile and calibration the rule passes): their times over u
        can have more than one peak, and a climb from the middle can stop at the wrong one
        (docs/baselines.md, docs/performance.md entry 88)."""
        spec = self.settings.get("baseline_ubatch")
        if not spec:
            return ""
        us = baseline_ubatches(minibatch, gpus, spec)
        start = (self.baseline_best_ubatch(system, model, minibatch, gpus)
                 if len(us) > 1 and system and model else None)
        if start is None and len(us) > 1 and system:
            from baselines.predicted_start import SYSTEMS as PREDICTABLE    # they run a Harmony task graph
            start = "predicted" if system in PREDICTABLE else None
        return "--ubatch " + ",".join(map(str, us)) + (f" --ubatch-start {start}" if start else "")

    def baseline_best_ubatch(self, system: str, model: str, minibatch: int, gpus: int) -> int | None:
        """The u that `system` trained `model` fastest with at this D in `baseline_ubatch_start_from`: its
        record at these GPUs, else at one GPU (None when neither ran ok)."""
        folder = self.settings.get("baseline_ubatch_start_from")
        if not folder:
            return None
        from harmony.jsonio import read_jsonl
        for n in dict.fromkeys((gpus, 1)):
            path = Path(folder) / "runs" / system / model / f"N{n}-D{minibatch}-best.jsonl"
            try:
                summary = read_jsonl(path)[-1]
            except (OSError, ValueError, IndexError):
                continue
            if summary.get("status") == "ok" and summary.get("ubatch"):
                return int(summary["ubatch"])
        return None

    def convergence_schedule(self, figure: str) -> str:
        return cfg_name(self.grid(figure)["schedule"])

    def convergence_minibatch(self, figure: str, model: str) -> int:
        return self.grid(figure)["models"][model][0]

    def describe(self) -> str:
        return (f"scale={self.scale} hardware={self.hardware} gpus_present={self.gpus_present} "
                f"device={self.device} cap={self.settings.get('gpu_memory')}")


def _unique(xs: list[str]) -> list[str]:
    return list(dict.fromkeys(xs))


# ------------------------------------------------------------------------------------------------
# guard: a failed stage still leaves a record
# ------------------------------------------------------------------------------------------------
def classify_failure(text: str) -> str:
    t = text.lower()
    if "out of memory" in t or "outofmemory" in t or "oom" in t.split():
        return "oom"
    if any(w in t for w in ("infeasible", "does not fit", "no schedule fits", "exceeds the cap", "cap smaller",
                            "no feasible")):
        return "infeasible"
    if "not installed" in t or "unavailable" in t:
        return "unavailable"
    return "error"


def failure_stub(path: Path, schedule: str | None) -> dict | None:
    """If `schedule` is a failure stub left by a guarded `harmony schedule`, return it."""
    if not schedule:
        return None
    try:
        rec = json.loads(Path(schedule).read_text())
    except (OSError, json.JSONDecodeError):
        return None
    return rec if rec.get("artifact") == "stage-failure" else None


def _write_failure(out: Path, args, status: str, message: str, **extra) -> None:
    from harmony.metrics import env_record, make_summary
    out.parent.mkdir(parents=True, exist_ok=True)
    if out.suffix == ".json":    # a schedule (or other JSON artifact) that could not be made
        rec = {"artifact": "stage-failure", "schema_version": 1, "status": status, "message": message,
               "command": args.command}
        out.write_text(json.dumps(rec, indent=1) + "\n")
        return
    env = env_record(args.device, args.precision, None)
    env["gpu_memory_cap"] = args.gpu_memory
    summ = make_summary(system=args.system, model=args.model, mode=args.mode, gpus=args.gpus,
                        minibatch=args.minibatch, status=status, iterations=[], warmup=0, env=env,
                        message=message, recorded_by="harmony.workflow guard", **extra)
    with open(out, "a") as f:   # keep whatever iteration lines the failed run wrote
        f.write(json.dumps(summ) + "\n")


def _has_summary(out: Path) -> bool:
    if not out.exists() or out.stat().st_size == 0:
        return False
    if out.suffix == ".json":
        return True
    return any('"record": "summary"' in line or '"record":"summary"' in line for line in out.read_text().splitlines())


STOP_DRAIN_S = 8.0     # at SIGTERM, how long the guard forwards its command's last words (timeout -k 10)


def guard(args) -> int:
    out = Path(args.out)
    stub = failure_stub(out, args.schedule)
    if stub:   # the schedule stage already failed: this run is that failure, not a new one
        print(f"schedule {args.schedule} failed ({stub['status']}): {stub['message']}", file=sys.stderr)
        if out.exists():
            out.unlink()
        _write_failure(out, args, stub["status"], f"schedule: {stub['message']}")
        return 0
    for stale in (out, partial_path(out)):
        if stale.exists():
            stale.unlink()   # never append to a stale record
    tail: list[str] = []
    began = time.time()
    forwarder: threading.Thread | None = None     # forwards the command's stderr, once it runs

    def stopped(signum, frame):
        """The device call's end stops the job list (SIGTERM to its process group, this process and the
        command's included). A run record whose job had the whole call is then a result, over-time: no call
        of that length finishes it (zero-offload resnet1026 D=1024 took over 454 s for its first iteration
        after 90 s of set-up, h100-grid41); any other job ends with no record and runs next call. A baseline
        search decides itself (its candidate in flight, not the search, had the call or not: baselines/cli.py
        stopped_by_call_end) and exits DEFERRED_EXIT: no record here, its candidates on record stand; one that
        did not end in time to say is not recorded over-time either while it has candidates on record."""
        last = list(tail)         # the run's own last lines, before what it prints on its way out
        if forwarder is not None:
            # the command got the same SIGTERM: let it say where it was (harmony run prints every worker
            # thread's stack) and end, before this process, which holds the pipe to the log, exits
            forwarder.join(STOP_DRAIN_S)
        if command_exit(1.0) == DEFERRED_EXIT:
            # a baseline search decided itself what the stop leaves (baselines/cli.py stopped_by_call_end):
            # its finished candidates stand, and the next call goes on from them
            print(f"guard: {out} left for the next call at the call's end; no record written", file=sys.stderr,
                  flush=True)
            os._exit(128 + signum)
        undo_interrupted(out)
        why = had_whole_call(began) if out.suffix == ".jsonl" and args.record_failures else None
        if why is not None and not _has_summary(out):
            if candidate_paths(out):
                # a search that did not end in time to say (above): its candidates on record stand, and the
                # next call's search goes on from them and judges its candidate in flight itself
                print(f"guard: {out} (a microbatch search with candidates on record) stopped at the call's "
                      f"end; no record written", file=sys.stderr, flush=True)
                os._exit(128 + signum)
            partial = partial_path(out)
            if partial.exists() and not out.exists():
                os.replace(partial, out)
            _write_failure(out, args, "over-time", f"stopped at the device call's end: {why}. Last output: "
                           + " | ".join(x for x in last[-5:] if x.strip())[:1500], call_window_s=call_window_s())
            print(f"guard: {out} stopped at the call's end; recorded over-time", file=sys.stderr, flush=True)
            os._exit(0)
        os._exit(128 + signum)
    started: list[subprocess.Popen] = []

    def command_exit(wait_s: float) -> int | None:
        """The command's exit status once it has ended (waiting up to wait_s), else None. Peeked at with
        waitid(WNOWAIT): the stop handler runs inside the main thread's proc.wait(), which holds the
        Popen's waitpid lock and reaps the command afterwards."""
        if not started or not hasattr(os, "waitid"):
            return None
        end = time.time() + wait_s
        while True:
            try:
                r = os.waitid(os.P_PID, started[0].pid, os.WEXITED | os.WNOWAIT | os.WNOHANG)
            except ChildProcessError:      # already reaped
                return started[0].returncode
            if r is not None:
                return r.si_status if r.si_code == os.CLD_EXITED else -r.si_status
            if time.time() > end:
                return None
            time.sleep(0.05)
    signal.signal(signal.SIGTERM, stopped)
    proc = subprocess.Popen(args.command, stdout=sys.stdout, stderr=subprocess.PIPE, text=True)
    started.append(proc)

    def forward() -> None:
        for line in proc.stderr:
            # kept before it is echoed: a stop that follows the echoed line finds it in the record's message
            tail[:] = (tail + [line.rstrip()])[-15:]
            sys.stderr.write(line)
            sys.stderr.flush()
    forwarder = threading.Thread(target=forward, daemon=True, name="guard-stderr")
    forwarder.start()
    rc = proc.wait()
    forwarder.join()
    if rc == 0 and _has_summary(out):
        return 0
    if rc == DEFERRED_EXIT:      # a baseline search left the rest for the next call: no record, by design
        print(f"guard: {out} left for the next call (exit {rc}); no record written", file=sys.stderr)
        return rc
    message = f"exit {rc}: " + " | ".join(x for x in tail[-5:] if x.strip())
    if not args.record_failures:
        print(f"guard: {message}", file=sys.stderr)
        return rc or 1
    if not _has_summary(out):
        partial = partial_path(out)
        if partial.exists() and not out.exists():   # the iteration lines of a run that died mid-way
            os.replace(partial, out)
        _write_failure(out, args, classify_failure("\n".join(tail)) if rc else "error", message[:2000])
    print(f"guard: command failed; recorded in {out}", file=sys.stderr)
    return 0


# ------------------------------------------------------------------------------------------------
# reference: plain PyTorch on the same data (the reference loss curve of figures 13 and 21)
# ------------------------------------------------------------------------------------------------
def spec_from_model_json(path: str):
    from harmony.models import get_model
    rec = json.loads(Path(path).read_text())
    src = rec.get("source") or {}
    if src.get("kind", "zoo") != "zoo":
        raise ValueError(f"{path}: reference training needs a zoo model, not {src.get('kind')}")
    return get_model(src.get("name", rec["model"]), **(src.get("overrides") or {}))


def reference(args) -> int:
    """Plain PyTorch: the whole chain on one device, one optimizer step per minibatch; with --ubatch the
    minibatch is split and gradients accumulated with weights u_i / D (the same synchronous SGD). With
    --shares K the minibatch is first cut into K rank shares, each accumulated on its own and the shares
    summed in rank order, and with --host-optimizer the step runs on host copies: the runtime's own order of
    arithmetic (vDP over K GPUs; K = 1 for vPP), which Harmony's runs equal bit for bit on the CPU
    (harmony.reference.train_in_order; the `pytorch-hostopt-s<k>` curves of check C6)."""
    import torch
    from harmony.data import describe_data, load_batches
    from harmony.gpumem import set_deterministic, set_precision
    from harmony.jsonio import JsonlWriter
    from harmony.metrics import IterationRecord, env_record, make_summary
    from harmony.reference import even_shares, train_in_order
    set_precision(args.precision)           # the matmul settings every stage uses
    if args.threads is not None:
        if args.threads < 1:
            raise SystemExit(f"reference: --threads {args.threads}: give 1 or more (or leave it out: torch's default)")
        torch.set_num_threads(args.threads)
    if args.deterministic and args.device.startswith("cuda"):
        set_deterministic(strict=True)      # as `harmony run --deterministic`'s workers
    spec = spec_from_model_json(args.model)
    batches = load_batches(spec, args.data, args.minibatch, args.iters, args.seed)
    shares = even_shares(args.minibatch, args.ubatch or args.minibatch, args.shares)
    # initialise on the CPU generator and move: every system starts from the CPU initialisation
    layers = spec.build("cpu", seed=args.init_seed).to(args.device)
    its = []
    every = max(1, args.iters // 10)
    t0 = [time.perf_counter()]

    def timed(step: int, loss: float) -> None:
        if args.device.startswith("cuda"):
            torch.cuda.synchronize()
        dt = time.perf_counter() - t0[0]
        its.append(IterationRecord(step, dt, args.minibatch / dt, loss))
        if (step + 1) % every == 0 or step + 1 == args.iters:    # progress: a cut-off job still says how far
            print(f"iteration {step + 1}/{args.iters}: loss {loss:.4f}, {dt:.3f} s/iteration", flush=True)
        t0[0] = time.perf_counter()

    train_in_order(spec, batches, shares, seed=args.init_seed, device=args.device,
                   host_optimizer=args.host_optimizer, layers=layers, on_iteration=timed)
    how = "gradient accumulation over microbatches" + (
        f", summed over {args.shares} rank shares in rank order" if args.shares > 1 else "") + (
        ", optimizer stepped on host copies (the runtime's order of arithmetic)" if args.host_optimizer else "")
    summ = make_summary(system="pytorch", model=spec.name, mode=None, gpus=1, minibatch=args.minibatch,
                        status="ok", iterations=its, warmup=1, env=env_record(args.device, args.precision),
                        data=describe_data(spec, args.data), ubatch=args.ubatch or args.minibatch,
                        note=f"plain PyTorch: whole chain on one device, {how}")
    summ.update(shares=args.shares, host_optimizer=args.host_optimizer, deterministic=args.deterministic,
                threads=torch.get_num_threads())
    with JsonlWriter(args.out) as w:       # appears whole or not at all: a job cut off leaves no curve
        for it in its:
            w.write(it.to_json())
        w.write(summ)
    print(f"pytorch reference: {len(its)} iterations, final loss {its[-1].loss:.4f}, data: {summ['data']}")
    return 0


# ------------------------------------------------------------------------------------------------
# joblist: `snakemake -n -p` -> a plain shell script (for the GPU machine, which has no snakemake)
# ------------------------------------------------------------------------------------------------
def joblist(args) -> int:
    """Read `snakemake TARGET --dry-run --printshellcmds --config ...` output (stdin or files) and write
    the shell commands in dependency order as a bash script for a machine without snakemake. The script
    skips jobs whose outputs exist (re-runnable after an interruption or a time limit), stops starting
    new jobs once $JOB_BUDGET_S seconds have passed (the device tool allows 10 minutes per command), and
    leaves out the jobs whose first output matches the regex $JOB_SKIP (e.g. `zero-offload` on a machine
    without DeepSpeed).

    Several listings are taken in the order given (priority: under a time budget the first ones run first);
    a job in more than one is kept where it first appears; jobs writing a `--defer` output go last. Jobs of
    `--parallel-rules` (single-GPU jobs such as `profile`, which use cuda:0) run side by side, one per GPU,
    when $GPU_SLOTS > 1; any other job waits for them first, since it may read what they write."""
    inputs = args.input or ["-"]
    jobs, seen = [], set()
    for src in inputs:
        text = sys.stdin.read() if src == "-" else Path(src).read_text()
        for j in parse_dry_run(text):
            key = tuple(j["outputs"]) or (j["shell"],)
            if key not in seen:
                seen.add(key)
                jobs.append(j)
    if args.defer:         # jobs that would take a whole device call go after everything else
        late = set(args.defer.split(","))
        jobs = [j for j in jobs if not late & set(j["outputs"])] + [j for j in jobs if late & set(j["outputs"])]
    jobs = toposort(jobs)
    if args.skip_rules:
        jobs = [j for j in jobs if j["rule"] not in set(args.skip_rules.split(","))]
    parallel = " ".join(r for r in args.parallel_rules.split(",") if r)
    lines = ["#!/usr/bin/env bash",
             "# Generated by `python -m harmony.workflow joblist` from `snakemake -n -p` (see experiments/device/README.md).",
             "# Run from the repository root. Re-runnable: a job whose outputs all exist (non-empty) is skipped.",
             "# JOB_BUDGET_S=540 bash THIS.sh   -> stops starting new jobs after 540 s (default: no limit).",
             "# JOB_SKIP=zero-offload bash THIS.sh -> leaves out the jobs whose first output matches that regex.",
             f"# GPU_SLOTS=4 bash THIS.sh       -> jobs of the rules '{parallel}' run side by side, one per GPU."
             if parallel else "# (no jobs run side by side: generated without --parallel-rules)",
             "# GPU_PARALLEL_RE=REGEX            -> with GPU_SLOTS, also the jobs whose first output matches it",
             "#                                    (single-GPU runs that move little over the host, e.g. resident at N = 1).",
             "set -u",
             "budget=${JOB_BUDGET_S:-0}; skip_re=${JOB_SKIP:-}; n_fail=0; n_run=0; n_skip=0; n_left=0; n_out=0",
             f"slots=${{GPU_SLOTS:-1}}; parallel_rules=' {parallel} '; par_re=${{GPU_PARALLEL_RE:-}}; slot_pid=(); slot_job=()",
             "side_by_side() {  # side_by_side RULE FIRST-OUTPUT: whether the job may share the machine, one per GPU",
             "  [ \"$slots\" -gt 1 ] || return 1",
             "  [[ \"$parallel_rules\" == *\" $1 \"* ]] || { [ -n \"$par_re\" ] && [[ \"$2\" =~ $par_re ]]; }",
             "}",
             "all_exist() { for f in \"$@\"; do [ -s \"$f\" ] || return 1; done; }",
             "reap() {  # reap SLOT: collect the exit status of the job that ran on that GPU",
             "  [ -n \"${slot_pid[$1]:-}\" ] || return 0",
             "  local rc=0; wait \"${slot_pid[$1]}\" || rc=$?; counted $rc \"${slot_job[$1]}\"",
             "  slot_pid[$1]=''",
             "}",
             f"counted() {{  # counted RC LABEL: a job's exit status into the tally ({DEFERRED_EXIT}: left for the next call by design)",
             "  case $1 in 0) n_run=$((n_run+1)) ;;",
             f"    {DEFERRED_EXIT}) echo \"LEFT (would outlast the call): $2\" >&2; n_left=$((n_left+1)) ;;",
             "    *) echo \"FAILED: $2\" >&2; n_fail=$((n_fail+1)) ;; esac",
             "}",
             "drain() { local s; for ((s=0; s<slots; s++)); do reap $s; done; }",
             "on_free_gpu() {  # on_free_gpu LABEL 'SHELL': start on the first GPU with nothing running",
             "  local s",
             "  while :; do",
             "    for ((s=0; s<slots; s++)); do",
             "      if [ -z \"${slot_pid[$s]:-}\" ] || ! kill -0 \"${slot_pid[$s]}\" 2>/dev/null; then",
             "        reap $s; echo \"[$SECONDS s] $1 (GPU $s)\"",
             "        # the host's cores shared out: each job would default to every core (oversubscribed OpenMP",
             "        # threads; with this and pinned copies two references went from over 535 s to 141-151 s, entry 70)",
             "        OMP_NUM_THREADS=${OMP_NUM_THREADS:-$(( $(nproc) / slots > 0 ? $(nproc) / slots : 1 ))} \\",
             "        CUDA_VISIBLE_DEVICES=$s bash -c \"$2\" & slot_pid[$s]=$!; slot_job[$s]=$1; return",
             "      fi",
             "    done",
             "    sleep 1",
             "  done",
             "}",
             "job() {  # job RULE 'SHELL' OUTPUT...",
             "  local rule=$1 cmd=$2; shift 2",
             "  if all_exist \"$@\"; then n_skip=$((n_skip+1)); return; fi",
             "  if [ -n \"$skip_re\" ] && [[ \"$1\" =~ $skip_re ]]; then n_out=$((n_out+1)); return; fi",
             "  if [ \"$budget\" -gt 0 ] && [ \"$SECONDS\" -ge \"$budget\" ]; then n_left=$((n_left+1)); return; fi",
             "  for f in \"$@\"; do mkdir -p \"$(dirname \"$f\")\"; done",
             "  if side_by_side \"$rule\" \"$1\"; then on_free_gpu \"$rule: $1\" \"$cmd\"; return; fi",
             "  drain",
             "  echo \"[$SECONDS s] $rule: $1\"",
             "  local rc=0; bash -c \"$cmd\" || rc=$?; counted $rc \"$rule ($1)\"",
             "}"]
    for j in jobs:
        files = " ".join(_q(o) for o in j["outputs"] + j["logs"])
        if j["logs"]:
            lines.append(f"mkdir -p {' '.join(_q(os.path.dirname(x)) for x in j['logs'])}")
        lines.append(f"job {j['rule']} {_q(j['shell'])} {' '.join(_q(o) for o in j['outputs'])}" if j["outputs"]
                     else f"job {j['rule']} {_q(j['shell'])} {files}")
    lines.append("drain")
    lines.append('echo "ran $n_run, skipped $n_skip (done before), failed $n_fail, left $n_left (time budget), left out $n_out (JOB_SKIP)"')
    lines.append("[ $n_fail -eq 0 ] && [ $n_left -eq 0 ]")
    Path(args.out).write_text("\n".join(lines) + "\n")
    os.chmod(args.out, 0o755)
    print(f"{len(jobs)} jobs -> {args.out}")
    return 0


def _q(s: str) -> str:
    return "'" + s.replace("'", "'\\''") + "'"


def parse_dry_run(text: str) -> list[dict]:
    """Jobs of a `snakemake -n -p` listing: rule, inputs, outputs, logs, shell command. Jobs without a
    shell command (target rules) are dropped."""
    jobs, cur = [], None
    for raw in text.splitlines():
        m = re.match(r"^(?:local)?rule (\S+):$", raw.strip())
        if m and not raw.startswith(" "):
            cur = {"rule": m[1], "inputs": [], "outputs": [], "logs": [], "shell": ""}
            jobs.append(cur)
            continue
        if cur is None:
            continue
        s = raw.strip()
        for key, field in (("input:", "inputs"), ("output:", "outputs"), ("log:", "logs")):
            if s.startswith(key) and raw.startswith("    "):
                cur[field] = [x.strip() for x in s[len(key):].split(",") if x.strip()]
        if raw.startswith("Shell command:"):
            cur["shell"] = raw[len("Shell command:"):].strip()
    return [j for j in jobs if j["shell"] and j["shell"] != "None"]


def toposort(jobs: list[dict]) -> list[dict]:
    """Order jobs so that every job comes after the jobs producing its inputs (stable otherwise)."""
    producer = {o: i for i, j in enumerate(jobs) for o in j["outputs"]}
    done, order = set(), []

    def visit(i, stack=()):
        if i in done:
            return
        if i in stack:
            raise ValueError("cycle in the job list")
        for f in jobs[i]["inputs"]:
            if f in producer:
                visit(producer[f], stack + (i,))
        done.add(i)
        order.append(jobs[i])
    for i in range(len(jobs)):
        visit(i)
    return order


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m harmony.workflow", description=__doc__.split("\n")[0])
    sub = p.add_subparsers(dest="cmd", required=True)
    g = sub.add_parser("guard", help="run a stage command; on failure leave a record with the status")
    g.add_argument("--out", required=True)
    g.add_argument("--schedule", help="the schedule the command executes (a failed schedule -> same status)")
    for k in ("system", "model", "mode"):
        g.add_argument(f"--{k}")
    g.add_argument("--gpus", type=int, default=1)
    g.add_argument("--minibatch", type=int, default=0)
    g.add_argument("--device", default="cpu")
    g.add_argument("--precision", default="fp32")
    g.add_argument("--gpu-memory", default=None)
    g.add_argument("--strict", dest="record_failures", action="store_false")
    g.add_argument("command", nargs=argparse.REMAINDER)
    r = sub.add_parser("reference", help="plain PyTorch training -> run.jsonl (system 'pytorch')")
    r.add_argument("model", help="model.json")
    r.add_argument("--data", default="synthetic")
    r.add_argument("--minibatch", type=int, required=True)
    r.add_argument("--iters", type=int, required=True)
    r.add_argument("--seed", type=int, default=1234, help="data seed (the runtime's default)")
    r.add_argument("--init-seed", type=int, default=0, help="weight initialisation seed (the runtime's default)")
    r.add_argument("--device", default="cpu")
    r.add_argument("--precision", default="fp32", choices=["fp32", "tf32", "bf16"])
    r.add_argument("--ubatch", type=int, default=0, help="microbatch for gradient accumulation (default: D)")
    r.add_argument("--shares", type=int, default=1, help="rank shares the minibatch is cut into, each "
                   "accumulated on its own and summed in rank order, as vDP over that many GPUs (default 1)")
    r.add_argument("--deterministic", action="store_true", help="on cuda, deterministic kernels only, as "
                   "`harmony run --deterministic` (two runs compute the same bits, at about 2x the time for GPT-2 "
                   "medium on H200s; docs/performance.md entries 71-72)")
    r.add_argument("--host-optimizer", action="store_true", help="step the optimizer on host copies of the "
                   "parameters, as Harmony's runtime does (the fused CPU and CUDA kernels round differently)")
    r.add_argument("--threads", type=int, default=None, help="intra-op CPU threads (default: torch's). On "
                   "the CPU a matmul's rounding depends on how many threads split it, so a curve equals a Harmony "
                   "run's bit for bit only at its workers' --worker-threads")
    r.add_argument("-o", "--out", required=True)
    j = sub.add_parser("joblist", help="snakemake -n -p output -> bash script")
    j.add_argument("input", nargs="*", help="dry-run listings in priority order (default: stdin)")
    j.add_argument("-o", "--out", required=True)
    j.add_argument("--skip-rules", default="", help="comma list of rules to leave out (e.g. figure)")
    j.add_argument("--defer", default="", metavar="OUTPUTS",
                   help="comma list of output files whose jobs go last, whatever listing they came from "
                        "(e.g. a run that takes a whole device call)")
    j.add_argument("--parallel-rules", default="profile",
                   help="comma list of single-GPU rules whose jobs run one per GPU when $GPU_SLOTS > 1 (default: profile)")
    args = p.parse_args(argv)
    if args.cmd == "guard":
        if args.command and args.command[0] == "--":
            args.command = args.command[1:]
        if not args.command:
            p.error("guard needs a command after --")
        return guard(args)
    return {"reference": reference, "joblist": joblist}[args.cmd](args)


if __name__ == "__main__":
    sys.exit(main())
