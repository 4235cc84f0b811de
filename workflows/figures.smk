# Run records -> <figure>.csv (exactly the plotted numbers), .png, .pdf and .env.json (the environment
# of every run it plots and of the machine that drew it). Table 1 is searched from the profiles first.


rule table1_profiles:
    input:
        f"{R}/profiles/{{model}}.json",
    output:
        f"{R}/table1/profiles/{{model}}.profile.json",
    log:
        f"{R}/logs/table1/{{model}}.log",
    conda:
        ENV
    shell:
        "cp {input} {output} 2> {log}"


rule table1_search:
    input:
        profiles=table1_profiles,
        calibration=f"{R}/calibration.json",
    output:
        f"{R}/table1-search.csv",
    log:
        f"{R}/logs/table1/search.log",
    params:
        source=table1_source,
        models=",".join(PLAN.table_models()),
        candidates=f"{R}/table1/search",
    conda:
        ENV
    shell:
        "harmony table1 {params.source} --models {params.models} --calibration {input.calibration}"
        " --candidates-dir {params.candidates} -o {output} > {log} 2>&1"


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
        scale=SCALE,
        hardware=HARDWARE,
        gpus_present=GPUS_PRESENT,
    conda:
        ENV
    shell:
        "harmony figure {wildcards.figure} {input} --experiment {params.experiment} --scale {params.scale}"
        " --hardware {params.hardware} --gpus-present {params.gpus_present} -o {output.csv} > {log} 2>&1"


rule figures_from_results:
    # Re-draw every figure from the run records already under results/<scale>/<hardware>/ (committed
    # GPU results included): no stage re-runs, no GPU needed, well under a minute. Records that the
    # device scripts wrote in their own layout (<model>-D<d>-N<n>/<system>.jsonl, profiles/, table1.csv)
    # are first filed into the workflow's layout (byte copies named from each record's own summary).
    localrule: True
    log:
        f"{R}/logs/figure/from_results.log",
    params:
        results=R,
    conda:
        ENV
    shell:
        "harmony figure --import-device {params.results} --all 2>&1 | tee {log}"


rule results_page:
    # docs/results.md: every figure of every results/<scale>/<hardware>/ present, the claims table of
    # each (harmony check) and the hardware every number came from (the figures' environment records).
    localrule: True
    log:
        f"{R}/logs/results_page.log",
    params:
        root="results",
        page="docs/results.md",
    conda:
        ENV
    shell:
        "harmony figure --results-page --results-root {params.root} -o {params.page} 2>&1 | tee {log}"
