"""Per-layer costs at a microbatch size, and the pack / task memory rule.

`LayerCosts` turns a `Profile` into flat per-layer lists (weights, gradients, activation sizes) and, per
microbatch size u, the profiled times and memories with prefix sums, cached: packing, the simulator and
the search all read pack costs from here, so a search computes each (layer, u) number once.

The pack memory rule (GPU bytes, one task, at microbatch size u over n samples of its group)
---------------------------------------------------------------------------------------------
One microbatch's working set is the profiler's additive rule, harmony.profile_data.pack_fwd_memory /
pack_bwd_memory (checked against measured packs by `harmony profile --check-pack`):
  FWD  W[s,e) + max_l ( X_in[l]*u + fwd_peak_l(u) )
  BWD  W[s,e) + dW[s,e) + X_in[s]*u + dY[e-1]*u + max_l ( sum_{s<=k<l} chain_saved_k(u) + bwd_peak_l(u) )
       where the profile has them: bwd_peak_held for the top vLayer e-1, and + Y[e-1]*u below it;
       chain_saved_k = saved_k less k's output where vLayer k+1 does not retain its input (the pack frees
       it: GPT-2's logits under cross-entropy), and then bwd_peak_l at least that output + fwd_grad_peak_l
       (l's forward runs with it alive); Profile.chain_saved / dropped
On top, the whole-group tensors a Harmony task keeps on the GPU (group_buffers):
  FWD  n*X_in[s] (the group's input) + n*X_out[e-1] (its output, held for the next task / the stash copy)
  BWD  input: a stash (0<s, e<L) is loaded one microbatch ahead (runtime.transfer.StashInput), so only
       the next microbatch's min(u, n-u)*X_in[s] is on top of the current one's; the data (s=0) or the
       last FWD's output (e=L) is the group's n*X_in[s];
       + [e<L] n*X_out[e-1] (incoming output grads) + [s>0] n*X_in[s] (outgoing input grads)
(one microbatch's slice of a group buffer is counted in both: conservative by at most u/n of it).
A BWD that runs its group as one microbatch (n <= u) and starts with no dW (`one_pass`: no kept dW, no
all-reduce) holds its group's tensors as the microbatch's own and makes its dW vLayer by vLayer:
  BWD  W[s,e) + X_in[s]*u + Y[e-1]*u + max_l ( dW[l,e) + sum_{s<=k<l} chain_saved_k(u) + peak_l(u) )
       + [e<L] n*X_out[e-1]
(pack_bwd_memory's fresh_grads; docs/performance.md entry 87: the general form over-counted such tasks by
up to 0.65 GiB on one H200, task by task under the worker's memory probe; this one is within
-0.15..+0.07 GiB).
Before entry 37 of docs/performance.md the stash was loaded whole: n*X_in[s], 47% of gpt2-xl's D = 256
plan with the group's other buffers.
Double buffering is dynamic (simulate.py): the next task's weights (and a BWD's first stash microbatch)
are prefetched during the current task only if current peak + those bytes fit under the cap; otherwise
the prefetch waits for the current task to finish. A candidate is feasible when every task's own peak fits.
This is the harmony-notes rule (sum of per-layer activation peaks over the pack plus the first input)
refined with the profiler's saved/peak split and the group buffers Harmony keeps on the GPU.
"""
from __future__ import annotations

import itertools
from dataclasses import dataclass, field

import numpy as np

from harmony.profile_data import Profile, pack_bwd_memory, pack_fwd_memory


@dataclass
class UCosts:
    """Per-layer series at one microbatch size u (lists indexed by layer) and prefix sums.

    A pack's compute time per microbatch is the larger of its vLayers' device times summed and their
    host issue times summed: the host runs ahead of the GPU inside a pack, so a vLayer whose launches
    outlast its kernels is paid for by the others' slack, and only a pack whose launches outlast its
    kernels overall waits for the host. Profiles without issue times (before their timing was split,
    docs/performance.md entry 31) have zeros there: their device times already include launch gaps.
    A backward's issue, timed vLayer by vLayer, pays a call's fixed cost each time, where a pack pays it
    once (Profile.bwd_issue_factor). Where a CUDA profile measured that, the BWD issue series holds each
    vLayer's marginal issue inside a pack, and bwd_issue_fixed the rest of its issue alone, charged once a
    pack at its first vLayer, when LayerCosts is asked to (issue_in_pack; docs/performance.md entry 96);
    elsewhere bwd_issue_fixed is zero."""
    u: int
    fwd: list[float]
    bwd: list[float]
    fwd_peak: list[float]
    saved: list[float]                      # Profile.chain_saved: what a vLayer holds while those above it run
    bwd_peak: list[float]
    bwd_peak_held: list[float] | None       # None: the profile predates it (pack_bwd_memory says how it differs)
    fwd_prefix: list[float]
    bwd_prefix: list[float]
    saved_prefix: list[float]
    fwd_issue_prefix: list[float]
    bwd_issue_prefix: list[float]
    bwd_issue_fixed: list[float] | None = None  # per layer; None: all zero (the class docstring)
    np_: dict = field(default_factory=dict)     # numpy copies of the prefixes and the per-layer memory series

    def fwd_time(self, s: int, e: int) -> float:
        return max(self.fwd_prefix[e] - self.fwd_prefix[s], self.fwd_issue_prefix[e] - self.fwd_issue_prefix[s])

    def bwd_time(self, s: int, e: int) -> float:
        return max(self.bwd_prefix[e] - self.bwd_prefix[s], self.bwd_issue(s, e))

    def bwd_issue(self, s: int, e: int) -> float:
        """Host seconds to issue the backward of pack [s, e) for one microbatch (the class docstring)."""
        fixed = self.bwd_issue_fixed[s] if self.bwd_issue_fixed else 0.0
        return self.bwd_issue_prefix[e] - self.bwd_issue_prefix[s] + fixed

    def time_np(self, kind: str, s, e):
        """fwd_time / bwd_time for arrays of pack starts and ends."""
        k = "fwd" if kind == "FWD" else "bwd"
        dev, iss = self.np_[f"{k}_prefix"], self.np_[f"{k}_issue_prefix"]
        issue = iss[e] - iss[s]
        if kind == "BWD" and self.bwd_issue_fixed:
            issue = issue + self.np_["bwd_issue_fixed"][s]
        return np.maximum(dev[e] - dev[s], issue)


def _prefix(xs) -> list[float]:
    return [0.0, *itertools.accumulate(xs)]


class LayerCosts:
    """Everything the scheduler needs from a profile, as flat lists, with per-u caches."""

    def __init__(self, profile: Profile | dict, sizes=None, issue_in_pack: bool = False):
        """sizes: tasks.LayerSizes for byte accounting; pass layer_sizes_from_model(model.json) where the
        model record is at hand (it knows which outputs carry gradients), else taken from the profile.
        issue_in_pack: charge a BWD pack's issue from the profile's in-pack measurement (UCosts; CUDA
        profiles only). Off by default: alone it put 2x H200's ResNet1026 vDP D = 64 run at 1.44x its
        prediction (1.08x without), whose packs the runtime issued at their vLayers' isolated sum, while
        swap-pp's VGG416 stage issued at 0.59x of it (docs/performance.md entry 96)."""
        self.profile = profile if isinstance(profile, Profile) else Profile(profile)
        self._sizes = sizes
        p = self.profile
        L = self.L = p.num_layers
        self.w = [p.weight_bytes(i) for i in range(L)]
        self.g = [p.grad_bytes(i) for i in range(L)]
        self.xin = [p.input_bytes(i) for i in range(L)]
        self.xout = [p.output_bytes(i) for i in range(L)]
        # The runtime steps the optimizer once per pack, so a pack pays the fixed per-call cost once:
        # per-layer time = measured step - per-call overhead (the profile's opt_call_overhead_s), and
        # opt_time(pack) adds the overhead back once.
        self.opt_call_s = float(p.raw.get("opt_call_overhead_s") or 0.0)
        self.opt = [max(_opt_step(p.layers[i]) - self.opt_call_s, 0.0) for i in range(L)]
        self.params = [p.layers[i].get("params", p.layers[i]["weight_bytes"] // 4) for i in range(L)]
        # parameter tensors per vLayer (profiles from entry 97 on; older ones have none): what the runtime's
        # host work per task grows with (SimParams.host_param_tensor_s)
        counts = [p.layers[i].get("param_tensors") for i in range(L)]
        self._param_tensors_prefix = _prefix(counts) if all(c is not None for c in counts) else None
        self.w_prefix = _prefix(self.w)
        self.g_prefix = _prefix(self.g)
        self.opt_prefix = _prefix(self.opt)
        self.np_ = {"w_prefix": np.array(self.w_prefix, dtype=float),
                    "g_prefix": np.array(self.g_prefix, dtype=float),
                    "xin": np.array(self.xin, dtype=float), "xout": np.array(self.xout, dtype=float)}
        # a pack's backward issue from the profile's in-pack measurement (UCosts): on CUDA only, where the
        # issue is the host's launching; on the CPU the issue is the compute itself, which no chain saves
        self.issue_in_pack = issue_in_pack and str(p.raw.get("device") or "").startswith("cuda")
        self._us: dict[int, UCosts] = {}
        self._task_cache: dict = {}

    def layer_sizes(self):
        if self._sizes is None:
            self._sizes = self.profile.layer_sizes()
        return self._sizes

    def weights(self, s: int, e: int) -> int:
        return self.w_prefix[e] - self.w_prefix[s]

    def grads(self, s: int, e: int) -> int:
        return self.g_prefix[e] - self.g_prefix[s]

    def param_tensors(self, s: int, e: int) -> int:
        """Parameter tensors of vLayers s..e-1 (a ValueError naming the fix if the profile predates them)."""
        if self._param_tensors_prefix is None:
            raise ValueError(f"profile of {self.profile.raw.get('model')} has no per-vLayer param_tensors "
                             "(profiles before docs/performance.md entry 97): profile the model again, or add "
                             "them with experiments/merge_issue_factors.py --param-tensors")
        return self._param_tensors_prefix[e] - self._param_tensors_prefix[s]

    def opt_time(self, s: int, e: int) -> float:
        has_params = self.g_prefix[e] > self.g_prefix[s]
        return self.opt_prefix[e] - self.opt_prefix[s] + (self.opt_call_s if has_params else 0.0)

    def at(self, u: int) -> UCosts:
        c = self._us.get(u)
        if c is None:
            lay = self.profile.layers
            keys = ("fwd_s", "bwd_s", "fwd_peak_bytes", "saved_bytes", "bwd_peak_bytes")
            keys += ("bwd_peak_held_bytes",) if self.profile.has_held_peaks else ()
            keys += ("fwd_issue_s", "bwd_issue_s") if self.profile.has_issue_times else ()
            series = {k: [self.profile.series(i, k, u) for i in range(len(lay))] for k in keys}
            held = series.get("bwd_peak_held_bytes")
            zeros = [0.0] * len(lay)
            p = self.profile
            dropped = [p.dropped(i, u) for i in range(self.L)]
            saved = [sv - d for sv, d in zip(series["saved_bytes"], dropped)]     # Profile.chain_saved
            bwd_issue, fixed = series.get("bwd_issue_s", zeros), None
            factors = [p.bwd_issue_factor(i) for i in range(self.L)] if self.issue_in_pack else []
            if any(f is not None for f in factors):
                fs = [1.0 if f is None else f for f in factors]
                fixed = [(1.0 - f) * iss for f, iss in zip(fs, bwd_issue)]
                bwd_issue = [f * iss for f, iss in zip(fs, bwd_issue)]
            c = UCosts(u, series["fwd_s"], series["bwd_s"], series["fwd_peak_bytes"], saved,
                       series["bwd_peak_bytes"], held, _prefix(series["fwd_s"]), _prefix(series["bwd_s"]),
                       _prefix(saved), _prefix(series.get("fwd_issue_s", zeros)), _prefix(bwd_issue), fixed)
            c.np_ = {"fwd_prefix": np.array(c.fwd_prefix), "bwd_prefix": np.array(c.bwd_prefix),
                     "fwd_issue_prefix": np.array(c.fwd_issue_prefix),
                     "bwd_issue_prefix": np.array(c.bwd_issue_prefix),
                     "bwd_issue_fixed": np.array(fixed or zeros),
                     "fwd_peak": np.array(c.fwd_peak), "saved": np.array(c.saved),
                     "bwd_peak": np.array(c.bwd_peak),
                     "bwd_peak_held": None if held is None else np.array(held),
                     # vLayer l's forward with l-1's dropped output still alive (pack_bwd_memory's peak_l)
                     "fwd_after_drop": np.array([-np.inf] + [d + p.fwd_grad_peak(i + 1, u) if d > 0 else -np.inf
                                                             for i, d in enumerate(dropped[:-1])])}
            self._us[u] = c
        return c

    # ---- compute time of a task: full microbatches at u plus a remainder microbatch -------------------
    def task_time(self, kind: str, s: int, e: int, u: int, n: int) -> tuple[float, float, float, int]:
        """(total, first microbatch, last microbatch, number of microbatches) of a FWD/BWD task over n
        samples at microbatch size u."""
        key = (kind, s, e, u, n)
        r = self._task_cache.get(key)
        if r is None:
            full, rem = divmod(n, u)
            one = self.at(u).fwd_time(s, e) if kind == "FWD" else self.at(u).bwd_time(s, e)
            last = one
            total = full * one
            if rem:
                c = self.at(rem)
                last = c.fwd_time(s, e) if kind == "FWD" else c.bwd_time(s, e)
                total += last
            first = one if full else last
            r = (total, first, last, full + (1 if rem else 0))
            self._task_cache[key] = r
        return r

    def task_device_issue(self, kind: str, s: int, e: int, u: int, n: int) -> tuple[float, ...]:
        """(device seconds, host issue seconds, first microbatch's device and issue seconds, last
        microbatch's device seconds) of a FWD/BWD task: its vLayers' sums. The simulator's host lane uses
        them; task_time charges each microbatch the larger of its device and issue sums instead."""
        key = ("dev+issue", kind, s, e, u, n)
        r = self._task_cache.get(key)
        if r is None:
            full, rem = divmod(n, u)
            per = {}
            for uu in {u, rem} - {0}:
                c = self.at(uu)
                if kind == "FWD":
                    per[uu] = (c.fwd_prefix[e] - c.fwd_prefix[s], c.fwd_issue_prefix[e] - c.fwd_issue_prefix[s])
                else:
                    per[uu] = (c.bwd_prefix[e] - c.bwd_prefix[s], c.bwd_issue(s, e))
            dev = full * per[u][0] + (per[rem][0] if rem else 0.0)
            iss = full * per[u][1] + (per[rem][1] if rem else 0.0)
            first, last = per[u if full else rem], per[rem if rem else u]
            r = self._task_cache[key] = (dev, iss, first[0], first[1], last[0])
        return r

    # ---- memory (see the module docstring) -----------------------------------------------------------
    @staticmethod
    def stash_ahead(u: int, n: int) -> int:
        """Samples of a streamed stash on the GPU besides the current microbatch's: the next microbatch."""
        uu = min(u, n)
        return min(uu, n - uu)

    @staticmethod
    def one_pass(kind: str, u: int, n: int, fresh_grads: bool) -> bool:
        """A BWD task that runs its whole group as one microbatch (n <= u) and starts with no dW on the GPU
        (`fresh_grads`: no kept gradients, no all-reduce; module docstring). Its group's tensors are then the
        microbatch's own, and its dW is made vLayer by vLayer (pack_bwd_memory's fresh_grads)."""
        return kind == "BWD" and fresh_grads and n <= u

    def group_buffers(self, kind: str, s: int, e: int, u: int, n: int, fresh_grads: bool = False) -> float:
        """Whole-group tensors a task holds on the GPU besides one microbatch's working set."""
        if kind == "FWD":
            return n * (self.xin[s] + self.xout[e - 1])
        if self.one_pass(kind, u, n, fresh_grads):
            # the input is the microbatch's, which the pack rule counts (X_in[s]*u), and the outgoing
            # gradient is the bottom vLayer's dX, inside its bwd_peak: only the incoming dY is on top
            return n * self.xout[e - 1] if e < self.L else 0.0
        stashed = 0 < s and e < self.L
        buf = (self.stash_ahead(u, n) if stashed else n) * self.xin[s]
        if e < self.L:
            buf += n * self.xout[e - 1]
        if s > 0:
            buf += n * self.xin[s]
        return buf

    def fwd_task_bytes(self, s: int, e: int, u: int, n: int) -> float:
        return pack_fwd_memory(self.profile, s, e, min(u, n)) + self.group_buffers("FWD", s, e, u, n)

    def bwd_task_bytes(self, s: int, e: int, u: int, n: int, fresh_grads: bool = False) -> float:
        one = self.one_pass("BWD", u, n, fresh_grads)
        return (pack_bwd_memory(self.profile, s, e, min(u, n), fresh_grads=one)
                + self.group_buffers("BWD", s, e, u, n, fresh_grads))

    def task_bytes(self, kind: str, s: int, e: int, u: int, n: int, fresh_grads: bool = False) -> float:
        """A FWD or BWD task's peak bytes (module docstring). fresh_grads: a BWD that starts with no dW on
        the GPU and all-reduces none (`one_pass`), which changes the rule only when it runs one microbatch."""
        fresh = self.one_pass(kind, u, n, fresh_grads)
        key = ("mem", kind, s, e, u, n, fresh)
        r = self._task_cache.get(key)
        if r is None:
            r = self.fwd_task_bytes(s, e, u, n) if kind == "FWD" else self.bwd_task_bytes(s, e, u, n, fresh)
            self._task_cache[key] = r
        return r

    def feasible_ends(self, kind: str, s: int, u: int, n: int, cap: float | None,
                      stop: int | None = None, fresh_grads: bool = False) -> np.ndarray:
        """Every e in (s, stop] such that the task over pack [s, e) fits under cap, ascending (cached,
        vectorised over e). Same rule as task_bytes."""
        stop = self.L if stop is None else stop
        fresh = self.one_pass(kind, u, n, fresh_grads)
        key = ("ends", kind, s, u, n, cap, stop, fresh)
        r = self._task_cache.get(key)
        if r is not None:
            return r
        cap_ = float("inf") if cap is None else cap
        uu = min(u, n)
        c = self.at(uu).np_
        a = self.np_
        xin, xout = a["xin"][s:stop], a["xout"][s:stop]
        idx = np.arange(s + 1, stop + 1)
        if kind == "FWD":      # pack_fwd_memory + group buffers, for every end at once
            act = np.maximum.accumulate(c["fwd_peak"][s:stop] + uu * xin)
            mono = a["w_prefix"][s + 1:stop + 1] - a["w_prefix"][s] + n * self.xin[s] + act
            full = mono + n * xout
        else:                  # pack_bwd_memory + group buffers
            sv = c["saved"][s:stop]
            acc_excl = np.concatenate(([0.0], np.cumsum(sv[:-1])))
            # the output of s-1 is not in the pack: its input X_in[s] is held by the caller throughout
            fwd_drop = np.concatenate(([-np.inf], c["fwd_after_drop"][s + 1:stop]))
            held = c["bwd_peak_held"]
            w = a["w_prefix"][s + 1:stop + 1] - a["w_prefix"][s]
            g_end = a["g_prefix"][s + 1:stop + 1]              # g_prefix[e] for every end e
            if fresh:    # one microbatch from no dW (one_pass): at l only dW[l, e) = g[e] - g[l]; no group input
                g_at = a["g_prefix"][s:stop]                   # g_prefix[l] for l in [s, stop)
                lower = acc_excl - g_at + np.maximum(c["bwd_peak"][s:stop], fwd_drop)
                if held is None:
                    act = g_end + np.maximum.accumulate(lower)
                else:
                    below_top = np.concatenate(([-np.inf], np.maximum.accumulate(lower)[:-1]))
                    act = g_end + np.maximum(below_top + uu * xout,
                                             acc_excl - g_at + np.maximum(held[s:stop], fwd_drop))
                base = w + uu * self.xin[s]
                mono = base + g_end - a["g_prefix"][s]          # at l = s the whole dW[s, e): grows with e
                full = base + act + uu * xout + n * xout * (idx < self.L)     # the edge Y[e-1]; incoming dY
            else:
                terms = np.maximum.accumulate(acc_excl + np.maximum(c["bwd_peak"][s:stop], fwd_drop))
                # input and outgoing gradient (group_buffers): a stash (e < L) streams, the loss pack's input
                # (e = L) is the group's; base takes the stash's, a bound for the cut, and full adds the rest
                buf_in = (self.stash_ahead(u, n) + n) * self.xin[s] if s > 0 else n * self.xin[s]
                loss_in = (n - self.stash_ahead(u, n)) * self.xin[s] * (idx == self.L) if s > 0 else 0.0
                base = w + g_end - a["g_prefix"][s] + buf_in + uu * self.xin[s]
                if held is None:                  # the older form (pack_bwd_memory)
                    mono = base + terms
                    act = terms
                else:                             # end e: vLayers below e-1 with Y[e-1] alive, e-1 at its held peak
                    below_top = np.concatenate(([-np.inf], terms[:-1]))
                    act = np.maximum(below_top + uu * xout, acc_excl + np.maximum(held[s:stop], fwd_drop))
                    mono = base + np.maximum(below_top, 0.0)   # grows with the pack: a bound for the cut below
                full = base + act + uu * xout + n * xout * (idx < self.L) + loss_in   # no incoming dY at the loss
        bad = mono > cap_                             # every term of mono grows with the pack
        k = int(np.argmax(bad)) if bad.any() else len(mono)
        out = idx[:k][full[:k] <= cap_]
        self._task_cache[key] = out
        return out

    def fits(self, kind: str, s: int, e: int, u: int, n: int, cap: float | None,
             fresh_grads: bool = False) -> bool:
        if cap is None:
            return True
        fresh = self.one_pass(kind, u, n, fresh_grads)
        key = ("fitset", kind, s, u, n, cap, fresh)
        r = self._task_cache.get(key)
        if r is None:
            r = self._task_cache[key] = set(self.feasible_ends(kind, s, u, n, cap, fresh_grads=fresh).tolist())
        return e in r


def _opt_step(layer: dict) -> float:
    """A vLayer's optimizer step time: its fastest profiled trial (harmony/profile.py optimizer_cost says
    why). Profiles written before that change hold the median in opt_step_s and the fastest trial in
    opt_spread[0]."""
    spread = layer.get("opt_spread")
    return float(spread[0]) if spread else float(layer.get("opt_step_s") or 0.0)
