# This machine: its environment record and its measured bandwidths and rates (calibration.json).


rule environment:
    output:
        f"{R}/env.json",
    log:
        f"{R}/logs/environment.log",
    params:
        device=DEVICE,
        precision=PRECISION,
    conda:
        ENV
    shell:
        "harmony env --device {params.device} --precision {params.precision} > {output} 2> {log}"


rule calibrate:
    output:
        f"{R}/calibration.json",
    log:
        f"{R}/logs/calibrate.log",
    threads: timed_threads
    params:
        device=DEVICE,
        precision=PRECISION,
    conda:
        ENV
    shell:
        "harmony calibrate --device {params.device} --precision {params.precision} -o {output} > {log} 2>&1"
