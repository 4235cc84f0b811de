"""The schedule's host memory (harmony.schedule.host_memory): the search sizes every candidate's host arena
from the task graph and the model record, the way `harmony run` lays it out (harmony.runtime.host_store.
plan_layout), and rejects candidates over the host memory budget (`harmony schedule --host-memory`, default
the host memory the profile recorded). vgg416 at D = 256 on the 128 GiB H100 host: the fastest schedule needed
142 GiB of stashes and weights and the run refused it."""
from __future__ import annotations

import csv
import functools

import pytest

from baselines.common import load_model
from harmony.cli import main
from harmony.jsonio import write_json
from harmony.runtime.host_store import ALIGN, layer_slots, plan_layout
from harmony.schedule.host_memory import arena_budget, arena_bytes, process_reserve_bytes, state_tensors_per_param
from harmony.schedule.io import load_schedule
from harmony.schedule.memory import LayerCosts
from harmony.schedule.search import search
from harmony.schedule.simulate import SimParams
from harmony.schedule.synthetic import synthetic_calibration, synthetic_profile
from harmony.schedule.tasks import ScheduleConfig, ScheduleError, build_task_graph, layer_sizes_from_model
from harmony.workflow import classify_failure

TINY = ["gpt2-tiny", "bert-tiny", "vgg-tiny", "resnet-tiny", "mlp-tiny"]


@functools.lru_cache(maxsize=None)
def tiny(name: str):
    return load_model(name)


def configs(L: int) -> dict[str, ScheduleConfig]:
    """vPP and vDP, N = 1 and 2, u_fwd != u_bwd, uneven vDP shares, finer forward packs (FWD tasks without
    a stash) and swap-dp's microbatch groups (stash regions shared)."""
    bwd = tuple((s, min(s + 2, L)) for s in range(0, L, 2))
    if bwd[-1][1] - bwd[-1][0] < 2 and len(bwd) > 1:            # the loss pack gets two layers
        bwd = bwd[:-2] + ((bwd[-2][0], L),)
    reuse = bwd[:-1]
    single = tuple((i, i + 1) for i in range(bwd[-1][0]))
    return {
        "vPP-N1-u4/2": ScheduleConfig("vPP", 1, 8, 4, 2, bwd, reuse),
        "vPP-N2-u2/2": ScheduleConfig("vPP", 2, 8, 2, 2, bwd, reuse),
        "vPP-N2-u8/1-single-fwd": ScheduleConfig("vPP", 2, 8, 8, 1, bwd, single),
        "vDP-N1-u3/3": ScheduleConfig("vDP", 1, 8, 3, 3, bwd, reuse),
        "vDP-N2-D7-u3/1": ScheduleConfig("vDP", 2, 7, 3, 1, bwd, reuse),
        "vDP-N2-groups": ScheduleConfig("vDP", 2, 8, 2, 2, bwd, reuse, group_size=1),
    }


def weight_padding(layers, spp: int) -> int:
    """What plan_layout adds over the model record's byte totals: each W, dW and K tensor 64-byte aligned."""
    pad = 0
    for layer in layers:
        for _, _, is_param, t in layer_slots(layer):
            copies = 1 + ((1 + spp) if is_param and t.requires_grad else 0)
            pad += (-(t.numel() * t.element_size()) % ALIGN) * copies
    return pad


@pytest.mark.parametrize("name", TINY)
def test_arena_estimate_equals_plan_layout(name):
    """The search's estimate is the runtime's layout: X and flags by the same code (plan_stash, flag_shapes),
    W/dW/K from the model record, which misses only the per-tensor alignment padding."""
    spec, mj = tiny(name)
    spp = spec.optimizer.state_tensors_per_param()
    assert state_tensors_per_param(mj) == spp               # from the record, as the runtime's optimizer
    layers = spec.build("meta")
    pad = weight_padding(layers, spp)
    assert pad < ALIGN * 3 * sum(len(layer_slots(lay)) for lay in layers)
    for label, cfg in configs(mj["num_vlayers"]).items():
        g = build_task_graph(cfg, mj["num_vlayers"])
        est = arena_bytes(g, mj)
        lay = plan_layout(layers, g, mj, spp)
        assert est.total + pad == lay.total_bytes, label
        assert {k: getattr(est, k) for k in ("W", "dW", "K", "X")} == \
            {k: lay.bytes_by_part[k] for k in ("W", "dW", "K", "X")}, label
        if "groups" not in label:
            stashes = [t for t in g.tasks if t.kind == "FWD" and t.stash_out]
            assert stashes and est.X > 0, label               # Harmony: every stash kept until its BWD
    # a longer model's fwd/bwd-pack choices change X only: W, dW, K are per model
    cfgs = list(configs(mj["num_vlayers"]).values())
    xs = {arena_bytes(build_task_graph(c, mj["num_vlayers"]), mj).X for c in cfgs}
    assert len(xs) > 1


@pytest.mark.parametrize("name", ["resnet-tiny", "gpt2-tiny"])
def test_w_block_holds_each_vlayers_weights_back_to_back(name):
    """`--weight-copies per-vlayer` copies a vLayer's W block in one transfer: the block must hold exactly
    that vLayer's W entries, in slot order, each 64-byte aligned, and the block's views must read what the
    entries' own views read (BatchNorm's int64 counter among float32 tensors included)."""
    import torch

    from harmony.runtime.transfer import BlockViews
    from harmony.schedule.host_memory import aligned
    spec, mj = tiny(name)
    spp = spec.optimizer.state_tensors_per_param()
    layers = spec.build("meta")
    g = build_task_graph(configs(mj["num_vlayers"])["vPP-N1-u4/2"], mj["num_vlayers"])
    lay = plan_layout(layers, g, mj, spp)
    buf = torch.randint(0, 256, (lay.total_bytes,), dtype=torch.uint8, generator=torch.Generator().manual_seed(0))
    assert len(lay.w_blocks) == len(lay.weights) == mj["num_vlayers"]
    dtypes = set()
    for slots, (start, n) in zip(lay.weights, lay.w_blocks):
        ws = [w for w, _, _ in slots]
        offsets = [start + sum(aligned(w.nbytes) for w in ws[:i]) for i in range(len(ws))]
        assert [w.offset for w in ws] == offsets and n == sum(aligned(w.nbytes) for w in ws)
        for _, dw, ks in slots:         # dW and K live outside every block
            for e in ([dw] if dw else []) + ks:
                assert not any(s <= e.offset < s + m for s, m in lay.w_blocks)
        views = BlockViews.of(ws, start).over(buf[start:start + n].clone())
        for w, v in zip(ws, views):
            dtypes.add(w.dtype)
            assert v.dtype == getattr(torch, w.dtype) and tuple(v.shape) == tuple(w.shape)
            assert torch.equal(v.reshape(-1).view(torch.uint8), buf[w.offset:w.offset + w.nbytes])   # bits: NaNs
    if name == "resnet-tiny":
        assert dtypes == {"float32", "int64"}


def test_per_pack_copies_cut_a_load_only_where_a_pack_begins_or_ends():
    """`--weight-copies per-pack` brings a task's load in one copy per run of vLayers between the boundaries
    of both packings (a run the next task keeps is a device block of its own), `per-vlayer` in one per
    vLayer. The arena keeps consecutive vLayers' W blocks adjacent, so a run is one host range, and each
    vLayer's views into a copy of it read what its own entries hold. A backward pack's dW entries are one
    range too: the range a vDP task's gradients reach the arena in, in one copy."""
    from types import SimpleNamespace

    import torch

    from harmony.runtime.host_store import HostArena
    from harmony.runtime.worker import Worker
    from harmony.schedule.host_memory import aligned
    spec, mj = tiny("resnet-tiny")
    L = mj["num_vlayers"]
    layers = spec.build("meta")
    cfg = ScheduleConfig(mode="vPP", gpus=1, minibatch=4, ubatch_fwd=2, ubatch_bwd=2,
                         bwd_packs=((0, 1), (1, L - 1), (L - 1, L)), fwd_packs=((0, 1), (1, 3), (3, L - 1)))
    g = build_task_graph(cfg, L)
    lay = plan_layout(layers, g, mj, spec.optimizer.state_tensors_per_param())
    buf = torch.randint(0, 256, (lay.total_bytes,), dtype=torch.uint8, generator=torch.Generator().manual_seed(0))
    arena = HostArena(lay, "", buf)
    tasks = [t for t in g.tasks if t.kind != "UPD"]
    w_bytes = [sum(w.numel() * w.element_size() for w in arena.weights(l)) for l in range(L)]
    got = {}
    for copies in ("per-pack", "per-vlayer"):
        w = SimpleNamespace(arena=arena, layers=layers, cfg=cfg, compute_tasks=tasks, w_bytes=w_bytes,
                            weight_copies=copies)
        got[copies] = segs = Worker._load_segments(w)
        for t in tasks:
            lo, hi = t.load_layers
            runs = [(seg.start, seg.stop) for seg in segs[t.id]]
            assert (runs[0][0], runs[-1][1]) == (lo, hi) and all(a[1] == b[0] for a, b in zip(runs, runs[1:]))
            assert sum(seg.nbytes for seg in segs[t.id]) == sum(w_bytes[lo:hi])
            for seg in segs[t.id]:
                views = [v.over(seg.block.clone(), at) for v, at in seg.views]
                for layer, tensors in zip(range(seg.start, seg.stop), views):
                    for mine, want in zip(tensors, arena.weights(layer), strict=True):
                        assert torch.equal(mine.reshape(-1).view(torch.uint8), want.reshape(-1).view(torch.uint8))
    by_pack = {t.pack: [(seg.start, seg.stop) for seg in got["per-pack"][t.id]] for t in tasks}
    assert by_pack[(1, 3)] == [(1, 3)] and by_pack[(3, L - 1)] == [(3, L - 1)]
    assert by_pack[(1, L - 1)] == [(1, 3), (3, L - 1)]      # the backward pack: cut where a forward pack ends
    assert all(seg.stop - seg.start == 1 for segs in got["per-vlayer"].values() for seg in segs)
    for s0, e0 in cfg.bwd_packs:
        dws = [dw for layer in range(s0, e0) for _, dw, _ in lay.weights[layer] if dw is not None]
        assert all(b.offset == a.offset + aligned(a.nbytes) for a, b in zip(dws, dws[1:]))


@pytest.mark.parametrize("name", TINY)
def test_optimizer_state_lies_after_everything_a_gpu_copies(name):
    """CUDA workers pin only the arena's first `device_bytes` (HostArena.pin): flags, W, dW and the stashes
    must lie inside it, the optimizer state K (host-only) after it."""
    spec, mj = tiny(name)
    spp = spec.optimizer.state_tensors_per_param()
    layers = spec.build("meta")
    for label, cfg in configs(mj["num_vlayers"]).items():
        g = build_task_graph(cfg, mj["num_vlayers"])
        lay = plan_layout(layers, g, mj, spp)
        dev = lay.device_bytes
        assert dev % ALIGN == 0 and dev <= lay.total_bytes, label
        inside = [lay.upd_flags, lay.stash_flags] + [e for es in lay.stash.values() for e in es]
        ks = []
        for slots in lay.weights:
            for w, dw, k in slots:
                inside += [w] + ([dw] if dw else [])
                ks += k
        assert all(e.offset + e.nbytes <= dev for e in inside), label
        assert all(e.offset >= dev for e in ks), label
        assert len(ks) == spp * sum(1 for slots in lay.weights for _, dw, _ in slots if dw), label
        assert sum(e.nbytes for e in ks) == lay.bytes_by_part["K"], label


def test_estimate_counts_the_optimizer_state():
    """K is state_tensors_per_param copies of the trainable weights: AdamW 2, SGD momentum 1, plain SGD 0."""
    _, mj = tiny("mlp-tiny")
    g = build_task_graph(configs(mj["num_vlayers"])["vPP-N1-u4/2"], mj["num_vlayers"])
    dw = sum(v["trainable_param_bytes"] for v in mj["vlayers"])
    for opt, k in (({"kind": "adamw"}, 2), ({"kind": "sgd", "momentum": 0.9}, 1),
                   ({"kind": "sgd", "momentum": 0.0}, 0)):
        est = arena_bytes(g, {**mj, "optimizer": opt})
        assert est.K == k * dw and est.dW == dw


# ------------------------------------------------------------------------------------------------
# the search
# ------------------------------------------------------------------------------------------------
@functools.lru_cache(maxsize=None)
def mlp_setup():
    """mlp-tiny on an ANALYTIC profile, under a cap at which the fastest schedule is not the one with the
    fewest stash bytes (so a host budget changes the choice)."""
    _, mj = tiny("mlp-tiny")
    cal = synthetic_calibration("paper")
    prof = synthetic_profile(mj, cal)
    costs = LayerCosts(prof, sizes=layer_sizes_from_model(mj))
    cap = 2 * max(costs.task_bytes("BWD", i, i + 1, 1, 16) for i in range(costs.L))
    return mj, prof, cal, cap


def run_search(host_memory=None, **kw):
    mj, prof, cal, cap = mlp_setup()
    costs = LayerCosts(prof, sizes=layer_sizes_from_model(mj))
    return search(costs, SimParams.from_calibration(cal), minibatch=16, gpus=1, mode="vPP", cap=cap,
                  model_json=mj, host_memory=host_memory, **kw)


def test_search_records_host_bytes_and_honours_a_budget():
    free = run_search()
    assert all(c.host_bytes == arena_bytes(build_task_graph(c.config, c.config.num_layers), mlp_setup()[0]).total
               for c in free.candidates)
    assert all(c.host_fits for c in free.candidates)
    h0 = free.best.host_bytes
    smaller = sorted({c.host_bytes for c in free.candidates if c.feasible and c.host_bytes < h0})
    assert smaller, "the setup must offer a feasible schedule with a smaller host arena than the fastest"
    budget = smaller[-1]                                   # between the fastest's need and a smaller feasible one
    res = run_search(host_memory=budget)
    assert res.best.host_bytes <= budget < h0
    assert res.best.iter_time_s >= free.best.iter_time_s
    # the first packing pass is the same with and without a budget; the passes under tighter packing budgets
    # (at the fastest feasible plan's microbatch sizes) and the bottom-pack splits and cuts tried last
    # (search.bottom_splits, bottom_cut_points) follow the fastest feasible candidates, which the budget changes
    LATER_TAGS = ("split-bottom", "cut-bottom", "+budget")
    def enumerated(r):
        return [c for c in r.candidates if not any(t in c.bwd_packer for t in LATER_TAGS)]
    want = min((c for c in enumerated(free) if c.feasible and c.host_bytes <= budget), key=lambda c: c.iter_time_s)
    assert res.best.iter_time_s <= want.iter_time_s
    assert res.best.config == want.config or any(t in res.best.bwd_packer for t in LATER_TAGS)
    assert min(enumerated(res), key=lambda c: (not c.feasible, c.iter_time_s)).config == want.config
    assert len(enumerated(res)) == len(enumerated(free))
    over = [c for c in res.candidates if c.host_bytes > budget]
    assert over and all(not c.feasible and not c.host_fits for c in over)
    assert all(c.gpu_feasible == f.feasible for c, f in zip(enumerated(res), enumerated(free)))
    assert res.summary()["chosen"]["host_bytes"] == res.best.host_bytes
    row = res.best.row()
    assert row["host_bytes"] == res.best.host_bytes and row["host_fits"] is True


def test_search_says_when_no_schedule_fits_host_memory():
    free = run_search()
    low = min(c.host_bytes for c in free.candidates if c.feasible)
    with pytest.raises(ScheduleError) as e:
        run_search(host_memory=low - 1000)
    msg = str(e.value)
    assert "host memory" in msg and "1,000 bytes" in msg and f"{low - 1000:,}" in msg
    assert "more host memory" in msg and "smaller D" in msg and "--host-memory" in msg
    assert classify_failure(msg) == "infeasible"           # the workflow's guard records an infeasible point
    with pytest.raises(ScheduleError, match="GPU memory cap"):  # a GPU failure still says GPU
        run_search(host_memory=low - 1000, pack_size=mlp_setup()[0]["num_vlayers"], ubatch_bwd=16, ubatch_fwd=16)
    with pytest.raises(ValueError, match="model record"):
        mj, prof, cal, cap = mlp_setup()
        search(LayerCosts(prof), SimParams.from_calibration(cal), minibatch=16, gpus=1, cap=cap, host_memory=10**9)


# ------------------------------------------------------------------------------------------------
# the CLI
# ------------------------------------------------------------------------------------------------
@pytest.fixture
def mlp_dir(tmp_path):
    mj, prof, cal, cap = mlp_setup()
    write_json(tmp_path / "model.json", mj)
    write_json(tmp_path / "profile.json", prof)
    write_json(tmp_path / "calibration.json", cal)       # ANALYTIC: records no host memory
    return tmp_path


def schedule(d, *extra, profile="profile.json", out="s.json"):
    _, _, _, cap = mlp_setup()
    return main(["schedule", str(d / profile), "-D", "16", "-N", "1", "--gpu-memory", str(int(cap)), "--headroom", "0",
                 "-o", str(d / out), "--candidates", str(d / (out + ".csv")), *extra])


def test_cli_budget_defaults_to_the_profiled_host(mlp_dir, capsys):
    d = mlp_dir
    free = run_search()
    h0 = free.best.host_bytes
    budget = max(c.host_bytes for c in free.candidates if c.feasible and c.host_bytes < h0)
    # a profile without host memory (and an analytic calibration): unchecked, and the schedule says so
    assert schedule(d) == 0
    rec, _ = load_schedule(d / "s.json")
    hm = rec["search"]["host_memory"]
    assert hm["budget_bytes"] is None and hm["source"] == "none recorded"
    assert any("host memory not checked" in w for w in rec["search"]["warnings"])
    assert rec["prediction"]["host_arena_bytes"]["total"] == h0 == hm["chosen_bytes"]
    # the profile records its host: that, less what the runtime holds back beside the arena for the run's
    # processes (the launcher and one worker: 2 GiB each and their page tables for the arena), is the budget
    reserve = process_reserve_bytes(1, budget)
    assert reserve == 2 * 2 * 2**30 + int(2 * budget * 8 / 4096)
    recorded = budget + reserve
    prof = dict(mlp_setup()[1], host_memory_bytes=10 * recorded, host_memory_available_bytes=recorded)
    write_json(d / "host.profile.json", prof)
    assert schedule(d, "--model", str(d / "model.json"), profile="host.profile.json", out="h.json") == 0
    rec, _ = load_schedule(d / "h.json")
    hm = rec["search"]["host_memory"]
    assert hm["source"] == "profile:host_memory_available_bytes"
    assert hm["budget_bytes"] == arena_budget(recorded, 1) and budget - 1 <= hm["budget_bytes"] <= budget  # rounding
    assert hm["budget_bytes"] + hm["reserve_bytes"] <= recorded
    budget = hm["budget_bytes"]
    assert rec["prediction"]["host_arena_bytes"]["total"] == hm["chosen_bytes"] <= budget
    assert rec["search"]["chosen"]["host_bytes"] == hm["chosen_bytes"]
    assert hm["candidates_over_budget"] > 0 and hm["fastest_gpu_feasible"]["host_bytes"] == h0
    assert not any("host memory not checked" in w for w in rec["search"]["warnings"])
    rows = list(csv.DictReader(open(d / "h.json.csv")))
    assert {r["host_fits"] for r in rows} == {"True", "False"}
    assert all(int(r["host_bytes"]) > budget for r in rows if r["host_fits"] == "False")
    err = capsys.readouterr().err
    assert "host arena" in err and "needs a" in err and "over the budget" in err
    # --host-memory none: unchecked, the fastest schedule again
    assert schedule(d, "--model", str(d / "model.json"), "--host-memory", "none", profile="host.profile.json",
                    out="n.json") == 0
    rec, _ = load_schedule(d / "n.json")
    assert rec["search"]["host_memory"]["budget_bytes"] is None
    assert rec["search"]["host_memory"]["source"] == "--host-memory none"
    assert rec["prediction"]["host_arena_bytes"]["total"] == h0
    # an explicit size wins over the profile's
    assert schedule(d, "--model", str(d / "model.json"), "--host-memory", str(10 * h0), profile="host.profile.json",
                    out="x.json") == 0
    hm = load_schedule(d / "x.json")[0]["search"]["host_memory"]
    assert hm["budget_bytes"] == 10 * h0 and hm["source"] == "--host-memory" and hm["chosen_bytes"] == h0
    assert hm["reserve_bytes"] == 0          # --host-memory is the arena's own budget
    assert "over the budget" not in capsys.readouterr().err    # every candidate fits: no host-memory notice
    # a profiled host too small for every candidate: refused, naming host memory
    write_json(d / "small.profile.json", dict(mlp_setup()[1], host_memory_available_bytes=1000))
    capsys.readouterr()
    assert schedule(d, "--model", str(d / "model.json"), profile="small.profile.json", out="f.json") == 2
    assert "no schedule fits host memory" in capsys.readouterr().err


def test_cli_budget_falls_back_to_a_measured_calibration(mlp_dir):
    """Profiles written before they recorded the host: a measured calibration (taken on the same GPU host)
    gives the total; the profile's own record, when present, wins."""
    from harmony.schedule.cli import host_memory_budget
    d = mlp_dir
    cal = dict(mlp_setup()[2])
    del cal["analytic"]
    h0 = run_search().best.host_bytes
    recorded = h0 - 1 + process_reserve_bytes(1, h0)     # the runtime's hold-back beside an arena of h0
    write_json(d / "measured.json", dict(cal, host_memory_bytes=recorded))
    assert schedule(d, "--calibration", str(d / "measured.json")) == 0
    hm = load_schedule(d / "s.json")[0]["search"]["host_memory"]
    assert hm["budget_bytes"] == arena_budget(recorded, 1) < h0 and hm["source"] == "calibration:host_memory_bytes"
    assert hm["chosen_bytes"] < h0
    assert host_memory_budget(None, {"host_memory_bytes": 7}, {"host_memory_bytes": 9}) == \
        (7, "profile:host_memory_bytes")
    assert host_memory_budget(None, {}, {"host_memory_bytes": 9, "analytic": True}) == (None, "none recorded")
    g = 2**30     # two processes at N = 1: 2 GiB each, and 2 x 8 bytes of page table per 4 KiB of arena
    assert host_memory_budget(None, {"host_memory_bytes": 4 * g + 257 * 2**20}, {}, gpus=1) == \
        (256 * 2**20, "profile:host_memory_bytes")
    assert host_memory_budget("2GiB", {}, {}, gpus=1) == (2 * g, "--host-memory")     # the arena's own budget
    assert host_memory_budget("2GiB", {"host_memory_bytes": 7}, {}) == (2 * 2**30, "--host-memory")
    assert host_memory_budget("off", {"host_memory_bytes": 7}, {}) == (None, "--host-memory none")
    with pytest.raises(ValueError, match="--host-memory"):
        host_memory_budget("lots", {}, {})


def test_a_failed_cudahostregister_names_cudas_code_and_the_fix(monkeypatch):
    """HostArena.pin on a host whose CUDA refuses the registration (a fake cudart: this runs without a GPU).
    Error 712, a mapping still registered at that address, names HostArena.unpin (the benchmark's loop
    left one pinned, h100-overhead2); other codes name the memlock limit. torch's binding prints unnamed
    codes as `cudaError.???`, so the number and CUDA's string are what the message carries."""
    import torch

    from harmony.runtime.host_store import HostArena
    spec, mj = tiny("resnet-tiny")
    g = build_task_graph(configs(mj["num_vlayers"])["vPP-N1-u4/2"], mj["num_vlayers"])
    arena = HostArena.create(plan_layout(spec.build("meta"), g, mj, spec.optimizer.state_tensors_per_param()))

    class FakeCudart:
        def __init__(self, code, strings=True):
            self.code = code
            if strings:
                self.cudaGetErrorString = lambda rc: {712: "part or all of the requested memory range is "
                                                           "already mapped", 2: "out of memory"}[rc]

        def cudaHostRegister(self, ptr, size, flags):
            return self.code
    try:
        monkeypatch.setattr(torch.cuda, "cudart", lambda: FakeCudart(712))
        with pytest.raises(RuntimeError, match=r"error 712 \(part or all .* already mapped\).*HostArena\.unpin"):
            arena.pin()
        monkeypatch.setattr(torch.cuda, "cudart", lambda: FakeCudart(2, strings=False))
        with pytest.raises(RuntimeError, match=r"failed: error 2 \(pointer .*ulimit -l"):
            arena.pin()
        assert arena.pinned_bytes == 0
        monkeypatch.setattr(torch.cuda, "cudart", lambda: FakeCudart(0))
        assert arena.pin() == arena.layout.device_bytes == arena.pinned_bytes
    finally:
        arena._registered_ptr = None      # nothing was really registered: no cudaHostUnregister to call
        arena.close()


@pytest.mark.parametrize("advice", ["populate", "fallback"])
def test_prefault_gives_the_pinned_part_its_pages_without_changing_a_byte(monkeypatch, advice):
    """HostArena.prefault (harmony run --arena-prefault): the part the workers pin gets its host pages on
    several threads before they register it. It writes nothing, so weights filled before it stay as they
    were; a kernel without MADV_POPULATE_WRITE (an advice it rejects, faked here) gets posix_fallocate.
    The memory file then holds a page for every byte it covered (st_blocks), where the fill alone gave
    pages to the weights only."""
    import os

    import psutil
    import torch

    import harmony.runtime.host_store as hs
    if advice == "fallback":
        monkeypatch.setattr(hs, "MADV_POPULATE_WRITE", 12345)      # EINVAL: no such advice
    spec, mj = tiny("vgg-tiny")
    layers = spec.build("cpu", seed=0)
    L = mj["num_vlayers"]
    cfg = configs(L)["vPP-N1-u4/2"]
    # D = 2048: the stashes, which nothing has touched yet, are most of the pinned part
    g = build_task_graph(ScheduleConfig("vPP", 1, 2048, 4, 4, cfg.bwd_packs, cfg.fwd_packs), L)
    arena = hs.HostArena.create(plan_layout(spec.build("meta"), g, mj, spec.optimizer.state_tensors_per_param()))
    try:
        arena.fill_weights(layers)
        n = arena.layout.device_bytes

        def allocated() -> int:      # (reading the mapping would allocate its pages too)
            return os.fstat(arena._fd).st_blocks * 512
        assert allocated() < n / 2
        rss0 = psutil.Process().memory_info().rss
        assert arena.prefault(threads=3) == n
        assert allocated() >= n
        # the launcher does not keep them mapped: its RSS, added to the workers' in the records, stays put
        assert psutil.Process().memory_info().rss - rss0 < n / 4
        for i, layer in enumerate(layers):
            for w, (_, _, _, src) in zip(arena.weights(i), layer_slots(layer), strict=True):
                assert torch.equal(w, src.detach())
        assert arena.prefault(0) == 0
    finally:
        arena.close()
