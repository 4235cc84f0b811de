"""`harmony calibrate`: this machine's transfer bandwidths and compute rates -> calibration.json.

Schema: harmony/profile_data.py (artifact "calibration"). Method (docs/profiling.md):
  - CUDA transfers: pinned host buffers allocated and touched before timing, 1 GiB per copy (pageable:
    256 MiB), issued on a dedicated stream and timed with CUDA events; both directions at once on two
    streams, timed from before the first issue to after both end (sum of the two directions' bytes).
    GPU<->GPU: every ordered pair, 256 MiB, with torch.cuda.can_device_access_peer recorded.
    Every GPU of the host at once (two or more GPUs): 512 MiB pinned per GPU, one stream each, host-timed
    from the first issue to the last completion -> h2d/d2h_pinned_total_Bps; the simulator shares one host
    link among the GPUs when the H2D total is under 1.5x one GPU's. Then both directions on every GPU at
    once (a second stream and buffer pair each) -> duplex_pinned_total_Bps (the simulator's cap on each
    GPU's duplex when N GPUs copy both ways: SimParams.duplex_for).
  - CPU only: there is no PCIe link, so every "H2D/D2H" figure is a host memcpy (torch copy_ between two
    host buffers) and both-at-once is two such copies in two threads; p2p_Bps is null.
  - matmul: n x n x n products (n = 8192 on CUDA, 1024 on CPU) at fp32 (strict), tf32 and bf16.
  - CPU optimizer: the runtime's optimizer (harmony.optim.make_optimizer, fused) on 64 M parameters
    (4 M on a CPU-only machine) with torch.get_num_threads() threads; parameters updated per second.
    AdamW again with one run worker's share of the cores (cores // GPUs) where that is fewer threads:
    `cpu_adam_worker_share`, recorded only (docs/performance.md entry 57).
Every figure is the median of `trials` timed runs after warm-up; (min, max) spreads are kept.
"""
from __future__ import annotations

import statistics
import sys
import threading
import time

import torch

from harmony import gpumem
from harmony.jsonio import write_json
from harmony.profile_data import CALIBRATION_ARTIFACT, CALIBRATION_SCHEMA
from harmony.units import format_bytes

MiB = 2**20


def _median(ts: list[float]) -> tuple[float, list[float]]:
    return statistics.median(ts), [min(ts), max(ts)]


def host_timed(fn, trials: int, warmup: int, sync=None) -> list[float]:
    """Seconds of each of `trials` calls of fn after `warmup` untimed ones, on the host clock; `sync` (e.g.
    torch.cuda.synchronize) runs before the first and after each timed call, so device work is inside."""
    for _ in range(warmup):
        fn()
    if sync:
        sync()
    out = []
    for _ in range(trials):
        t0 = time.perf_counter()
        fn()
        if sync:
            sync()
        out.append(time.perf_counter() - t0)
    return out


def _event_timed(fn, stream, trials: int, warmup: int) -> list[float]:
    with torch.cuda.stream(stream):
        for _ in range(warmup):
            fn()
        stream.synchronize()
        out = []
        for _ in range(trials):
            a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            a.record(stream)
            fn()
            b.record(stream)
            b.synchronize()
            out.append(a.elapsed_time(b) / 1e3)
    return out


class Calibrator:
    def __init__(self, device: str, trials: int = 5, warmup: int = 2, quick: bool = False):
        self.dev = torch.device(device)
        self.cuda = self.dev.type == "cuda"
        self.trials, self.warmup = trials, warmup
        self.quick = quick
        self.spread: dict[str, list[float]] = {}
        self.sizes: dict[str, int] = {}

    def _rate(self, key: str, nbytes: float, ts: list[float]) -> float:
        med, (lo, hi) = _median(ts)
        self.spread[key] = [nbytes / hi, nbytes / lo]
        return nbytes / med

    # -- transfers ------------------------------------------------------------------------------
    def host_memcpy(self) -> float:
        n = (32 if self.quick else 128 if not self.cuda else 512) * MiB
        src = torch.ones(n, dtype=torch.uint8)
        dst = torch.zeros(n, dtype=torch.uint8)
        self.sizes["host_memcpy"] = n
        return self._rate("host_memcpy_Bps", n, host_timed(lambda: dst.copy_(src), self.trials, self.warmup))

    def host_duplex(self) -> float:
        """CPU stand-in for both directions at once: two host copies in two threads."""
        n = (32 if self.quick else 128) * MiB
        bufs = [(torch.ones(n, dtype=torch.uint8), torch.zeros(n, dtype=torch.uint8)) for _ in range(2)]

        def both():
            th = [threading.Thread(target=lambda s=s, d=d: d.copy_(s)) for s, d in bufs]
            for t in th:
                t.start()
            for t in th:
                t.join()
        return self._rate("duplex_pinned_Bps", 2 * n, host_timed(both, self.trials, self.warmup))

    def cuda_transfers(self) -> dict:
        dev = self.dev
        n = (256 if self.quick else 1024) * MiB
        npg = 256 * MiB
        self.sizes.update(pinned=n, pageable=npg)
        h_src = torch.empty(n, dtype=torch.uint8, pin_memory=True).fill_(1)     # touch before timing
        h_dst = torch.empty(n, dtype=torch.uint8, pin_memory=True).fill_(0)
        d_a = torch.ones(n, dtype=torch.uint8, device=dev)
        d_b = torch.zeros(n, dtype=torch.uint8, device=dev)
        s1, s2 = torch.cuda.Stream(dev), torch.cuda.Stream(dev)
        torch.cuda.synchronize(dev)
        out = {}
        out["h2d_pinned_Bps"] = self._rate("h2d_pinned_Bps", n, _event_timed(
            lambda: d_a.copy_(h_src, non_blocking=True), s1, self.trials, self.warmup))
        out["d2h_pinned_Bps"] = self._rate("d2h_pinned_Bps", n, _event_timed(
            lambda: h_dst.copy_(d_b, non_blocking=True), s1, self.trials, self.warmup))

        def duplex():
            with torch.cuda.stream(s1):
                d_a.copy_(h_src, non_blocking=True)
            with torch.cuda.stream(s2):
                h_dst.copy_(d_b, non_blocking=True)

        def sync():
            s1.synchronize()
            s2.synchronize()
        out["duplex_pinned_Bps"] = self._rate("duplex_pinned_Bps", 2 * n,
                                              host_timed(duplex, self.trials, self.warmup, sync))
        h_src = h_dst = None          # free the pinned buffers before the pageable ones (the lambdas above are done)
        p_src = torch.ones(npg, dtype=torch.uint8)
        p_dst = torch.zeros(npg, dtype=torch.uint8)
        d_p = d_a[:npg]
        csync = lambda: torch.cuda.synchronize(dev)  # noqa: E731
        out["h2d_pageable_Bps"] = self._rate("h2d_pageable_Bps", npg, host_timed(
            lambda: d_p.copy_(p_src), self.trials, self.warmup, csync))
        out["d2h_pageable_Bps"] = self._rate("d2h_pageable_Bps", npg, host_timed(
            lambda: p_dst.copy_(d_p), self.trials, self.warmup, csync))
        d_a = d_b = d_p = None
        torch.cuda.empty_cache()
        return out

    def all_gpu_transfers(self) -> dict:
        """Pinned copies on every GPU of the host at once, one stream and one host buffer per GPU, timed
        from the first issue to the last GPU's completion: the host link as N workers see it when they swap
        at the same moment (vDP runs every pack on every GPU together). `h2d_pinned_total_Bps` below 1.5x
        one GPU's makes the simulator treat the link as shared (SimParams.from_calibration). Empty with
        fewer than two GPUs."""
        ng = torch.cuda.device_count() if self.cuda else 0
        if ng < 2:
            return {}
        n = (64 if self.quick else 512) * MiB
        self.sizes["all_gpu_pinned"] = n
        devs = [torch.device("cuda", i) for i in range(ng)]
        hosts = [torch.empty(n, dtype=torch.uint8, pin_memory=True).fill_(1) for _ in devs]
        gpus = [torch.empty(n, dtype=torch.uint8, device=d) for d in devs]
        streams = [torch.cuda.Stream(d) for d in devs]
        # the other direction's buffers and streams, for both at once on every GPU
        hosts_out = [torch.empty(n, dtype=torch.uint8, pin_memory=True) for _ in devs]
        gpus_out = [torch.ones(n, dtype=torch.uint8, device=d) for d in devs]
        streams_out = [torch.cuda.Stream(d) for d in devs]

        def issue(h2d: bool, d2h: bool):
            for h, g, s, ho, go, so in zip(hosts, gpus, streams, hosts_out, gpus_out, streams_out):
                if h2d:
                    with torch.cuda.stream(s):
                        g.copy_(h, non_blocking=True)
                if d2h:
                    with torch.cuda.stream(so):
                        ho.copy_(go, non_blocking=True)

        def sync():
            for s in streams + streams_out:
                s.synchronize()
        for d in devs:
            torch.cuda.synchronize(d)
        out = {"h2d_pinned_total_Bps": self._rate("h2d_pinned_total_Bps", ng * n, host_timed(
                   lambda: issue(True, False), self.trials, self.warmup, sync)),
               "d2h_pinned_total_Bps": self._rate("d2h_pinned_total_Bps", ng * n, host_timed(
                   lambda: issue(False, True), self.trials, self.warmup, sync)),
               # every GPU both ways at once, as swap-pp and swap-dp at small u copy (docs/performance.md
               # entry 91: 40-44 GB/s a direction there against one GPU's duplex of 50.8; entry 92: the
               # total is 146-154 GB/s on 2x H200, against two GPUs' 2 x 101), SimParams.duplex_for
               "duplex_pinned_total_Bps": self._rate("duplex_pinned_total_Bps", 2 * ng * n, host_timed(
                   lambda: issue(True, True), self.trials, self.warmup, sync))}
        hosts = gpus = hosts_out = gpus_out = None          # free them now (issue() is done with them)
        for d in devs:
            with torch.cuda.device(d):
                torch.cuda.empty_cache()
        return out

    def p2p(self) -> tuple[list | None, list | None]:
        ng = torch.cuda.device_count() if self.cuda else 0
        if ng < 2:
            return None, None
        n = (64 if self.quick else 256) * MiB
        self.sizes["p2p"] = n
        bw = [[None] * ng for _ in range(ng)]
        access = [[None] * ng for _ in range(ng)]
        bufs = [torch.ones(n, dtype=torch.uint8, device=f"cuda:{i}") for i in range(ng)]
        for i in range(ng):
            for j in range(ng):
                if i == j:
                    continue
                access[i][j] = torch.cuda.can_device_access_peer(i, j)
                dst = torch.empty(n, dtype=torch.uint8, device=f"cuda:{j}")

                def sync(i=i, j=j):
                    torch.cuda.synchronize(i)
                    torch.cuda.synchronize(j)
                bw[i][j] = self._rate(f"p2p_{i}_{j}", n, host_timed(
                    lambda i=i, dst=dst: dst.copy_(bufs[i], non_blocking=True), self.trials, self.warmup, sync))
                del dst
        return bw, access

    # -- compute ---------------------------------------------------------------------------------
    def matmul(self) -> dict:
        n = (4096 if self.quick else 8192) if self.cuda else (512 if self.quick else 1024)
        self.sizes["matmul_n"] = n
        flops = 2.0 * n ** 3
        out = {}
        saved = torch.backends.cuda.matmul.allow_tf32, torch.get_float32_matmul_precision()
        try:
            for prec in ("fp32", "tf32", "bf16"):
                gpumem.set_precision("tf32" if prec == "tf32" else "fp32")
                dt = torch.bfloat16 if prec == "bf16" else torch.float32
                a = torch.randn(n, n, device=self.dev).to(dt)
                b = torch.randn(n, n, device=self.dev).to(dt)
                c = torch.empty(n, n, device=self.dev, dtype=dt)
                fn = lambda: torch.matmul(a, b, out=c)  # noqa: E731
                if self.cuda:
                    ts = _event_timed(fn, torch.cuda.current_stream(self.dev), self.trials, self.warmup + 1)
                else:
                    ts = host_timed(fn, max(3, self.trials // 2 + 1), 1)
                out[prec] = self._rate(f"matmul_{prec}", flops, ts)
                a = b = c = None
        finally:
            torch.backends.cuda.matmul.allow_tf32 = saved[0]
            torch.set_float32_matmul_precision(saved[1])
        return out

    def cpu_optimizer(self, kind: str, threads: int | None = None, name: str | None = None) -> float:
        """Parameters per second of one fused optimizer step with `threads` CPU threads (default: torch's);
        its spread is kept under `name` (default cpu_<kind>_params_per_s)."""
        from harmony.optim import OptimizerConfig, make_optimizer
        total = (1 if self.quick else 64 if self.cuda else 4) * 2**20
        self.sizes["optimizer_params"] = total
        chunk = 4 * 2**20 if total >= 4 * 2**20 else total
        params = [torch.zeros(chunk).requires_grad_() for _ in range(total // chunk)]
        for p in params:
            p.grad = torch.full_like(p, 1e-3)
        opt = make_optimizer(params, OptimizerConfig(kind=kind, lr=1e-4))
        before = torch.get_num_threads()
        torch.set_num_threads(threads or before)
        try:
            ts = host_timed(opt.step, self.trials, self.warmup)
        finally:
            torch.set_num_threads(before)
        med, (lo, hi) = _median(ts)
        self.spread[name or f"cpu_{kind}_params_per_s"] = [total / hi, total / lo]
        return total / med

    def host_issue(self) -> float:
        """Host seconds per module call of a tiny layer (Linear 16x16 + ReLU, 4 rows) on the device, forward
        without autograd: kernels far shorter than their launches, so the time is the host's (Python,
        PyTorch's dispatch, the CUDA launch). Not used by the simulator (it charges each vLayer's profiled
        issue time); recorded so each call's host speed is on record next to its runs: lent hosts of one
        GPU kind issue one host-bound plan up to 25% apart (docs/performance.md entry 41)."""
        layers = torch.nn.Sequential(*[m for _ in range(8) for m in (torch.nn.Linear(16, 16), torch.nn.ReLU())])
        layers = layers.to(self.dev)
        x = torch.randn(4, 16, device=self.dev)
        calls = 20 if self.quick else 200              # forward passes per trial, 16 module calls each

        def issue():
            with torch.no_grad():
                for _ in range(calls):
                    layers(x)
        ts = host_timed(issue, self.trials, self.warmup, torch.cuda.synchronize if self.cuda else None)
        n = calls * len(layers)
        self.sizes["host_issue_calls"] = n
        med, (lo, hi) = _median(ts)
        self.spread["host_issue_s_per_call"] = [lo / n, hi / n]
        return med / n


def calibrate(device: str = "cpu", precision: str = "tf32", trials: int = 5, quick: bool = False,
              progress: bool = True) -> dict:
    import psutil

    from harmony.runtime import default_worker_threads
    t0 = time.perf_counter()
    dev = torch.device(device)
    if dev.type == "cuda":
        if not torch.cuda.is_available():
            raise ValueError(f"--device {device}: CUDA is not available on this machine")
        if dev.index is None:
            dev = torch.device("cuda", torch.cuda.current_device())
        torch.cuda.set_device(dev)
    cal = Calibrator(str(dev), trials=trials, quick=quick)
    steps = ["transfers", "host memcpy", "gpu<->gpu", "matmul", "cpu adam", "cpu sgd", "host issue"]
    from harmony.progress import Progress
    rec: dict = {}
    with Progress(len(steps), desc="calibrate", enabled=progress) as bar:
        bar.set_note("host memcpy")
        rec["host_memcpy_Bps"] = cal.host_memcpy()
        bar.update(note="transfers")
        if cal.cuda:
            rec.update(cal.cuda_transfers())
            rec.update(cal.all_gpu_transfers())
        else:
            m = rec["host_memcpy_Bps"]
            rec.update(h2d_pinned_Bps=m, d2h_pinned_Bps=m, h2d_pageable_Bps=m, d2h_pageable_Bps=m,
                       duplex_pinned_Bps=cal.host_duplex())
            for k in ("h2d_pinned_Bps", "d2h_pinned_Bps", "h2d_pageable_Bps", "d2h_pageable_Bps"):
                cal.spread[k] = cal.spread["host_memcpy_Bps"]
        bar.update(note="gpu<->gpu")
        rec["p2p_Bps"], rec["p2p_peer_access"] = cal.p2p()
        bar.update(note="matmul")
        rec["matmul_flops"] = cal.matmul()
        bar.update(note="cpu adam")
        rec["cpu_adam_params_per_s"] = cal.cpu_optimizer("adamw")
        # a run worker's threads at N = every GPU of the host
        share = default_worker_threads(torch.cuda.device_count() if cal.cuda else 1)
        if share != torch.get_num_threads():
            # Recorded beside the all-core rate, not used by the simulator yet: on the 64-core 4x H100 VM
            # the all-core step measured 0.5-0.7 G params/s in three calls of four (6.3 in the fourth)
            # while the runs' workers, cores // N threads each, stepped 1.4-4.3 (docs/performance.md entry 57)
            rate = cal.cpu_optimizer("adamw", threads=share, name="cpu_adamw_worker_share_params_per_s")
            rec["cpu_adam_worker_share"] = {"threads": share, "params_per_s": rate}
        bar.update(note="cpu sgd")
        rec["cpu_sgd_params_per_s"] = cal.cpu_optimizer("sgd")
        bar.update(note="host issue")
        rec["host_issue_s_per_call"] = cal.host_issue()
        bar.update()
    gpu = torch.cuda.get_device_name(dev) if cal.cuda else None
    return {
        "artifact": CALIBRATION_ARTIFACT, "schema_version": CALIBRATION_SCHEMA,
        "device": str(dev), "gpu": gpu, "gpu_count": torch.cuda.device_count() if cal.cuda else 0,
        "precision": precision, "matmul_flops_configured": rec["matmul_flops"][precision],
        **rec,
        "cpu_threads": torch.get_num_threads(), "host_memory_bytes": psutil.virtual_memory().total,
        "torch": torch.__version__, "trials": trials, "sizes": cal.sizes, "spread": cal.spread,
        "method": ("cuda: pinned/pageable copies on a dedicated stream, CUDA events; duplex on two streams; "
                   "*_total: every GPU at once, host-timed"
                   if cal.cuda else "cpu: every h2d/d2h figure is a host memcpy; duplex = two memcpy threads"),
        "wall_s": time.perf_counter() - t0,
    }


def add_arguments(p) -> None:
    p.add_argument("-o", "--output", required=True, help="calibration.json to write")
    p.add_argument("--device", default="cpu", help="cpu, cuda or cuda:N (default cpu)")
    p.add_argument("--precision", default="tf32", choices=gpumem.PRECISIONS,
                   help="the precision runs will use (all three matmul rates are measured)")
    p.add_argument("--trials", type=int, default=5, help="timed runs per figure (median kept)")
    p.add_argument("--quick", action="store_true", help="smaller buffers (tests); not for real calibration")
    p.add_argument("--quiet", action="store_true")


def main(args) -> int:
    if args.trials < 1:
        raise ValueError("--trials must be >= 1")
    rec = calibrate(args.device, args.precision, args.trials, quick=args.quick, progress=not args.quiet)
    write_json(args.output, rec)
    print_summary(rec, file=sys.stderr)
    print(f"wrote {args.output} in {rec['wall_s']:.1f} s", file=sys.stderr)
    return 0


def print_summary(rec: dict, file=sys.stdout) -> None:
    gb = lambda v: f"{v / 1e9:7.2f} GB/s" if v else "     n/a"  # noqa: E731
    print(f"\ncalibration of {rec['gpu'] or 'cpu'} ({rec['device']}), {rec['cpu_threads']} CPU threads, "
          f"host {format_bytes(rec['host_memory_bytes'])}", file=file)
    for k in ("h2d_pinned_Bps", "d2h_pinned_Bps", "duplex_pinned_Bps", "h2d_pageable_Bps", "d2h_pageable_Bps",
              "host_memcpy_Bps", "h2d_pinned_total_Bps", "d2h_pinned_total_Bps", "duplex_pinned_total_Bps"):
        if k in rec:
            print(f"  {k:<20} {gb(rec[k])}", file=file)
    if rec.get("p2p_Bps"):
        for i, row in enumerate(rec["p2p_Bps"]):
            print(f"  p2p from {i}: " + " ".join(gb(v) if v else "    --      " for v in row), file=file)
    print("  matmul " + ", ".join(f"{k} {v / 1e12:.2f} TFLOP/s" for k, v in rec["matmul_flops"].items()), file=file)
    print(f"  CPU adamw {rec['cpu_adam_params_per_s'] / 1e9:.2f} G params/s, "
          f"sgd {rec['cpu_sgd_params_per_s'] / 1e9:.2f} G params/s", file=file)
    if rec.get("cpu_adam_worker_share"):
        w = rec["cpu_adam_worker_share"]
        print(f"  CPU adamw with a worker's {w['threads']} threads {w['params_per_s'] / 1e9:.2f} G params/s", file=file)
    if rec.get("host_issue_s_per_call"):
        print(f"  host issue {rec['host_issue_s_per_call'] * 1e6:.1f} us per tiny-layer module call", file=file)
