"""profile.json and calibration.json: their schema and a typed reader the scheduler uses.

profile.json (artifact "profile", schema_version 1):
  model, device, gpu (name), precision, gpu_memory_cap (bytes or null), optimizer (config), threads,
  opt_call_overhead_s (the fixed cost of one optimizer step call: paid once per pack, not per vLayer),
  host_memory_bytes, host_memory_available_bytes (the profiled host's; the schedule's host memory budget),
  ubatch_sizes: [u...]  microbatch sizes every vLayer was measured at (ascending),
  vlayers: [{index, kind, signature, profiled_as (index of the vLayer actually measured),
             weight_bytes (W), buffer_bytes (B), grad_bytes (dW), optim_bytes (K),
             input_bytes_per_sample (X), output_bytes_per_sample (Y), flops_fwd_per_sample,
             opt_step_s (CPU optimizer step for this vLayer alone, including the fixed per-call cost),
             fwd_s [per u]: forward, no grad;  fwd_spread [[min, max] per u]
             bwd_s [per u]: recompute forward (with grad) + backward;  bwd_spread
               (on CUDA, profiles with timing "cuda events behind a spin kernel + host issue time": the
               kernels' device time back to back, launch gaps excluded; older "cuda events" profiles
               timed the vLayer bare, launch gaps included)
             fwd_issue_s, bwd_issue_s [per u]: host seconds to issue them (absent in older profiles; the
               fastest trial where the profile's issue_statistic is "min", else the median), with
               fwd_issue_spread, bwd_issue_spread [[min, max] per u];
               a pack costs max(sum of device times, sum of issue times) (schedule/memory.py UCosts)
             bwd_issue_in_pack: {k, u, alone_s, chain_s, factor} or null: the vLayer's backward issue timed
               chained k times beside alone at microbatch u, and its marginal issue inside a pack over its
               issue alone (factor, in [0, 1]); null where it does not chain onto itself, absent in older
               profiles and CPU ones (harmony profile --issue-in-pack measures it there too)
               (harmony.profile.bwd_issue_in_pack; on CUDA, asked to, UCosts charges a pack's backward
               issue as its first vLayer's alone plus the others' marginal)
             param_tensors: the vLayer's parameter tensors (model.json's; absent in older profiles), what
               SimParams.host_param_tensor_s charges
             fwd_peak_bytes [per u]: peak bytes above (W + B + input) during the no-grad forward
                                  (output + temporaries)
             fwd_grad_peak_bytes [per u]: peak bytes above (W + B + input) during the forward with grad
                                  (saved activations, output, temporaries); absent in older profiles
             saved_bytes [per u]: bytes held after the forward with grad (activations saved for backward
                                  + output), i.e. what this vLayer adds to a pack's recompute footprint
                                  (less its output where the next vLayer does not retain it:
                                  Profile.chain_saved); storages shared with the input or the weights
                                  are not counted
             bwd_peak_bytes [per u]: peak bytes above (W + B + dW + input) during recompute forward +
                                  backward of this vLayer alone, dW already allocated (the runtime
                                  accumulates gradients over microbatches); the output gradient is
                                  allocated as backward starts and freed by autograd once consumed (as
                                  inside a pack), so it counts while it is alive; also includes the saved
                                  activations, the input gradient and backward temporaries
             bwd_peak_held_bytes [per u]: the same, but with the output gradient allocated before and
                                  held by the caller throughout (so not counted): how the top vLayer of a
                                  pack runs. Profiles written before it existed lack it (see pack_bwd_memory)
             retains_input: whether the vLayer keeps a floating input alive past its forward (saves it,
                                  or a view of it, for backward, or passes it through as an output);
                                  false for cross-entropy, which keeps its log-softmax, not its logits
             freeable_output_bytes_per_sample: bytes of its floating outputs in storages of their own that
                                  its backward does not keep (counted in saved_bytes; a pack frees them
                                  once a consumer that does not retain its input has run its forward).
                                  Both absent in older profiles: every input counts as retained there
             measured [per u]: true where measured, false where interpolated}]
  Memory is measured by harmony.gpumem.MemoryMeter: on CUDA max_memory_allocated deltas, on the CPU a
  tracker of tensor storages alive (docs/profiling.md). Pack memory follows from these per-vLayer
  numbers by the rule in pack_fwd_memory / pack_bwd_memory below.
Times in seconds, sizes in bytes. A u not in ubatch_sizes is interpolated linearly (extrapolated from
the last two points above the largest), which `Profile` does.

calibration.json (artifact "calibration", schema_version 1): keys ending in _Bps are bytes/s,
  h2d_pinned_Bps, d2h_pinned_Bps, duplex_pinned_Bps (both directions at once, sum),
  h2d_pageable_Bps, d2h_pageable_Bps, host_memcpy_Bps, p2p_Bps (N x N, null on the diagonal),
  h2d_pinned_total_Bps, d2h_pinned_total_Bps, duplex_pinned_total_Bps (every GPU at once, one way each, then
  both ways; only with two or more GPUs),
  matmul_flops {fp32, tf32, bf16}, cpu_adam_params_per_s, cpu_sgd_params_per_s, cpu_threads,
  gpu, gpu_count, host_memory_bytes, device.
"""
from __future__ import annotations

import bisect
import functools
from dataclasses import dataclass

from harmony.jsonio import read_json

PROFILE_ARTIFACT, PROFILE_SCHEMA = "profile", 1
CALIBRATION_ARTIFACT, CALIBRATION_SCHEMA = "calibration", 1


def _interp(us: list[int], ys: list[float], u: float) -> float:
    if u in us:
        return ys[us.index(u)]
    if len(us) == 1:
        return ys[0] * u / us[0]            # proportional from a single point
    i = bisect.bisect_left(us, u)
    if i == 0:
        i = 1
    elif i >= len(us):
        i = len(us) - 1
    x0, x1, y0, y1 = us[i - 1], us[i], ys[i - 1], ys[i]
    return max(0.0, y0 + (y1 - y0) * (u - x0) / (x1 - x0))


COMPUTE_KEYS = ("fwd_s", "bwd_s")       # the GPU compute times Profile.compute_scale multiplies


def sustained_factors(sus: dict | None) -> dict[int, float]:
    """{u: factor} of a profile's `sustained` record, the u's without one (host-bound) left out: each
    stretch of `by_ubatch`, or the one stretch of a profile from before entry 68."""
    if not sus:
        return {}
    stretches = sus.get("by_ubatch") or {str(sus.get("u") or 0): sus}      # one stretch: one factor for every u
    return {int(u): float(s["factor"]) for u, s in stretches.items() if s.get("factor")}


def format_scale(scale: float | dict[int, float]) -> str:
    """`1.05`, or `1.056 at u=4, 1.019 at u=32` for one factor per microbatch size."""
    if not isinstance(scale, dict):
        return f"{scale:g}"
    return ", ".join(f"{scale[u]:g} at u={u}" for u in sorted(scale))


def scale_at(scale: float | dict[int, float], u: float) -> float:
    """A compute scale at microbatch u: the number itself, or for {u: factor} the line between the two
    nearest sizes (the nearest one's factor below the smallest or above the largest)."""
    if not isinstance(scale, dict):
        return scale
    us = sorted(scale)
    if u <= us[0]:
        return scale[us[0]]
    if u >= us[-1]:
        return scale[us[-1]]
    hi = next(k for k in us if k >= u)
    lo = us[us.index(hi) - 1]
    return scale[lo] + (scale[hi] - scale[lo]) * (u - lo) / (hi - lo)


@dataclass
class Profile:
    raw: dict
    # every GPU compute time (fwd_s, bwd_s) times this: a run whose GPU holds a lower clock than the profile's
    # short trials saw (the `large` GPT-2 at its power cap: 1.05, docs/performance.md entry 65); issue
    # (host) times are not scaled. One factor, or one per microbatch size ({u: factor}, `harmony profile
    # --sustain`'s, entry 68: a short trial at a small u sees more of the boost clock than one at a large u),
    # linear between those sizes and the nearest one's outside them. `harmony schedule --compute-scale`,
    # recorded in the schedule's search.
    compute_scale: float | dict[int, float] = 1.0

    @staticmethod
    def load(path, compute_scale: float | dict[int, float] = 1.0) -> "Profile":
        """The profile at path; compute_scale as a schedule planned it (schedule.io.planned_compute_scale)."""
        return Profile(read_json(path, kind=PROFILE_ARTIFACT, schema_version=PROFILE_SCHEMA), compute_scale)

    def scale_at(self, u: float) -> float:
        """The compute scale at microbatch u."""
        return scale_at(self.compute_scale, u)

    @property
    def ubatch_sizes(self) -> list[int]:
        return self.raw["ubatch_sizes"]

    @property
    def num_layers(self) -> int:
        return len(self.raw["vlayers"])

    @property
    def layers(self) -> list[dict]:
        return self.raw["vlayers"]

    def max_ubatch(self) -> int:
        return max(self.ubatch_sizes)

    def series(self, i: int, key: str, u: float) -> float:
        """vLayer i's `key` at microbatch u, interpolated between the profiled sizes; the GPU compute times
        (COMPUTE_KEYS) times compute_scale, so every reader of the profile sees them scaled alike."""
        y = _interp(self.ubatch_sizes, self.raw["vlayers"][i][key], u)
        return y * self.scale_at(u) if key in COMPUTE_KEYS else y

    def fwd_time(self, i: int, u: float) -> float:
        return self.series(i, "fwd_s", u)

    def bwd_time(self, i: int, u: float) -> float:
        """Recompute forward + backward."""
        return self.series(i, "bwd_s", u)

    def fwd_peak(self, i: int, u: float) -> float:
        return self.series(i, "fwd_peak_bytes", u)

    def saved(self, i: int, u: float) -> float:
        return self.series(i, "saved_bytes", u)

    def bwd_peak(self, i: int, u: float) -> float:
        return self.series(i, "bwd_peak_bytes", u)

    def fwd_grad_peak(self, i: int, u: float) -> float:
        """Peak above the input during vLayer i's forward with grad. Profiles without it: bwd_peak, whose
        recompute forward is that same forward, so it bounds it from above."""
        if "fwd_grad_peak_bytes" not in self.raw["vlayers"][i]:
            return self.bwd_peak(i, u)
        return self.series(i, "fwd_grad_peak_bytes", u)

    def retains_input(self, i: int) -> bool:
        """Whether vLayer i keeps its floating input alive past its forward (harmony.profile.retention).
        Profiles without the record say True: the pack rule then counts every vLayer's output as held by
        its consumer, exactly as it did before the profiler recorded it."""
        return bool(self.raw["vlayers"][i].get("retains_input", True))

    def freeable_output_bytes(self, i: int) -> int:
        """Per sample, the bytes of vLayer i's output that only its consumer can keep alive. Records that
        have retains_input but not this (hand-written profiles) take the whole output."""
        v = self.raw["vlayers"][i]
        return v.get("freeable_output_bytes_per_sample", v["output_bytes_per_sample"])

    def dropped(self, i: int, u: float) -> float:
        """Bytes of saved(i, u) a pack frees while the vLayers above i run: vLayer i's output, once vLayer
        i+1's forward has run, when i+1 does not retain its input (the logits under GPT-2's cross-entropy);
        0 for the last vLayer and where i+1 retains it."""
        if i + 1 >= self.num_layers or self.retains_input(i + 1):
            return 0.0
        return min(self.saved(i, u), self.freeable_output_bytes(i) * u)

    def chain_saved(self, i: int, u: float) -> float:
        """What vLayer i holds in a pack while the vLayers above it run: saved(i, u), which the profiler
        measures with i's output kept, less that output where the consumer i+1 does not keep it (dropped)."""
        return self.saved(i, u) - self.dropped(i, u)

    @functools.cached_property
    def has_issue_times(self) -> bool:
        """Whether every vLayer has fwd_issue_s and bwd_issue_s (profiles from before the device and host
        times were split do not; their fwd_s and bwd_s include the launch gaps)."""
        return all("fwd_issue_s" in v and "bwd_issue_s" in v for v in self.raw["vlayers"])

    def bwd_issue_factor(self, i: int) -> float | None:
        """vLayer i's backward issue inside a pack over its issue alone (bwd_issue_in_pack), or None where
        not measured (it does not chain onto itself, or the profile predates the measurement)."""
        rec = self.raw["vlayers"][i].get("bwd_issue_in_pack")
        return None if rec is None else float(rec["factor"])

    @functools.cached_property
    def has_held_peaks(self) -> bool:
        """Whether every vLayer has bwd_peak_held_bytes (profiles from before it was measured do not)."""
        return all("bwd_peak_held_bytes" in v for v in self.raw["vlayers"])

    def bwd_peak_held(self, i: int, u: float) -> float:
        return self.series(i, "bwd_peak_held_bytes", u)

    def weight_bytes(self, i: int) -> int:
        v = self.raw["vlayers"][i]
        return v["weight_bytes"] + v["buffer_bytes"]

    def grad_bytes(self, i: int) -> int:
        return self.raw["vlayers"][i]["grad_bytes"]

    def input_bytes(self, i: int) -> int:
        return self.raw["vlayers"][i]["input_bytes_per_sample"]

    def output_bytes(self, i: int) -> int:
        return self.raw["vlayers"][i]["output_bytes_per_sample"]

    def opt_time(self, i: int) -> float:
        return self.raw["vlayers"][i]["opt_step_s"]

    def layer_sizes(self, model_json: dict | None = None):
        """LayerSizes from the profile. grad_output_bytes_per_sample (the floating outputs only: what a
        backward sends upstream) is taken, in this order, from the profile's vLayer records when they carry
        `grad_output_bytes_per_sample`, from `model_json` (the model.json the profile was made from: its
        output specs have dtypes; it must agree with the profile on the vLayers' output bytes), else it is
        None. The profile schema 1 written by harmony.profile records only output_bytes_per_sample, not the
        outputs' dtypes, so the float part cannot be recovered from it: with None, count_bytes and the
        simulator count a gradient transfer as the output's full size, which over-counts by the integer
        pass-through tensors (labels: 8 bytes per sample, attention masks) per backward P2P / host hop.
        Callers that need exact bytes pass model_json, or use harmony.schedule.tasks.layer_sizes_from_model."""
        from harmony.schedule.tasks import LayerSizes, layer_sizes_from_model
        n = range(self.num_layers)
        grad_out = None
        if all("grad_output_bytes_per_sample" in v for v in self.layers):
            grad_out = tuple(int(v["grad_output_bytes_per_sample"]) for v in self.layers)
        elif model_json is not None:
            m = layer_sizes_from_model(model_json)
            if len(m.output_bytes_per_sample) != self.num_layers or any(
                    m.output_bytes_per_sample[i] != self.output_bytes(i) for i in n):
                raise ValueError(f"model.json ({model_json.get('model')}) does not match the profile "
                                 f"({self.raw.get('model')}): vLayer count or output sizes differ")
            grad_out = m.grad_output_bytes_per_sample
        return LayerSizes(tuple(self.weight_bytes(i) for i in n), tuple(self.grad_bytes(i) for i in n),
                          tuple(self.input_bytes(i) for i in n), tuple(self.output_bytes(i) for i in n),
                          grad_output_bytes_per_sample=grad_out)


@dataclass
class Calibration:
    raw: dict

    @staticmethod
    def load(path) -> "Calibration":
        return Calibration(read_json(path, kind=CALIBRATION_ARTIFACT, schema_version=CALIBRATION_SCHEMA))

    def __getattr__(self, key):
        try:
            return self.raw[key]
        except KeyError:
            raise AttributeError(key) from None

    def p2p(self, src: int, dst: int) -> float:
        m = self.raw.get("p2p_Bps")
        if m and src < len(m) and dst < len(m[src]) and m[src][dst]:
            return m[src][dst]
        # no measured pair (one GPU, or CPU): GPU->GPU goes through the host
        return min(self.raw["d2h_pinned_Bps"], self.raw["h2d_pinned_Bps"]) / 2

    def matmul_rate(self, precision: str) -> float:
        return self.raw["matmul_flops"][precision]


# ------------------------------------------------------------------------------------------------
# Pack memory: the additive rule (docs/profiling.md), used by the scheduler's memory model and checked
# against measured packs by `harmony profile --check-pack`.
# ------------------------------------------------------------------------------------------------
def pack_fwd_memory(profile: Profile, start: int, end: int, u: float) -> float:
    """Peak bytes of a FWD task over vLayers [start, end) at microbatch u, everything on the GPU counted:
    the pack's weights and buffers, plus the largest (input of vLayer l + fwd_peak_l) over l
    (a no-grad forward frees each vLayer's input once the next one has its output)."""
    resident = sum(profile.weight_bytes(i) for i in range(start, end))
    act = max(profile.input_bytes(i) * u + profile.fwd_peak(i, u) for i in range(start, end))
    return resident + act


def pack_bwd_memory(profile: Profile, start: int, end: int, u: float, fresh_grads: bool = False) -> float:
    """Peak bytes of a BWD task over vLayers [start, end) at microbatch u (recompute forward with grad,
    then backward), everything on the GPU counted:

        W + B + dW of the pack + X_start*u + dY_(end-1)*u
        + max over l in [start, end) of ( sum_{k<l} chain_saved_k(u) + peak_l(u) [+ Y_(end-1)*u] )
        peak_l = bwd_peak_l(u), or, if the pack freed vLayer l-1's output (dropped_(l-1) > 0),
                 max(bwd_peak_l(u), dropped_(l-1)(u) + fwd_grad_peak_l(u))

    While vLayer l runs its backward, the activations saved by the vLayers below it are still held and
    l itself peaks at bwd_peak_l (its own saved activations, its output gradient while alive, its input
    gradient and temporaries). saved_k includes k's output, which stays alive only if vLayer k+1 keeps it:
    where k+1 does not retain its input (GPT-2's cross-entropy keeps its log-softmax, not the logits), the
    pack frees it once k+1's forward has run, and chain_saved_k leaves it out (the logits: 3.07 GiB of a
    gpt2-xl [lm_head, loss] pack at u = 16; docs/performance.md entry 35). Until then it is alive beside
    the forward of k+1, hence the second term of peak_l; bwd_peak_l alone covers that forward only with
    its input held outside the measurement.

    The pack's output Y and its gradient dY are held by the caller for the whole backward. dY is in the
    edges. With a profile that measured bwd_peak_held (the top vLayer run with its output gradient held
    by the caller, as in a pack), the top vLayer l = end-1 takes bwd_peak_held (its own Y included, dY
    not), and every vLayer below it adds Y, still alive while they run their backward. Older profiles keep
    the earlier form, bwd_peak for every vLayer, which counts dY twice at the top and Y nowhere below:
    one output's bytes too many at the top, and too few below when a lower vLayer sets the peak (CPU
    pack checks: docs/performance.md entry 11).

    The rule holds the pack's dW throughout, as a pack runs when it accumulates into gradients that exist
    (the profile and the pack check measure it so, and so runs every microbatch after a task's first).
    `fresh_grads`: the pack starts with no dW at all (the runtime's one-microbatch BWD task, whose `p.grad`
    is None until autograd makes it), so while vLayer l runs only the dW of the vLayers from l up are
    held: l's own (made during its backward; conservative, since its peak may come before all of it is)
    and those above, whose backward is done. The vLayers below have none yet (docs/performance.md
    entry 87: on one H200, GPT2-XL's three-block packs at u = n = 16 peaked 0.48 GiB under the full-dW
    rule, 0.34 of it their dW)."""
    resident = sum(profile.weight_bytes(i) + (0 if fresh_grads else profile.grad_bytes(i))
                   for i in range(start, end))
    top, y_top = end - 1, profile.output_bytes(end - 1) * u
    edges = profile.input_bytes(start) * u + y_top
    held = profile.has_held_peaks
    below, act = 0.0, 0.0
    grads = sum(profile.grad_bytes(k) for k in range(start, end)) if fresh_grads else 0.0   # dW[l, end) at l
    for l in range(start, end):
        peak = profile.bwd_peak_held(l, u) if held and l == top else profile.bwd_peak(l, u)
        freed = profile.dropped(l - 1, u) if l > start else 0.0
        if freed > 0:          # the forward of l, with its input not yet freed
            peak = max(peak, freed + profile.fwd_grad_peak(l, u))
        if held and l != top:
            peak += y_top
        act = max(act, grads + below + peak)
        below += profile.chain_saved(l, u)
        if fresh_grads:
            grads -= profile.grad_bytes(l)
    return resident + edges + act
