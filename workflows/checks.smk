# The claims table: every claim of docs/artifact-evaluation.md checked against the results with its
# tolerance; prints pass/fail per claim and writes checks.csv.


rule checks:
    input:
        [f"{R}/{f}.csv" for f in FIGURES],
    output:
        report(f"{R}/checks.csv", caption="report/checks.rst", category="Checks"),
    log:
        f"{R}/logs/checks.log",
    params:
        results=lambda wildcards, output: parent_dir(output[0]),
    conda:
        ENV
    shell:
        "harmony check --results {params.results} -o {output} 2>&1 | tee {log}"
