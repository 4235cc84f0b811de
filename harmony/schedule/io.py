"""schedule.json: what `harmony schedule` writes and `harmony run` (and the swap baselines) execute.

{artifact: "schedule", schema_version: 1,
 model: <the model.json record, embedded so a schedule is self-contained>,
 graph: TaskGraph.to_json()  (config + ordered tasks),
 gpu_memory_cap: bytes | null, precision: "fp32" | "tf32" | "bf16",
 prediction: {iter_time_s, bytes {kind: n}, peak_memory_bytes [per GPU], schedule_bound_s, terms {...}} | null,
 search: {...} | null   (how it was chosen: candidates, search time), system: "harmony" | baseline name}
"""
from __future__ import annotations

from harmony.jsonio import read_json, write_json
from harmony.schedule.tasks import DEFAULT_RECEIVE_MODE, TaskGraph, build_task_graph, ScheduleError

ARTIFACT, SCHEMA_VERSION = "schedule", 1


def make_schedule_record(model_json: dict, graph: TaskGraph, *, gpu_memory_cap: int | None = None,
                         precision: str = "fp32", prediction: dict | None = None, search: dict | None = None,
                         system: str = "harmony") -> dict:
    if graph.config.num_layers != model_json["num_vlayers"]:
        raise ScheduleError(f"schedule covers {graph.config.num_layers} vLayers but model "
                            f"{model_json['model']} has {model_json['num_vlayers']}")
    return {"artifact": ARTIFACT, "schema_version": SCHEMA_VERSION, "system": system,
            "model": model_json, "graph": graph.to_json(), "gpu_memory_cap": gpu_memory_cap,
            "precision": precision, "prediction": prediction, "search": search}


def planned_cap(record: dict) -> float | None:
    """The GPU memory the search planned under (the cap less its headroom, `search.planned_cap_bytes`), else
    the schedule's cap: simulating under it reproduces the recorded prediction, `prefetch_waits` included."""
    return (record.get("search") or {}).get("planned_cap_bytes") or record.get("gpu_memory_cap")


def planned_receive_mode(record: dict) -> str:
    """The receive mode a schedule's prediction was simulated with, which its search chose per plan since
    docs/performance.md entry 59 and `harmony run` takes by default (older schedules: the default)."""
    return (record.get("prediction") or {}).get("p2p_receive") or DEFAULT_RECEIVE_MODE


def planned_compute_scale(record: dict) -> float | dict[int, float]:
    """The factor on the profile's GPU compute times the search simulated with (`--compute-scale`; 1 for
    schedules before it), or one per microbatch size ({u: factor}, JSON keys back to ints): simulating with
    it reproduces the recorded prediction."""
    scale = (record.get("search") or {}).get("compute_scale") or 1.0
    return {int(u): float(f) for u, f in scale.items()} if isinstance(scale, dict) else float(scale)


def save_schedule(path, record: dict) -> None:
    write_json(path, record, indent=None)           # large: one line (see experiments/compact_results.py)


def load_schedule(path) -> tuple[dict, TaskGraph]:
    """(record, graph). The graph is rebuilt from its config and checked against the stored tasks, so a
    hand-edited or stale schedule fails here, before any worker starts. Stored tasks that differ from the
    rebuilt ones only in where the UPD tasks sit (schedules written before docs/performance.md entry 22)
    load with the current placement: an UPD's position decides only when its worker submits it."""
    rec = read_json(path, kind=ARTIFACT, schema_version=SCHEMA_VERSION)
    graph = TaskGraph.from_json(rec["graph"])
    rebuilt = build_task_graph(graph.config, rec["model"]["num_vlayers"])
    if [t.to_json() for t in rebuilt.tasks] != [t.to_json() for t in graph.tasks]:
        if _without_update_order(rebuilt) != _without_update_order(graph):
            raise ScheduleError(f"{path}: the task list does not match its config (edited by hand or from "
                                f"another version); regenerate it with `harmony schedule`")
        rec = dict(rec, graph=rebuilt.to_json())
    return rec, rebuilt


def _without_update_order(g: TaskGraph) -> tuple[list, list]:
    """The graph's tasks with the UPDs taken out of the order: the compute tasks in order, numbered among
    themselves, and the UPDs as a sorted list of (pack, rank, the compute tasks they depend on)."""
    index = {t.id: i for i, t in enumerate(t for t in g.tasks if t.kind != "UPD")}
    compute = []
    for t in g.tasks:
        if t.kind == "UPD":
            continue
        d = t.to_json()
        d["id"] = index[t.id]
        if d["act_in"][0] in ("task", "stash"):
            d["act_in"] = [d["act_in"][0], index[d["act_in"][1]]]
        if d["grad_in"] is not None:
            d["grad_in"] = index[d["grad_in"]]
        compute.append(d)
    updates = sorted((list(t.pack), t.rank, sorted(index[i] for i in t.deps)) for t in g.tasks if t.kind == "UPD")
    return compute, updates
