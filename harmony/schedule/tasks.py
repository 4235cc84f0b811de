"""The task graph: the one schedule object that the simulator and the runtime both interpret.

A schedule is a `ScheduleConfig` (mode, N, D, microbatch sizes, layer packs, grouping, placement).
`build_task_graph` turns it into an ordered list of tasks:

  FWD  pack × group of samples: forward (no grad) over the group's microbatches at u_fwd;
  BWD  pack × group: recompute forward + backward over the group's microbatches at u_bwd;
       the last backward pack contains the loss and does its own forward from the last FWD's output;
  UPD  pack: the CPU optimizer step for the pack's layers, on the host, right after its gradients arrive.

Harmony uses one group (all of a rank's samples): a pack's weights cross PCIe once per pass however many
microbatches there are. The swap baselines are the same language with groups of one microbatch
(`group_size=1`): weights cross once per microbatch. Placement is round-robin over GPUs in execution
order (vPP), every-GPU (vDP: each rank runs every compute task on its share of samples, gradients are
all-reduced per pack), or static stages (swap-pp: pack -> GPU fixed, GPipe order).

Edges ("where does a task's input come from"):
  ("data", None)       the minibatch's data tuple, from host memory          -> H2D activation bytes
  ("task", tid)        the output of compute task tid, same samples           -> local if same rank, else P2P
  ("stash", tid)       the output of FWD task tid, parked in host memory      -> D2H at tid, H2D here

The global task order is a valid execution order: every task comes after its producers. Each rank
executes its own tasks in global order; that is deadlock-free because sends never wait for receives.
All sizes come from `LayerSizes`, so `count_bytes` is the byte count that both interpreters must report.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Iterable, Sequence

MODES = ("vPP", "vDP")
PLACEMENTS = ("round-robin", "every-gpu", "stages")
TRANSFER_KINDS = ("h2d_weights", "h2d_act", "d2h_grads", "d2h_act", "p2p", "allreduce")
# when a task posts its receives from another GPU: each just before its microbatch, or all at its start
# (harmony/runtime/p2p.py; the simulator models both, SimParams.p2p_receive)
RECEIVE_MODES = ("lazy", "eager")
# eager since its A/B on two H100s (docs/performance.md entry 48): every vPP plan ran 2.6-15% faster and
# without the allocator retries the lazy runs had; the runtime, its CLI and the simulator all default to this
DEFAULT_RECEIVE_MODE = "eager"
# vDP's all-reduce of a pack's gradients (harmony run --allreduce; docs/runtime.md, "The all-reduce"):
# inline, the compute stream waits for the reduction (and for the other ranks to reach it) before the next
# task's kernels; overlap, only the gradients' copy to the host waits for it, and the next task computes
# meanwhile. Inline is the default of the runtime and of the simulator (SimParams.allreduce): overlapped,
# figure 10's vDP plans on 2x H200 ran 0.98-1.03x inline's time, because compute beside the resident NCCL
# kernel slowed by about what the overlap hid (docs/performance.md entry 77)
ALLREDUCE_MODES = ("inline", "overlap")
DEFAULT_ALLREDUCE = "inline"
# How many compute tasks a worker's host may issue past the last whose kernels and device-to-host copies
# have completed (`harmony run --run-ahead`; None: no bound). A block a pending copy reads stays unusable to
# the caching allocator until the copy runs, so a host far ahead grows the reserve past the plan and the
# allocator retries at the cap (docs/performance.md entry 39: 1 against no bound, one H100: vgg416 D = 256
# -3.7%, 18 -> 3 retries; bert96 D = 256 -1.3%, 5 -> 0; bert96 D = 16 within its run-to-run noise. 0, which
# leaves the GPU idle at every task, +4-26%. Entry 41, three host-bound short-task plans: 1 and 2 as fast as
# no bound or faster, 2 no better than 1). The runtime's default, and on CUDA the simulator's
# (SimParams.run_ahead): a forward pass whose stashes leave slower than it computes waits for them.
DEFAULT_RUN_AHEAD = 1

Range = tuple[int, int]   # half-open vLayer range [start, end)


class ScheduleError(ValueError):
    """A schedule that cannot be executed: the message names the problem and the fix."""


@dataclass(frozen=True)
class ScheduleConfig:
    mode: str                        # "vPP" | "vDP"
    gpus: int                        # N
    minibatch: int                   # D (samples per iteration, all GPUs together)
    ubatch_fwd: int                  # u_fwd: microbatch size of FWD tasks
    ubatch_bwd: int                  # u_bwd: microbatch size of BWD tasks (u_fwd >= u_bwd)
    bwd_packs: tuple[Range, ...]     # partition of [0, L); the last one holds the loss vLayer
    fwd_packs: tuple[Range, ...]     # partition of [0, bwd_packs[-1][0]); split at every bwd-pack start
    group_size: int | None = None    # microbatches per task; None = all (Harmony); 1 = swap baselines
    placement: str = ""              # default: round-robin for vPP, every-gpu for vDP
    pin_shared: bool = True          # keep weights shared by consecutive tasks of a rank on the GPU
    stages: tuple[Range, ...] | None = None   # placement "stages": layer range of each GPU's stage (one per
                                              # GPU, contiguous); None = N runs of about equal layer count

    def __post_init__(self):
        object.__setattr__(self, "bwd_packs", tuple(tuple(p) for p in self.bwd_packs))
        object.__setattr__(self, "fwd_packs", tuple(tuple(p) for p in self.fwd_packs))
        if self.stages is not None:
            object.__setattr__(self, "stages", tuple(tuple(s) for s in self.stages))
        if not self.placement:
            object.__setattr__(self, "placement", "round-robin" if self.mode == "vPP" else "every-gpu")

    @property
    def num_layers(self) -> int:
        return self.bwd_packs[-1][1]

    @property
    def receives_across_gpus(self) -> bool:
        """Tasks take activations or gradients from another GPU (vPP on N > 1): the plan then has a receive
        mode (lazy or eager, docs/performance.md entries 48 and 59)."""
        return self.mode == "vPP" and self.gpus > 1

    def to_json(self) -> dict:
        d = dataclasses.asdict(self)
        d["bwd_packs"] = [list(p) for p in self.bwd_packs]
        d["fwd_packs"] = [list(p) for p in self.fwd_packs]
        if self.stages is None:
            del d["stages"]          # absent unless set: schedules written before the field stay identical
        else:
            d["stages"] = [list(s) for s in self.stages]
        return d

    @staticmethod
    def from_json(d: dict) -> "ScheduleConfig":
        fields = {f.name for f in dataclasses.fields(ScheduleConfig)}
        return ScheduleConfig(**{k: v for k, v in d.items() if k in fields})


@dataclass
class Task:
    id: int
    kind: str                              # FWD | BWD | UPD
    pack: Range                            # vLayers [start, end)
    rank: int                              # GPU (worker) that runs it; for UPD the process that updates
    group: int = 0                         # microbatch group index (0 when one group)
    samples: Range = (0, 0)                # global sample range of the minibatch this task processes
    ubatch: int = 0                        # microbatch size used to chunk `samples`
    act_in: tuple[str, int | None] = ("data", None)   # FWD/BWD: where the activation input comes from
    grad_in: int | None = None             # BWD: task whose output gradient feeds this one (None: loss pack)
    stash_out: bool = False                # FWD: output also parked in host memory for a later BWD
    load_layers: Range = (0, 0)            # FWD/BWD: layers whose weights must be swapped in (rest resident)
    keep_layers: Range = (0, 0)            # FWD/BWD: layers whose weights stay on the GPU for the next task
    allreduce: bool = False                # BWD (vDP): all-reduce the pack's gradients after this task
    grad_to_host: bool = False             # BWD: send (accumulated) dW to host after this task
    grad_accumulate: bool = False          # BWD: host adds dW to what earlier groups sent (swap-dp)
    grad_keep: bool = False                # BWD: dW stays on the GPU for the next BWD of the pack (swap-pp)
    deps: list[int] = field(default_factory=list)   # UPD: BWD tasks whose gradients it needs

    def microbatches(self) -> list[Range]:
        lo, hi = self.samples
        if self.ubatch <= 0:
            return []
        return [(s, min(s + self.ubatch, hi)) for s in range(lo, hi, self.ubatch)]

    @property
    def num_samples(self) -> int:
        return self.samples[1] - self.samples[0]

    def to_json(self) -> dict:
        d = dataclasses.asdict(self)
        d["pack"], d["samples"] = list(self.pack), list(self.samples)
        d["load_layers"], d["keep_layers"] = list(self.load_layers), list(self.keep_layers)
        d["act_in"] = list(self.act_in)
        return d

    @staticmethod
    def from_json(d: dict) -> "Task":
        d = dict(d)
        for k in ("pack", "samples", "load_layers", "keep_layers", "act_in"):
            d[k] = tuple(d[k])
        return Task(**d)


@dataclass
class TaskGraph:
    config: ScheduleConfig
    tasks: list[Task]

    def by_id(self, tid: int) -> Task:
        return self.tasks[tid]

    def rank_tasks(self, rank: int) -> list[Task]:
        """The tasks `rank` executes, in order (UPD included where this rank's process updates)."""
        return [t for t in self.tasks if t.rank == rank]

    def consumers(self, tid: int) -> list[Task]:
        return [t for t in self.tasks if t.act_in == ("task", tid) or t.act_in == ("stash", tid)
                or t.grad_in == tid]

    def to_json(self) -> dict:
        return {"config": self.config.to_json(), "tasks": [t.to_json() for t in self.tasks]}

    @staticmethod
    def from_json(d: dict) -> "TaskGraph":
        return TaskGraph(ScheduleConfig.from_json(d["config"]), [Task.from_json(t) for t in d["tasks"]])


# ------------------------------------------------------------------------------------------------
# Building
# ------------------------------------------------------------------------------------------------
def rank_samples(minibatch: int, gpus: int, mode: str) -> list[Range]:
    """Samples each rank processes: all of them on every path in vPP; contiguous shares in vDP
    (the first D mod N ranks take one extra sample)."""
    if mode == "vPP":
        return [(0, minibatch)] * gpus
    base, extra = divmod(minibatch, gpus)
    out, lo = [], 0
    for r in range(gpus):
        hi = lo + base + (1 if r < extra else 0)
        out.append((lo, hi))
        lo = hi
    return out


def sample_groups(samples: Range, ubatch: int, group_size: int | None) -> list[Range]:
    """Split a rank's samples into groups of `group_size` microbatches of `ubatch` (None: one group)."""
    lo, hi = samples
    if group_size is None:
        return [(lo, hi)]
    step = ubatch * group_size
    return [(s, min(s + step, hi)) for s in range(lo, hi, step)]


def validate_config(cfg: ScheduleConfig, num_layers: int | None = None) -> None:
    """Structural checks; raises ScheduleError naming the problem and the fix."""
    if cfg.mode not in MODES:
        raise ScheduleError(f"mode {cfg.mode!r} is not one of {MODES}")
    if cfg.placement not in PLACEMENTS:
        raise ScheduleError(f"placement {cfg.placement!r} is not one of {PLACEMENTS}")
    if cfg.gpus < 1:
        raise ScheduleError(f"gpus must be >= 1, got {cfg.gpus}")
    if cfg.mode == "vDP" and cfg.minibatch < cfg.gpus:
        raise ScheduleError(f"minibatch D={cfg.minibatch} is smaller than the number of GPUs N={cfg.gpus}: "
                            f"vDP needs at least one sample per GPU; raise D or lower N")
    if cfg.minibatch < 1 or cfg.ubatch_fwd < 1 or cfg.ubatch_bwd < 1:
        raise ScheduleError("minibatch and microbatch sizes must be >= 1")
    if cfg.ubatch_fwd < cfg.ubatch_bwd:
        raise ScheduleError(f"u_fwd={cfg.ubatch_fwd} < u_bwd={cfg.ubatch_bwd}: forward microbatches must be "
                            f"at least as large as backward ones (backward holds more memory per sample)")
    if cfg.group_size is not None and cfg.ubatch_fwd != cfg.ubatch_bwd:
        raise ScheduleError("microbatch groups (group_size) need u_fwd == u_bwd")
    _check_partition("bwd_packs", cfg.bwd_packs, 0, num_layers if num_layers is not None else cfg.num_layers)
    fwd_end = cfg.bwd_packs[-1][0]
    _check_partition("fwd_packs", cfg.fwd_packs, 0, fwd_end, allow_empty=True)
    if cfg.stages is not None:
        if cfg.placement != "stages":
            raise ScheduleError(f"stages are given but placement is {cfg.placement!r}: use placement='stages'")
        if len(cfg.stages) != cfg.gpus:
            raise ScheduleError(f"{len(cfg.stages)} stages for {cfg.gpus} GPUs: give one stage per GPU")
        _check_partition("stages", cfg.stages, 0, cfg.num_layers)
        for s, e in (*cfg.fwd_packs, *cfg.bwd_packs):
            if not any(a <= s and e <= b for a, b in cfg.stages):
                raise ScheduleError(f"pack [{s},{e}) crosses a stage boundary {list(cfg.stages)}: "
                                    f"split packs at every stage start")
    bwd_starts = {s for s, _ in cfg.bwd_packs}
    for s, e in cfg.fwd_packs:
        inner = [b for b in bwd_starts if s < b < e]
        if inner:
            raise ScheduleError(f"forward pack [{s},{e}) crosses the start of backward pack at layer {inner[0]}: "
                                f"split forward packs at every backward-pack start (that input is stashed)")


def _check_partition(name: str, packs: Sequence[Range], start: int, end: int, allow_empty: bool = False) -> None:
    if not packs:
        if allow_empty and start == end:
            return
        raise ScheduleError(f"{name} is empty but must cover layers [{start},{end})")
    pos = start
    for s, e in packs:
        if s != pos or e <= s:
            raise ScheduleError(f"{name} must be contiguous, non-empty ranges covering [{start},{end}); "
                                f"found [{s},{e}) where a pack starting at {pos} was expected")
        pos = e
    if pos != end:
        raise ScheduleError(f"{name} ends at layer {pos} but must cover up to {end}")


def build_task_graph(cfg: ScheduleConfig, num_layers: int | None = None) -> TaskGraph:
    """Compose the ordered task list of one training iteration."""
    validate_config(cfg, num_layers)
    N = cfg.gpus
    tasks: list[Task] = []
    shares = rank_samples(cfg.minibatch, N, cfg.mode)
    # vDP: one chain per rank on its own share; vPP/stages: one chain whose tasks are placed on GPUs.
    chain_ranks: list[int | None] = list(range(N)) if cfg.mode == "vDP" else [None]
    groups = {r: sample_groups(shares[r or 0], cfg.ubatch_fwd, cfg.group_size) for r in chain_ranks}
    n_groups = len(groups[chain_ranks[0]])
    if any(len(g) != n_groups for g in groups.values()):
        raise ScheduleError(f"with group_size={cfg.group_size} the GPUs would run different numbers of "
                            f"microbatch groups (D={cfg.minibatch}, N={N}, u={cfg.ubatch_fwd}): "
                            f"choose u dividing D/N")
    stage_of = _stage_placement(cfg) if cfg.placement == "stages" else None
    next_rr = [0]

    def place(chain_rank: int | None, pack: Range) -> int:
        if chain_rank is not None:
            return chain_rank
        if stage_of is not None:
            return stage_of[pack]
        r = next_rr[0] % N          # round-robin over GPUs in execution order (vPP)
        next_rr[0] += 1
        return r

    # Order. Harmony (one group): all FWD, then BWD from the last pack to the first. Pipelines (stages):
    # FWD of every group, then BWD of every group (GPipe flush), groups in the same order as the forward:
    # every GPU pair then sees its messages in one order both ways (NCCL matches P2P messages by order, see
    # harmony/runtime/p2p.py), also when the loss pack's stage consumes the previous stage's outputs.
    # swap-dp (groups on every GPU): microbatch by microbatch, FWD then BWD, so no stash outlives its
    # microbatch.
    if cfg.group_size is not None and cfg.placement == "every-gpu":
        phases = [(ph, gi) for gi in range(n_groups) for ph in ("F", "B")]
    else:
        phases = [("F", gi) for gi in range(n_groups)] + [("B", gi) for gi in range(n_groups)]

    # GPipe flush over several groups: a group's backward comes after every group's forward, so the loss
    # pack's input would wait on its GPU through all of them (D/u - 1 microbatches of GPT2-XL's hidden
    # state: 1.5 GiB at D = 256, u = 16, the margin by which it ran out of memory under 11 GiB); it is
    # stashed like every other pack's input instead (docs/performance.md entry 85)
    flush = n_groups > 1 and not (cfg.group_size is not None and cfg.placement == "every-gpu")
    fwd_by_end: dict[tuple[int, int | None, int], Task] = {}   # (group, chain, end layer) -> FWD task
    bwd_of_pack: dict[Range, list[Task]] = {p: [] for p in cfg.bwd_packs}
    for phase, gi in phases:
        for cr in chain_ranks:
            samples = groups[cr][gi]
            if phase == "F":
                prev: Task | None = None
                for pack in cfg.fwd_packs:
                    t = Task(id=len(tasks), kind="FWD", pack=pack, rank=place(cr, pack), group=gi,
                             samples=samples, ubatch=cfg.ubatch_fwd,
                             act_in=("data", None) if prev is None else ("task", prev.id))
                    tasks.append(t)
                    fwd_by_end[(gi, cr, pack[1])] = prev = t
                continue
            grad_src: Task | None = None
            for bi in reversed(range(len(cfg.bwd_packs))):
                pack = cfg.bwd_packs[bi]
                rank = place(cr, pack)
                src = fwd_by_end.get((gi, cr, pack[0]))
                if pack[0] == 0:
                    act_in: tuple[str, int | None] = ("data", None)
                elif bi == len(cfg.bwd_packs) - 1 and not (flush and src.rank == rank):
                    act_in = ("task", src.id)               # the loss pack continues from the last FWD
                else:                                       # every other pack starts from a stash
                    src.stash_out = True
                    act_in = ("stash", src.id)
                t = Task(id=len(tasks), kind="BWD", pack=pack, rank=rank, group=gi,
                         samples=samples, ubatch=cfg.ubatch_bwd, act_in=act_in,
                         grad_in=None if grad_src is None else grad_src.id)
                tasks.append(t)
                bwd_of_pack[pack].append(t)
                grad_src = t

    # Updates: vDP spreads them over ranks (pack i on rank i mod N) so the CPU work is shared; otherwise a
    # pack is updated by the rank of its last backward.
    upd_rank = {pack: pi % N if cfg.mode == "vDP" else bwd_of_pack[pack][-1].rank
                for pi, pack in enumerate(cfg.bwd_packs)}
    tasks = _insert_updates(tasks, {p: [t.id for t in b] for p, b in bwd_of_pack.items()}, upd_rank,
                            cfg.mode == "vDP")
    _assign_weight_residency(tasks, cfg)
    _keep_gradients_on_gpu(tasks, cfg)
    _assign_gradient_sends(tasks, cfg, upd_rank)
    graph = TaskGraph(cfg, tasks)
    validate_graph(graph)
    return graph


def _stage_placement(cfg: ScheduleConfig) -> dict[Range, int]:
    """swap-pp: contiguous stages. Pack -> GPU: the stage (cfg.stages, one layer range per GPU) that holds
    the pack; without explicit stages, by the position of its first layer among N equal-layer-count runs."""
    packs = sorted(set(cfg.fwd_packs) | set(cfg.bwd_packs))
    L = cfg.num_layers
    out = {}
    for p in packs:
        if cfg.stages is not None:     # explicit stages (validated: every pack lies inside one)
            out[p] = next(r for r, (a, b) in enumerate(cfg.stages) if a <= p[0] < b)
        else:
            out[p] = min(cfg.gpus - 1, p[0] * cfg.gpus // L)
    return out


def _insert_updates(tasks: list[Task], bwd_ids: dict[Range, list[int]], upd_rank: dict[Range, int],
                    vdp: bool) -> list[Task]:
    """Re-number tasks with one UPD per backward pack right after the pack's last BWD (just-in-time update).
    vDP: right after the pack's last BWD on the updating rank. A worker submits its UPDs in its task order,
    and each rank's chain follows the previous rank's in this list, so an UPD placed after the last rank's
    BWD ran after its own GPU had finished (docs/performance.md entry 22). The other replicas' gradients
    reach the updating rank through the all-reduce in its own BWD."""
    rank_of = {t.id: t.rank for t in tasks}

    def last_bwd(pack: Range, ids: list[int]) -> int:
        return max([i for i in ids if rank_of[i] == upd_rank[pack]] if vdp else ids)
    upd_after = {last_bwd(pack, ids): pack for pack, ids in bwd_ids.items()}
    out: list[Task] = []
    remap: dict[int, int] = {}
    for t in tasks:
        old_id = t.id
        remap[old_id] = t.id = len(out)
        out.append(t)
        pack = upd_after.get(old_id)
        if pack is not None:
            out.append(Task(id=len(out), kind="UPD", pack=pack, rank=upd_rank[pack], deps=list(bwd_ids[pack])))
    for t in out:
        if t.kind == "UPD":
            t.deps = [remap[i] for i in t.deps]
        if t.act_in[0] in ("task", "stash"):
            t.act_in = (t.act_in[0], remap[t.act_in[1]])
        if t.grad_in is not None:
            t.grad_in = remap[t.grad_in]
    return out


def _assign_weight_residency(tasks: list[Task], cfg: ScheduleConfig) -> None:
    """Per rank, consecutive compute tasks that share layers keep them on the GPU (PIN) when enabled:
    the first loads only what is not resident, the previous one keeps the overlap."""
    last_on_rank: dict[int, Task] = {}
    for t in tasks:
        if t.kind == "UPD":
            continue
        prev = last_on_rank.get(t.rank)
        overlap = _intersect(prev.pack, t.pack) if (prev and cfg.pin_shared) else (0, 0)
        # Only overlaps at the start or end of this pack are kept simple: load the rest.
        if overlap[1] > overlap[0] and prev is not None:
            prev.keep_layers = overlap
            if overlap == t.pack:
                t.load_layers = (t.pack[0], t.pack[0])
            elif overlap[0] == t.pack[0]:
                t.load_layers = (overlap[1], t.pack[1])
            elif overlap[1] == t.pack[1]:
                t.load_layers = (t.pack[0], overlap[0])
            else:   # interior overlap: reload the whole pack (rare; keeps the rule simple)
                prev.keep_layers = (0, 0)
                t.load_layers = t.pack
        else:
            t.load_layers = t.pack
        last_on_rank[t.rank] = t


def _keep_gradients_on_gpu(tasks: list[Task], cfg: ScheduleConfig) -> None:
    """A BWD whose next compute task on its rank is a BWD of the same pack, with the pack's weights kept
    resident in between, keeps its dW on the GPU (grad_keep) for that task to accumulate into instead of
    sending it to host memory (`_assign_gradient_sends`): a pipeline stage that fits sends its gradients
    once per iteration, as GPipe does, not once per microbatch. (vDP all-reduces per task and Harmony has one BWD per pack: neither is affected.)"""
    if cfg.mode == "vDP" or cfg.group_size is None:
        return
    nxt: dict[int, Task] = {}
    for t in reversed(tasks):
        if t.kind == "UPD":
            continue
        n = nxt.get(t.rank)
        if t.kind == "BWD" and n is not None and n.kind == "BWD" and n.pack == t.pack and t.keep_layers == t.pack:
            t.grad_keep = True
        nxt[t.rank] = t


def _assign_gradient_sends(tasks: list[Task], cfg: ScheduleConfig, upd_rank: dict[Range, int]) -> None:
    """Every BWD sends its pack's dW to host once (Harmony: once per pass) unless it keeps it on the GPU
    (grad_keep); later sends of a pack add to what earlier ones sent (swap baselines). vDP all-reduces per
    task and only the pack's UPD rank sends."""
    sent: dict[Range, bool] = {}
    for t in tasks:                  # execution order
        if t.kind != "BWD":
            continue
        t.allreduce = cfg.mode == "vDP" and cfg.gpus > 1
        t.grad_to_host = (cfg.mode != "vDP" or t.rank == upd_rank[t.pack]) and not t.grad_keep
        t.grad_accumulate = t.grad_to_host and sent.get(t.pack, False)   # the first send starts the sum
        sent[t.pack] = sent.get(t.pack, False) or t.grad_to_host


def _intersect(a: Range, b: Range) -> Range:
    lo, hi = max(a[0], b[0]), min(a[1], b[1])
    return (lo, hi) if hi > lo else (0, 0)


# ------------------------------------------------------------------------------------------------
# Validation
# ------------------------------------------------------------------------------------------------
def validate_graph(g: TaskGraph) -> None:
    """Every consumer has an earlier producer on matching samples; every layer is in exactly one pack per
    pass; every BWD is followed by the UPD of its pack. Memory is checked by the simulator."""
    cfg = g.config
    seen: set[int] = set()
    for t in g.tasks:
        if t.kind in ("FWD", "BWD"):
            src = t.act_in
            if src[0] in ("task", "stash"):
                if src[1] not in seen:
                    raise ScheduleError(f"task {t.id} ({t.kind} {t.pack}) reads task {src[1]} before it runs")
                p = g.tasks[src[1]]
                if p.kind != "FWD" or p.pack[1] != t.pack[0] or p.samples != t.samples:
                    raise ScheduleError(f"task {t.id} ({t.kind} {t.pack}) has a mismatched producer {p.id}")
                if src[0] == "stash" and not p.stash_out:
                    raise ScheduleError(f"task {t.id} reads a stash that task {p.id} does not write")
            elif t.pack[0] != 0:
                raise ScheduleError(f"task {t.id} ({t.kind} {t.pack}) reads data but does not start at layer 0")
            if t.kind == "BWD" and t.pack[1] != cfg.num_layers:
                if t.grad_in is None or t.grad_in not in seen:
                    raise ScheduleError(f"task {t.id} ({t.pack}) has no earlier producer of its output gradient")
                gp = g.tasks[t.grad_in]
                if gp.kind != "BWD" or gp.pack[0] != t.pack[1] or gp.samples != t.samples:
                    raise ScheduleError(f"task {t.id} ({t.pack}) has a mismatched gradient producer {gp.id}")
        elif t.kind == "UPD":
            # vDP: the other replicas' gradients arrive through the all-reduce of the updating rank's BWDs
            own = [d for d in t.deps if g.tasks[d].rank == t.rank] if cfg.mode == "vDP" else t.deps
            if not own or any(d not in seen for d in own):
                raise ScheduleError(f"UPD {t.id} of {t.pack} runs before its backward tasks")
        seen.add(t.id)
    # each layer is covered once per pass by each chain (group x rank-share)
    for kind, packs in (("FWD", cfg.fwd_packs), ("BWD", cfg.bwd_packs)):
        covered = sorted({t.pack for t in g.tasks if t.kind == kind})
        if covered != sorted(packs):
            raise ScheduleError(f"{kind} tasks cover {covered}, expected packs {sorted(packs)}")
    upd = sorted(t.pack for t in g.tasks if t.kind == "UPD")
    if upd != sorted(cfg.bwd_packs):
        raise ScheduleError("every backward pack must have exactly one UPD task")


# ------------------------------------------------------------------------------------------------
# Bytes: what crosses which link, per task. The simulator and the runtime's counters must agree with it.
# ------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class LayerSizes:
    """Per vLayer: weight+buffer bytes (what a swap-in moves), gradient bytes, and the per-sample bytes of
    its input and output tuples. From model.json / profile.json."""
    weight_bytes: tuple[int, ...]         # W + B per vLayer
    grad_bytes: tuple[int, ...]           # dW per vLayer (trainable parameters only)
    input_bytes_per_sample: tuple[int, ...]
    output_bytes_per_sample: tuple[int, ...]
    # per-sample bytes of the *gradients* of a vLayer's outputs: floating outputs only (labels and integer
    # masks have none). None: same as output_bytes_per_sample (sizes built before this field existed).
    grad_output_bytes_per_sample: tuple[int, ...] | None = None

    def weights(self, r: Range) -> int:
        return sum(self.weight_bytes[r[0]:r[1]])

    def grads(self, r: Range) -> int:
        return sum(self.grad_bytes[r[0]:r[1]])


@dataclass(frozen=True)
class Transfer:
    kind: str          # one of TRANSFER_KINDS
    nbytes: int
    src: int | str     # rank or "host"
    dst: int | str     # rank or "host"
    task: int          # the task during (or before) which the transfer happens


def task_transfers(g: TaskGraph, t: Task, sizes: LayerSizes) -> list[Transfer]:
    """The transfers attributed to task t (incoming edges, weight swap-in, outgoing stash/grads)."""
    out: list[Transfer] = []
    n = t.num_samples
    if t.kind == "UPD":
        return out
    if t.load_layers[1] > t.load_layers[0]:
        out.append(Transfer("h2d_weights", sizes.weights(t.load_layers), "host", t.rank, t.id))
    kind, src = t.act_in
    in_bytes = n * sizes.input_bytes_per_sample[t.pack[0]]
    if kind == "data" or kind == "stash":
        out.append(Transfer("h2d_act", in_bytes, "host", t.rank, t.id))
    elif g.tasks[src].rank != t.rank:
        out.append(Transfer("p2p", in_bytes, g.tasks[src].rank, t.rank, t.id))
    if t.kind == "BWD" and t.grad_in is not None:
        gsrc = g.tasks[t.grad_in]
        if gsrc.rank != t.rank:
            gbytes = sizes.grad_output_bytes_per_sample or sizes.output_bytes_per_sample
            out.append(Transfer("p2p", n * gbytes[t.pack[1] - 1], gsrc.rank, t.rank, t.id))
    if t.kind == "FWD" and t.stash_out:
        out.append(Transfer("d2h_act", n * sizes.output_bytes_per_sample[t.pack[1] - 1], t.rank, "host", t.id))
    if t.kind == "BWD":
        if t.allreduce:
            N = g.config.gpus
            # ring all-reduce: each rank sends 2(N-1)/N of the buffer
            out.append(Transfer("allreduce", 2 * (N - 1) * sizes.grads(t.pack) // N, t.rank, "ring", t.id))
        if t.grad_to_host:
            out.append(Transfer("d2h_grads", sizes.grads(t.pack), t.rank, "host", t.id))
    return out


def count_bytes(g: TaskGraph, sizes: LayerSizes) -> dict[str, int]:
    """Bytes per transfer kind for one iteration (all ranks together): the direct count over the graph."""
    totals = {k: 0 for k in TRANSFER_KINDS}
    for t in g.tasks:
        for tr in task_transfers(g, t, sizes):
            totals[tr.kind] += tr.nbytes
    totals["h2d"] = totals["h2d_weights"] + totals["h2d_act"]
    totals["d2h"] = totals["d2h_grads"] + totals["d2h_act"]
    return totals


def layer_sizes_from_model(model_json: dict) -> LayerSizes:
    """LayerSizes from a model.json record (see harmony.decompose)."""
    vls = model_json["vlayers"]
    return LayerSizes(
        weight_bytes=tuple(v["param_bytes"] + v["buffer_bytes"] for v in vls),
        grad_bytes=tuple(v.get("trainable_param_bytes", v["param_bytes"]) for v in vls),
        input_bytes_per_sample=tuple(sum(_spec_bytes(s) for s in v["inputs"]) for v in vls),
        output_bytes_per_sample=tuple(sum(_spec_bytes(s) for s in v["outputs"]) for v in vls),
        grad_output_bytes_per_sample=tuple(sum(_spec_bytes(s) for s in v["outputs"] if s["dtype"] in _FLOAT_DTYPES)
                                           for v in vls),
    )


_FLOAT_DTYPES = ("float32", "float16", "bfloat16", "float64")


_DTYPE_BYTES = {"float32": 4, "float16": 2, "bfloat16": 2, "float64": 8, "int64": 8, "int32": 4,
                "int16": 2, "int8": 1, "uint8": 1, "bool": 1}


def _spec_bytes(spec: dict) -> int:
    n = 1
    for d in spec["shape"]:
        n *= d
    return n * _DTYPE_BYTES[spec["dtype"]]


def all_layers(packs: Iterable[Range]) -> list[int]:
    return [i for s, e in packs for i in range(s, e)]
