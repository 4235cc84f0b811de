# Stage 3: profile + calibration -> schedule.json (searched, or fixed u_fwd/u_bwd/pack size), with every
# candidate tried (.csv) and a Perfetto trace. A schedule that cannot exist under the cap is a result
# (an "infeasible" stub that the run and the figure report), not a workflow failure.


rule schedule:
    input:
        profile=f"{R}/profiles/{{model}}.json",
        model=f"{R}/models/{{model}}.json",
        calibration=f"{R}/calibration.json",
    output:
        schedule=f"{R}/schedules/{{model}}/{{mode}}-N{{gpus}}-D{{minibatch}}-{{cfg}}.json",
    log:
        f"{R}/logs/schedule/{{model}}/{{mode}}-N{{gpus}}-D{{minibatch}}-{{cfg}}.log",
    params:
        guard=GUARD,
        fixed=schedule_args,
        cap=CAP,
        candidates=f"{R}/schedules/{{model}}/{{mode}}-N{{gpus}}-D{{minibatch}}-{{cfg}}.csv",
        trace=f"{R}/schedules/{{model}}/{{mode}}-N{{gpus}}-D{{minibatch}}-{{cfg}}.trace.json.gz",
    conda:
        ENV
    shell:
        "{params.guard} --out {output.schedule} -- "
        "harmony schedule {input.profile} --model {input.model} --minibatch {wildcards.minibatch}"
        " --gpus {wildcards.gpus} --mode {wildcards.mode} {params.cap} --calibration {input.calibration}"
        " {params.fixed} -o {output.schedule} --candidates {params.candidates} --trace {params.trace}"
        " > {log} 2>&1"
