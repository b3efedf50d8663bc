# gnnflow: dataset -> homogenize -> partition -> presample -> train -> tables, figures, report.
# Every rule is a thin call of the `gnnflow` command; the logic lives in src/gnnflow.
#
#   snakemake --profile profiles/default                 # the default workflow, locally
#   snakemake --profile cluster                          # the same on a SLURM cluster
#   snakemake --profile profiles/default --configfile config/paper/gsplit.yaml
#   snakemake --report results/report.html               # HTML report with every figure
from snakemake.utils import min_version

min_version("9.0")


configfile: "config/config.yaml"


report: "workflow/report/workflow.rst"


include: "rules/common.smk"
include: "rules/prepare.smk"
include: "rules/partition.smk"
include: "rules/train.smk"
include: "rules/bench.smk"
include: "rules/results.smk"
include: "rules/advise.smk"


localrules:
    all,
    run_settings,
    rule_costs,
    prepare,
    aggregate,
    summarize,
    plot,
    scorecard,
    advise_settings,
    advice_report,


rule all:
    input:
        all_targets(),
