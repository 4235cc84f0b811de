# Stage 1: model name (or alias: zoo model + overrides, experiments/scales.yaml) -> model.json


rule decompose:
    output:
        f"{R}/models/{{model}}.json",
    log:
        f"{R}/logs/decompose/{{model}}.log",
    params:
        model=decompose_args,
    conda:
        ENV
    shell:
        "harmony decompose {params.model} -o {output} > {log} 2>&1"
