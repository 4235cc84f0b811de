# Helpers of the workflow: configuration, the plan (harmony/workflow.py) and input functions.
# No rule lives here; every other .smk file only declares rules that call the `harmony` CLI.

import os

from snakemake.utils import validate

from harmony.checks import control_ubatch, order_shares
from harmony.workflow import FIGURES, Plan, cfg_args


validate(config, schema="config.schema.yaml")

PLAN = Plan.from_config(config, root=workflow.basedir)
R = PLAN.root  # results/<scale>/<hardware>
SCALE = PLAN.scale
S = PLAN.settings  # the scale's settings (experiments/scales.yaml)
DEVICE = PLAN.device
PRECISION = S["precision"]
CAP = PLAN.cap_args()  # "--gpu-memory 11GiB" or ""
GUARD = "python -m harmony.workflow guard" + ("" if PLAN.record_failures else " --strict")
REPORT = "workflows/report"
ENV = "../environment.yml"  # conda environment of every rule (used with --use-conda)

logger.info(f"harmony workflow: {PLAN.describe()} -> {R}")


wildcard_constraints:
    model=r"[A-Za-z0-9_.+-]+",
    system=r"harmony-vPP|harmony-vDP|swap-dp|swap-pp|fsdp-offload|zero-offload|resident|pytorch",
    reference=r"pytorch|pytorch-reorder(-u\d+)?|pytorch-hostopt-s\d+",
    baseline=r"swap-dp|swap-pp|fsdp-offload|zero-offload|resident",
    mode=r"vPP|vDP",
    gpus=r"\d+",
    minibatch=r"\d+",
    cfg=r"auto|u\d+-\d+-p\d+",
    figure=r"figure\d+|table1",


# The PNG, PDF, CSV and environment record of each figure, and what a target asks for: the figures
# and, explicitly, every record they plot (harmony.workflow.Plan.target_inputs), so that a deleted run
# record is re-made, and then the figure, even when the figure files are still there.
figure_outputs = PLAN.figure_outputs
target_inputs = PLAN.target_inputs


def figure_inputs(wildcards):
    """Every run record and prediction the figure plots (harmony.workflow.Plan.figure_inputs)."""
    return PLAN.all_inputs(wildcards.figure)


def decompose_args(wildcards):
    return PLAN.decompose_args(wildcards.model)


def schedule_args(wildcards):
    return cfg_args(wildcards.cfg)


def parent_dir(path):
    return os.path.dirname(path)


def gpus_used(wildcards):
    """GPUs a job holds (run with --resources gpus=<present> so GPU jobs never share a GPU)."""
    return 0 if DEVICE == "cpu" else int(wildcards.gpus)


def timed_threads(wildcards):
    """Timed jobs (profile, runs, baselines) take every core so that they never share the machine."""
    return workflow.cores


def convergence_minibatch(wildcards):
    return PLAN.convergence_minibatch(wildcards.figure, wildcards.model)


def convergence_ubatch(wildcards):
    """Plain PyTorch accumulates over the figure's u_bwd (same SGD; fits the GPU at the paper's D).
    `pytorch-reorder` runs the same SGD at twice that microbatch (half where u_bwd is the whole minibatch),
    `pytorch-reorder-u<k>` at microbatch k: their gradients are summed in another order, so their distance
    from `pytorch` is what rounding alone does to the reference (check C6)."""
    u = PLAN.grid(wildcards.figure)["schedule"]["ubatch_bwd"]
    if wildcards.reference == "pytorch" or order_shares(wildcards.reference):
        return u
    if (k := control_ubatch(wildcards.reference)) is not None:
        return k
    D = convergence_minibatch(wildcards)
    return 2 * u if 2 * u <= D else max(u // 2, 1)


def reference_order_args(wildcards):
    """`pytorch-hostopt-s<k>`: plain PyTorch in Harmony's order of arithmetic, the minibatch in k rank shares
    summed in rank order and the optimizer on the host (vDP N = k; k = 1 for vPP and N = 1): the curve a
    Harmony curve of that arithmetic must equal (check C6)."""
    k = order_shares(wildcards.reference)
    return f"--shares {k} --host-optimizer" if k else ""


def convergence_schedule(wildcards):
    mode = wildcards.mode
    D = PLAN.convergence_minibatch(wildcards.figure, wildcards.model)
    cfg = PLAN.convergence_schedule(wildcards.figure)
    return PLAN.schedule_path(mode, wildcards.model, wildcards.gpus, D, cfg)


def table1_profiles(wildcards):
    """Measured profiles of the four Table 1 models (none when the scale searches analytic profiles)."""
    if PLAN.grid("table1").get("profiles") == "analytic":
        return []
    return [f"{R}/table1/profiles/{m}.profile.json" for m in PLAN.table_models()]


def table1_source(wildcards, input):
    if not input.profiles:
        return "--analytic"
    return f"--profiles {parent_dir(input.profiles[0])}"


def figure_caption(wildcards):
    return f"{REPORT}/{wildcards.figure}.rst"


HARDWARE = PLAN.hardware
GPUS_PRESENT = PLAN.gpus_present
PROFILE_DEVICE = "cuda:0" if DEVICE == "cuda" else DEVICE

# On the CPU a matmul's rounding depends on how many threads split it, and Harmony's workers each get the
# host's cores shared by N: so the convergence curves there (every Harmony mode and plain PyTorch) run on one
# intra-op thread each, and a Harmony curve equals its own-order reference bit for bit, as on the GPU, where
# the host's threads do not enter the arithmetic (tests/test_runtime.py's bitwise test matches threads too).
CONVERGENCE_RUN_THREADS = "--worker-threads 1" if DEVICE == "cpu" else ""
CONVERGENCE_REFERENCE_THREADS = "--threads 1" if DEVICE == "cpu" else ""


def baseline_ubatch(wildcards):
    """`--ubatch` list the baseline searches (its best setting): powers of two up to D/N at the paper and
    large scales; u = 4 at smoke scale (experiments/scales.yaml `baseline_ubatch`)."""
    return PLAN.baseline_ubatch_args(int(wildcards.minibatch), int(wildcards.gpus), wildcards.baseline,
                                     wildcards.model)


def baseline_max_iter(wildcards):
    """`--max-iter-s` of the scale (experiments/scales.yaml `baseline_max_iter_s`): a candidate slower per
    iteration stops after one measured iteration and the search goes no lower; absent: every iteration."""
    limit = S.get("baseline_max_iter_s")
    return f"--max-iter-s {limit}" if limit else ""


def baseline_cap(wildcards):
    """`resident` is the no-cap ceiling; every other baseline runs under the scale's cap."""
    return "" if wildcards.baseline == "resident" else CAP


def experiment_file(wildcards):
    return f"{config['experiments_dir']}/{wildcards.figure}.yaml"


def figure_caption_text(wildcards):
    exp = PLAN.experiments[wildcards.figure]
    return exp.get("title", wildcards.figure)
