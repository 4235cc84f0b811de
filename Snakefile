# Harmony reimplementation: the paper's figures and tables as Snakemake targets.
#
#   snakemake figure10 --cores 2                         smoke scale on a CPU (auto: paper with CUDA)
#   snakemake all --cores 16 --config scale=paper        every figure and table at the paper's scale
#   snakemake figures_from_results --cores 1 --config scale=paper hardware=1xH100-80GB-HBM3
#                                                        re-draw every figure from committed run records
#   snakemake check --cores 1                            the claims table (pass/fail with tolerances)
#   snakemake results_page --cores 1                     docs/results.md: every figure, claims, hardware
#
# Rules are thin calls of the `harmony` CLI (one .smk per stage under workflows/); the grids are in
# experiments/*.yaml, the scales in experiments/scales.yaml, helpers in workflows/common.smk and
# harmony/workflow.py. Results: results/<scale>/<hardware>/ (docs/artifact-evaluation.md).

from snakemake.utils import min_version

min_version("8.0")


configfile: "config.yaml"


include: "workflows/common.smk"
include: "workflows/decompose.smk"
include: "workflows/calibrate.smk"
include: "workflows/profile.smk"
include: "workflows/schedule.smk"
include: "workflows/run.smk"
include: "workflows/baselines.smk"
include: "workflows/figures.smk"
include: "workflows/checks.smk"


rule all:
    input:
        target_inputs(FIGURES),
        f"{R}/checks.csv",
    default_target: True


rule figure8:
    input:
        target_inputs(["figure8"]),


rule figure10:
    input:
        target_inputs(["figure10"]),


rule figure12:
    input:
        target_inputs(["figure12"]),


rule figure13:
    input:
        target_inputs(["figure13"]),


rule figure17:
    input:
        target_inputs(["figure17"]),


rule figure18:
    input:
        target_inputs(["figure18"]),


rule figure21:
    input:
        target_inputs(["figure21"]),


rule table1:
    input:
        target_inputs(["table1"]),


rule check:
    input:
        f"{R}/checks.csv",
