# Run records -> <figure>.csv (exactly the plotted numbers), .png, .pdf and .env.json (the environment
# of every run it plots and of the machine that drew it). Table 1 is searched from the profiles first.


rule table1_profiles:
    input:
        f"{R}/profiles/{{model}}.json",
    output:
        f"{R}/table1/profiles/{{model}}.json",
    log:
        f"{R}/logs/table1/{{model}}.log",
    shell:
        "cp {input} {output} 2> {log}"


rule table1_search:
    input:
        profiles=expand(f"{R}/table1/profiles/{{model}}.json", model=PLAN.table_models()),
        calibration=f"{R}/calibration.json",
    output:
        f"{R}/table1-search.csv",
    log:
        f"{R}/logs/table1/search.log",
    params:
        profiles=f"{R}/table1/profiles",
    shell:
        "harmony table1 --profiles {params.profiles} --calibration {input.calibration} -o {output} > {log} 2>&1"


rule figure:
    input:
        figure_inputs,
    output:
        csv=f"{R}/{{figure}}.csv",
        png=report(f"{R}/{{figure}}.png", caption="report/figure.rst", category="Figures",
                   subcategory="{figure}", labels={"figure": "{figure}", "format": "png"}),
        pdf=f"{R}/{{figure}}.pdf",
        env=f"{R}/{{figure}}.env.json",
    log:
        f"{R}/logs/figure/{{figure}}.log",
    params:
        experiment=experiment_file,
        caption=figure_caption_text,
    shell:
        "harmony figure {wildcards.figure} --experiment {params.experiment} --scale {SCALE}"
        " --hardware {HARDWARE} --gpus-present {GPUS_PRESENT} -o {output.csv} {input} > {log} 2>&1"


rule figures_from_results:
    # Re-draw every figure from the run records already under results/<scale>/<hardware>/ (committed
    # GPU results included): no stage re-runs, no GPU needed, well under a minute.
    localrule: True
    log:
        f"{R}/logs/figure/from_results.log",
    shell:
        "harmony figure --all --from {R} 2>&1 | tee {log}"
