# Stage 4: execute a schedule -> run.jsonl (one record per iteration + a summary with the environment).
# Throughput runs use synthetic data; the convergence runs of figures 13 and 21 use the real data
# (harmony/data.py: GLUE-MRPC / WikiText from config["data_dir"], else the offline fallback corpus).


rule run_harmony:
    input:
        schedule=f"{R}/schedules/{{model}}/{{mode}}-N{{gpus}}-D{{minibatch}}-{{cfg}}.json",
    output:
        f"{R}/runs/harmony-{{mode}}/{{model}}/N{{gpus}}-D{{minibatch}}-{{cfg}}.jsonl",
    log:
        f"{R}/logs/run/harmony-{{mode}}/{{model}}/N{{gpus}}-D{{minibatch}}-{{cfg}}.log",
    threads: timed_threads
    resources:
        gpus=gpus_used,
    params:
        guard=GUARD,
        device=DEVICE,
        precision=PRECISION,
        iters=S["iters"],
        cap=CAP,
    conda:
        ENV
    shell:
        "{params.guard} --out {output} --schedule {input.schedule} --system harmony-{wildcards.mode}"
        " --model {wildcards.model} --mode {wildcards.mode} --gpus {wildcards.gpus}"
        " --minibatch {wildcards.minibatch} --device {params.device} --precision {params.precision} -- "
        "harmony run {input.schedule} --iters {params.iters} --data synthetic {params.cap}"
        " --precision {params.precision} --device {params.device} -o {output} > {log} 2>&1"


rule run_convergence:
    input:
        schedule=convergence_schedule,
    output:
        f"{R}/convergence/{{figure}}/{{model}}/harmony-{{mode}}-N{{gpus}}.jsonl",
    log:
        f"{R}/logs/convergence/{{figure}}/{{model}}/harmony-{{mode}}-N{{gpus}}.log",
    threads: timed_threads
    resources:
        gpus=gpus_used,
    params:
        guard=GUARD,
        device=DEVICE,
        precision=PRECISION,
        iters=S["convergence_iters"],
        data=config["data_dir"],
        cap=CAP,
        intra_op=CONVERGENCE_RUN_THREADS,
    conda:
        ENV
    shell:
        "{params.guard} --out {output} --schedule {input.schedule} --system harmony-{wildcards.mode}"
        " --model {wildcards.model} --mode {wildcards.mode} --gpus {wildcards.gpus} --device {params.device} -- "
        "harmony run {input.schedule} --iters {params.iters} --data {params.data} {params.cap} {params.intra_op}"
        " --precision {params.precision} --device {params.device} -o {output} > {log} 2>&1"


rule run_reference:
    input:
        model=f"{R}/models/{{model}}.json",
    output:
        f"{R}/convergence/{{figure}}/{{model}}/{{reference}}-N1.jsonl",
    log:
        f"{R}/logs/convergence/{{figure}}/{{model}}/{{reference}}-N1.log",
    threads: timed_threads
    params:
        device=PROFILE_DEVICE,
        precision=PRECISION,
        iters=S["convergence_iters"],
        data=config["data_dir"],
        minibatch=convergence_minibatch,
        ubatch=convergence_ubatch,
        order=reference_order_args,
        intra_op=CONVERGENCE_REFERENCE_THREADS,
    conda:
        ENV
    shell:
        "python -m harmony.workflow reference {input.model} --data {params.data} --device {params.device}"
        " --precision {params.precision} --minibatch {params.minibatch} --ubatch {params.ubatch} {params.order}"
        " {params.intra_op}"
        " --iters {params.iters} -o {output} > {log} 2>&1"
