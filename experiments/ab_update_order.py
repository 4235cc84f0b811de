"""Performance log 22 on the CPU: vDP, N = 2 gloo workers, a GPT-2 of 12 blocks of width 512, whose largest
backward pack (it holds the loss, so its backward runs first) is updated by rank 0. Prints rank 0's task
order, the iteration time and each rank's optimizer drain (steps still running after its last task).
Runs the harmony on PYTHONPATH; for the code before the change:
  git worktree add /tmp/before 8fb8ced && (cd /tmp/before && PYTHONPATH=. python /path/to/experiments/ab_update_order.py)
"""
import json
from harmony.models import get_model
from harmony.decompose import decompose_model
from harmony.schedule.tasks import ScheduleConfig, build_task_graph
from harmony.schedule.io import make_schedule_record
from harmony.runtime import run_schedule

def main():
    over = dict(n_layer=12, n_embd=512, n_head=8, n_ctx=64, seq_len=32, vocab_size=4096, dropout=0.0)
    spec = get_model("gpt2-tiny", **over)
    mj = decompose_model(spec, source={"kind": "zoo", "name": "gpt2-tiny", "overrides": over}, with_flops=False)
    L = mj["num_vlayers"]
    bwd = ((0, 2), (2, 4), (4, L))          # pack 2 (most layers, the loss) is updated by rank 0 (i mod N)
    cfg = ScheduleConfig(mode="vDP", gpus=2, minibatch=16, ubatch_fwd=4, ubatch_bwd=4, bwd_packs=bwd, fwd_packs=((0, 2), (2, 4)))
    g = build_task_graph(cfg, L)
    print("rank 0 order:", [(t.kind, t.pack) for t in g.rank_tasks(0)])
    s = run_schedule(make_schedule_record(mj, g), g, iters=7, warmup=2, device="cpu", worker_threads=1)
    print(s["status"], s.get("message")); print(json.dumps({"iter_time_s": round(s["iter_time_s"], 4),
                      "host_phases": [{k: p[k] for k in ("issue_s", "upd_drain_s", "upd_step_s", "upd_steps")} for p in s["host_phases"]]}))


if __name__ == "__main__":
    main()
