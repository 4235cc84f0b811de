"""Copy the backward-issue-in-pack measurement (`bwd_issue_in_pack`, docs/performance.md entry 96) from newer
profiles into a folder's profiles, leaving every other number as it is, so that a re-simulation isolates
that one change: what the folder's runs would have been predicted at with it.

    PYTHONPATH=. python experiments/merge_issue_factors.py RESULTS NEW_PROFILES_DIR OUT_DIR MODEL [MODEL ...]
    e.g. results/paper/2xH200 results/probes/holdout/2xH200/issue1 /tmp/merged vgg416 resnet1026 bert96 gpt2-xl
Writes OUT_DIR/MODEL.json for each model (RESULTS/profiles/MODEL.json with the new profile's records, vLayer by
vLayer: both must profile the same model.json), for `resimulate_runs.py --profiles OUT_DIR` and
`predict_swap_search.py --profiles OUT_DIR`.
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


def main(argv: list[str]) -> int:
    if len(argv) < 4:
        print(__doc__, file=sys.stderr)
        return 2
    root, new_dir, out_dir, models = Path(argv[0]), Path(argv[1]), Path(argv[2]), argv[3:]
    out_dir.mkdir(parents=True, exist_ok=True)
    for m in models:
        merged = merge(read_json(root / "profiles" / f"{m}.json"), read_json(new_dir / f"{m}.json"))
        write_json(out_dir / f"{m}.json", merged)
        factors = sorted({round(v["bwd_issue_in_pack"]["factor"], 3) for v in merged["vlayers"] if v["bwd_issue_in_pack"]})
        print(f"{m}: {sum(1 for v in merged['vlayers'] if v['bwd_issue_in_pack'])} of {len(merged['vlayers'])} "
              f"vLayers with a factor ({', '.join(map(str, factors))}) -> {out_dir / (m + '.json')}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
