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
        gpus=lambda wildcards: 0 if DEVICE == "cpu" else int(wildcards.gpus),
    params:
        iters=S["iters"],
        cap=CAP,
    shell:
        "{GUARD} --out {output} --schedule {input.schedule} --system harmony-{wildcards.mode}"
        " --model {wildcards.model} --mode {wildcards.mode} --gpus {wildcards.gpus}"
        " --minibatch {wildcards.minibatch} --device {DEVICE} --precision {PRECISION} -- "
        "harmony run {input.schedule} --iters {params.iters} --data synthetic {params.cap}"
        " --precision {PRECISION} --device {DEVICE} -o {output} > {log} 2>&1"


rule run_convergence:
    input:
        schedule=convergence_schedule,
    output:
        f"{R}/convergence/{{figure}}/{{model}}/harmony-{{mode}}-N{{gpus}}.jsonl",
    log:
        f"{R}/logs/convergence/{{figure}}/{{model}}/harmony-{{mode}}-N{{gpus}}.log",
    threads: timed_threads
    resources:
        gpus=lambda wildcards: 0 if DEVICE == "cpu" else int(wildcards.gpus),
    params:
        iters=S["convergence_iters"],
        data=config["data_dir"],
        cap=CAP,
    shell:
        "{GUARD} --out {output} --schedule {input.schedule} --system harmony-{wildcards.mode}"
        " --model {wildcards.model} --mode {wildcards.mode} --gpus {wildcards.gpus} --device {DEVICE} -- "
        "harmony run {input.schedule} --iters {params.iters} --data {params.data} {params.cap}"
        " --precision {PRECISION} --device {DEVICE} -o {output} > {log} 2>&1"


rule run_reference:
    input:
        model=f"{R}/models/{{model}}.json",
    output:
        f"{R}/convergence/{{figure}}/{{model}}/pytorch-N1.jsonl",
    log:
        f"{R}/logs/convergence/{{figure}}/{{model}}/pytorch-N1.log",
    params:
        iters=S["convergence_iters"],
        data=config["data_dir"],
        minibatch=convergence_minibatch,
    shell:
        "python -m harmony.workflow reference {input.model} --data {params.data}"
        " --minibatch {params.minibatch} --iters {params.iters} -o {output} > {log} 2>&1"
