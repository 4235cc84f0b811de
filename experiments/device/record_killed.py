"""Write the summary record of a baseline run that was SIGKILLed (rc 137) and so could not write its own.

An out-of-memory is a result, never a lost log: the kernel's OOM killer (host memory exhausted) ends a
process with SIGKILL, which no Python handler sees. This records what is known: status `oom`, the exit
status, the log's last line and the environment of the machine it ran on.

    python experiments/device/record_killed.py --system zero-offload --model-json M --minibatch 32 --ubatch 16 \
        --log RUN.log --env ENV.json|collect:cuda:tf32 -o RUN.jsonl
"""
from __future__ import annotations

import argparse
import json
from pathlib import Path

from harmony.jsonio import write_json
from harmony.metrics import env_record, make_summary, validate_summary


def killed_summary(system: str, model_json: Path, minibatch: int, ubatch: int | None, log: Path, env: dict,
                   gpus: int = 1) -> dict:
    text = log.read_text(errors="replace").strip().splitlines() if log.exists() else []
    last = text[-1] if text else "(no log)"
    s = make_summary(system=system, model=json.loads(Path(model_json).read_text())["model"], mode=None, gpus=gpus,
                     minibatch=minibatch, status="oom", iterations=[], warmup=0, env=env,
                     message=("killed by SIGKILL (rc 137), not by its time limit: the kernel's OOM killer when "
                              f"host memory runs out; last log line: {last[:200]}"),
                     ubatch=ubatch, killed_rc=137, log=str(log), written_by="experiments/device/record_killed.py")
    validate_summary(s)
    return s


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--system", required=True)
    p.add_argument("--model-json", required=True)
    p.add_argument("--minibatch", type=int, required=True)
    p.add_argument("--ubatch", type=int, default=None, help="the candidate's microbatch, when it had one")
    p.add_argument("--gpus", type=int, default=1)
    p.add_argument("--log", required=True)
    p.add_argument("--env", required=True,
                   help="the environment record of the machine the run was on: a `harmony env` JSON file, or "
                        "collect:DEVICE:PRECISION to take it now (only on that same machine)")
    p.add_argument("-o", "--output", required=True)
    a = p.parse_args()
    if a.env.startswith("collect:"):
        _, device, precision = a.env.split(":")
        env = env_record(device, precision)
    else:
        env = json.loads(Path(a.env).read_text())
    s = killed_summary(a.system, Path(a.model_json), a.minibatch, a.ubatch, Path(a.log), env, a.gpus)
    write_json(a.output, s, indent=None)   # one line: a run record (JSONL) holding only its summary
    print(f"{a.output}: {a.system} u={a.ubatch}: oom (SIGKILL, rc 137)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
