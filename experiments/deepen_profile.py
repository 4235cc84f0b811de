"""A profile for a deeper model of the same layers, from a measured one: a planning aid, not a measurement.

`harmony profile` times each distinct vLayer once (`profiled_as`): a GPT-2 of width 4096 has one block
whatever its depth. So the profile of a shallow model already holds every cost a deeper one of the same
layers has, and the schedule search can plan the deeper model on the CPU before a GPU call profiles it:
will Harmony's plan fit the GPU and the host, and how fast is it predicted (device README item 19: NL = 56
on the 252 GiB host). Each vLayer of MODEL takes the entry of the first PROFILE vLayer with the same kind
and parameter bytes; a vLayer with no such entry is an error (the profile does not cover it). The output
says what it was derived from (`derived_from`) and keeps MODEL's names, indices and signatures.

The profile's host memory is the schedule's host budget (`harmony schedule` sizes the arena against the
profiled host's available memory). A profile from another host carries that host's: `--host-here` puts
this machine's total and available memory in its place (`host_memory_from`), as `large_gpu.sh` does in the
call, where the run that the plan is for will check its arena against this machine (the 252 GiB host's
profile planned on the 126 GiB one-H100 box would otherwise admit an arena twice that box's memory).

    python experiments/deepen_profile.py PROFILE MODEL -o OUT
    python experiments/deepen_profile.py results/large/1xH100-80GB-HBM3-host252GiB/gpt2-4096x24-D32-N1/profile.json \\
        /tmp/g56/model.json -o /tmp/g56/profile.json        # after `harmony decompose gpt2-10b --set n_layer=56`
"""
from __future__ import annotations

import argparse
import copy
import json
import sys
from pathlib import Path


def with_host_here(rec: dict) -> dict:
    """REC with this machine's host memory (`harmony.metrics.host_memory_record`) in place of its own."""
    from harmony.metrics import host_memory_record
    theirs = {k: rec.get(k) for k in ("host_memory_bytes", "host_memory_available_bytes")}
    return {**rec, **host_memory_record(), "host_memory_from": {"measured_here": True, "profiled_host": theirs}}


def deepen(profile: dict, model: dict, source: str = "") -> dict:
    """PROFILE's costs mapped onto MODEL's vLayers (see the module docstring)."""
    first: dict[tuple[str, int], dict] = {}
    for v in profile["vlayers"]:
        first.setdefault((v["kind"], v["weight_bytes"]), v)
    out, reps = [], {}
    for m in model["vlayers"]:
        key = (m["kind"], m["param_bytes"])
        if key not in first:
            raise ValueError(f"vLayer {m['index']} ({m['kind']}, {m['param_bytes']} parameter bytes) of "
                             f"{model.get('model')} has no vLayer of that kind and size in the profile of "
                             f"{profile.get('model')}: profile a model that has it")
        v = copy.deepcopy(first[key])
        v["index"], v["signature"] = m["index"], m.get("signature", "")
        v["profiled_as"] = reps.setdefault(key, m["index"])    # the deeper model's first such vLayer
        out.append(v)
    rec = copy.deepcopy(profile)
    rec.update(vlayers=out, model=model.get("model"), unique_vlayers=len(reps),
               derived_from=source or profile.get("model"))
    return rec


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("profile", type=Path, help="profile.json of a model with the same layers")
    ap.add_argument("model", type=Path, help="model.json of the deeper model (`harmony decompose`)")
    ap.add_argument("-o", "--output", type=Path, required=True)
    ap.add_argument("--host-here", action="store_true",
                    help="this machine's host memory in place of the profiled host's (the schedule's host budget)")
    args = ap.parse_args(argv)
    from harmony.jsonio import write_json
    rec = deepen(json.loads(args.profile.read_text()), json.loads(args.model.read_text()), str(args.profile))
    if args.host_here:
        rec = with_host_here(rec)
    write_json(args.output, rec)
    print(f"{args.output}: {len(rec['vlayers'])} vLayers of {rec['model']} from {args.profile} "
          f"({rec['unique_vlayers']} distinct)", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
