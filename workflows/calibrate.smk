# This machine: its environment record and its measured bandwidths and rates (calibration.json).


rule environment:
    output:
        f"{R}/env.json",
    log:
        f"{R}/logs/environment.log",
    shell:
        "harmony env --device {DEVICE} --precision {PRECISION} > {output} 2> {log}"


rule calibrate:
    output:
        f"{R}/calibration.json",
    log:
        f"{R}/logs/calibrate.log",
    threads: timed_threads
    shell:
        "harmony calibrate --device {DEVICE} -o {output} > {log} 2>&1"
