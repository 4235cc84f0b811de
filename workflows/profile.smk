# Stage 2: model.json -> profile.json (per vLayer x microbatch size: time, memory, bytes), under the
# scale's GPU memory cap. Timed: takes every core.


rule profile:
    input:
        model=f"{R}/models/{{model}}.json",
    output:
        f"{R}/profiles/{{model}}.json",
    log:
        f"{R}/logs/profile/{{model}}.log",
    threads: timed_threads
    params:
        device=PROFILE_DEVICE,
        precision=PRECISION,
        cap=CAP,
        ubatch=PLAN.ubatch_args(),
        extra=S.get("profile_args", ""),
    conda:
        ENV
    shell:
        "harmony profile {input.model} --device {params.device} --precision {params.precision}"
        " {params.cap} {params.ubatch} {params.extra} -o {output} > {log} 2>&1"
