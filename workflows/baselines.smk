# The systems Harmony is measured against: same run-record schema, same GPU memory cap (except
# `resident`, which is the no-cap ceiling), each at its own best setting (`-best`: the baseline searches
# the microbatch sizes of experiments/scales.yaml `baseline_ubatch` and keeps the fastest that fits).


rule baseline:
    input:
        model=f"{R}/models/{{model}}.json",
        profile=f"{R}/profiles/{{model}}.json",
        calibration=f"{R}/calibration.json",
    output:
        f"{R}/runs/{{baseline}}/{{model}}/N{{gpus}}-D{{minibatch}}-best.jsonl",
    log:
        f"{R}/logs/baseline/{{baseline}}/{{model}}/N{{gpus}}-D{{minibatch}}-best.log",
    threads: timed_threads
    resources:
        gpus=gpus_used,
    params:
        guard=GUARD,
        device=DEVICE,
        precision=PRECISION,
        cap=baseline_cap,
        ubatch=baseline_ubatch,
        max_iter=baseline_max_iter,
        iters=S["iters"],
    conda:
        ENV
    shell:
        "{params.guard} --out {output} --system {wildcards.baseline} --model {wildcards.model}"
        " --gpus {wildcards.gpus} --minibatch {wildcards.minibatch} --device {params.device}"
        " --precision {params.precision} -- "
        "harmony baseline {wildcards.baseline} {input.model} --minibatch {wildcards.minibatch}"
        " --gpus {wildcards.gpus} {params.cap} {params.ubatch} {params.max_iter} --iters {params.iters} --device {params.device}"
        " --precision {params.precision} --profile {input.profile} --calibration {input.calibration}"
        " -o {output} > {log} 2>&1"
