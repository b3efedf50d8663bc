# Training: one job per run of the config's sweeps (strategy x dataset x model x
# workers x parameters).  A run's training settings are written to a YAML file
# (rule run_settings) that `gnnflow train --config` reads, so every setting of
# gnnflow.config.TrainConfig reaches the ranks as the config gives it.  Multi-rank
# runs (rule train_ranks) start their ranks with srun inside a SLURM job (the
# cluster profile sets resource mpi="srun") and with gnnflow's local launcher
# otherwise; single-rank runs are plain jobs.


rule run_settings:
    output:
        f"{R}/settings/{{run}}.yaml",
    params:
        settings=lambda w: RUNS[w.run].train_settings(),
    run:
        write_settings(RUNS[wildcards.run], output[0])


rule train:
    input:
        unpack(train_inputs),
        settings=f"{R}/settings/{{run}}.yaml",
    output:
        f"{R}/runs/{{run}}/records.jsonl",
    log:
        f"{R}/logs/train/{{run}}.log",
    benchmark:
        f"{R}/benchmarks/train/{{run}}.tsv",
    wildcard_constraints:
        run=runs_matching(lambda run: run.workers == 1),
    params:
        partition=lambda w, input: f"--partition {input.partition}" if "partition" in input.keys() else "",
        launch=launch_prefix,
        out=lambda w: f"{R}/runs/{w.run}",
    threads: 1
    resources:
        tasks=1,
        mem_mb=train_mem_mb,
        runtime=train_runtime,
    conda:
        "../envs/gnnflow.yaml"
    shell:
        "{params.launch} {GNNFLOW} train --config {input.settings} --graph {input.graph} {params.partition} "
        "--out {params.out} > {log} 2>&1"


use rule train as train_ranks with:
    wildcard_constraints:
        run=runs_matching(lambda run: run.workers > 1),
    threads: lambda w: RUNS[w.run].workers
    resources:
        tasks=lambda w: RUNS[w.run].workers,
        mem_mb=train_mem_mb,
        runtime=train_runtime,
