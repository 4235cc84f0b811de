# The systems Harmony is measured against: same run-record schema, same GPU memory cap (except
# `resident`, which is the no-cap ceiling), each at its own best setting (`-best`: the baseline picks it).


rule baseline:
    input:
        model=f"{R}/models/{{model}}.json",
    output:
        f"{R}/runs/{{baseline}}/{{model}}/N{{gpus}}-D{{minibatch}}-best.jsonl",
    log:
        f"{R}/logs/baseline/{{baseline}}/{{model}}/N{{gpus}}-D{{minibatch}}-best.log",
    threads: timed_threads
    resources:
        gpus=lambda wildcards: 0 if DEVICE == "cpu" else int(wildcards.gpus),
    params:
        model=baseline_model,
        cap=baseline_cap,
        iters=S["iters"],
    shell:
        "{GUARD} --out {output} --system {wildcards.baseline} --model {wildcards.model}"
        " --gpus {wildcards.gpus} --minibatch {wildcards.minibatch} --device {DEVICE} --precision {PRECISION} -- "
        "harmony baseline {wildcards.baseline} {params.model} --minibatch {wildcards.minibatch}"
        " --gpus {wildcards.gpus} {params.cap} --iters {params.iters} --device {DEVICE}"
        " -o {output} > {log} 2>&1"
