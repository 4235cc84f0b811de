"""Copy the backward-issue-in-pack measurement (`bwd_issue_in_pack`, docs/performance.md entry 96) from newer
profiles into a folder's profiles, leaving every other number as it is, so that a re-simulation isolates
that one change: what the folder's runs would have been predicted at with it.

    PYTHONPATH=. python experiments/merge_issue_factors.py RESULTS NEW_PROFILES_DIR OUT_DIR MODEL [MODEL ...]
    e.g. results/paper/2xH200 results/probes/holdout/2xH200/issue1 /tmp/merged vgg416 resnet1026 bert96 gpt2-xl
Writes OUT_DIR/MODEL.json for each model (RESULTS/profiles/MODEL.json with the new profile's records, vLayer by
vLayer: both must profile the same model.json), for `resimulate_runs.py --profiles OUT_DIR` and
`predict_swap_search.py --profiles OUT_DIR`.

`--param-tensors` also writes each vLayer's parameter tensors (`param_tensors`, which profiles record from
entry 97 on) from RESULTS/models/MODEL.json, or where that predates them from its zoo model decomposed
again: what `SimParams.host_param_tensor_s` charges (entry 97). With it, a model with no newer profile
gets the counts alone.
"""
from __future__ import annotations

import sys
from pathlib import Path

from harmony.jsonio import read_json, write_json


def merge(base: dict, new: dict) -> dict:
    """base with new's bwd_issue_in_pack per vLayer (a ValueError if the two profile different models)."""
    if base["model"] != new["model"] or len(base["vlayers"]) != len(new["vlayers"]):
        raise ValueError(f"{new['model']} ({len(new['vlayers'])} vLayers) is not the profile's model "
                         f"{base['model']} ({len(base['vlayers'])} vLayers)")
    if any(a["signature"] != b["signature"] for a, b in zip(base["vlayers"], new["vlayers"])):
        raise ValueError(f"{base['model']}: the two profiles' vLayers differ; profile the same model.json")
    out = {**base, "vlayers": [dict(v) for v in base["vlayers"]],
           "bwd_issue_in_pack_from": new.get("gpu") or new.get("device")}
    for v, n in zip(out["vlayers"], new["vlayers"]):
        v["bwd_issue_in_pack"] = n.get("bwd_issue_in_pack")
    return out


def param_tensor_counts(model_json: dict) -> list[int]:
    """Each vLayer's parameter tensors: the model record's own (decompose, entry 97 on), else those of the
    record's zoo model decomposed again."""
    counts = [v.get("param_tensors") for v in model_json["vlayers"]]
    if all(c is not None for c in counts):
        return counts
    src = model_json.get("source") or {}
    if src.get("kind") != "zoo":
        raise ValueError(f"{model_json['model']}: the model record has no param_tensors and no zoo source to "
                         "count them from; decompose it again")
    from harmony.decompose import decompose_model
    from harmony.models import get_model
    again = decompose_model(get_model(src["name"], **(src.get("overrides") or {})), with_flops=False)["vlayers"]
    if len(again) != len(counts):
        raise ValueError(f"{src['name']} decomposes into {len(again)} vLayers, the record has {len(counts)}")
    return [v["param_tensors"] for v in again]


def main(argv: list[str]) -> int:
    import argparse
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("root", help="results folder (profiles/ and models/)")
    ap.add_argument("new_dir", help="folder of the newer profiles (MODEL.json)")
    ap.add_argument("out_dir")
    ap.add_argument("models", nargs="+")
    ap.add_argument("--param-tensors", action="store_true",
                    help="also write each vLayer's parameter tensors (param_tensors) from the model")
    a = ap.parse_args(argv)
    root, new_dir, out_dir = Path(a.root), Path(a.new_dir), Path(a.out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    for m in a.models:
        base = read_json(root / "profiles" / f"{m}.json")
        if (new_dir / f"{m}.json").exists():
            merged = merge(base, read_json(new_dir / f"{m}.json"))
        elif a.param_tensors:             # nothing newer to merge: the profile as it is, with the counts
            merged = {**base, "vlayers": [dict(v) for v in base["vlayers"]]}
        else:
            sys.exit(f"merge_issue_factors.py: no {m}.json in {new_dir}")
        if a.param_tensors:
            for v, c in zip(merged["vlayers"], param_tensor_counts(read_json(root / "models" / f"{m}.json"))):
                v["param_tensors"] = c
        write_json(out_dir / f"{m}.json", merged)
        factors = sorted({round(v["bwd_issue_in_pack"]["factor"], 3) for v in merged["vlayers"]
                          if v.get("bwd_issue_in_pack")})
        print(f"{m}: {sum(1 for v in merged['vlayers'] if v.get('bwd_issue_in_pack'))} of {len(merged['vlayers'])} "
              f"vLayers with a factor ({', '.join(map(str, factors))})"
              + (f", {sum(v['param_tensors'] for v in merged['vlayers'])} parameter tensors" if a.param_tensors else "")
              + f" -> {out_dir / (m + '.json')}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
