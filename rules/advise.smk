# Which strategy for which dataset x rank count (gnnflow advise, docs/advise.md): the machine's
# calibration once, one advice per dataset x workers of the distributed runs, and advice.md with
# a figure of predicted vs measured epoch time (the runs' own) in the report.  With
# `advise: {top_k: K}` only the K strategies each advice ranks first are trained (a checkpoint).


rule advise_calibrate:
    input:
        # the strategy probe trains with the advice's settings (the first advice's: all share them)
        settings=[f"{R}/advise/{d}-w{w}.settings.yaml" for d, w in sorted(ADVICE)[:1]],
    output:
        f"{R}/advise/calibration.json",
    log:
        f"{R}/logs/advise/calibrate.log",
    benchmark:
        f"{R}/benchmarks/advise/calibrate.tsv",
    params:
        workers=",".join(str(w) for w in sorted({w for _, w in ADVICE})) or "2",
        probe=lambda w, input: (f"--config {input.settings[0]}" if input.settings else "")
        + ("" if (config.get("advise") or {}).get("strategy_probe", True) else " --no-strategy-probe"),
    threads: 2
    resources:
        mem_mb=4000,
        runtime=60,
    conda:
        "../envs/gnnflow.yaml"
    shell:
        "{GNNFLOW} advise --calibrate --calibration {output} --calibrate-workers {params.workers} {params.probe} "
        "> {log} 2>&1"


rule advise_settings:
    output:
        f"{R}/advise/{{dataset}}-w{{workers}}.settings.yaml",
    params:
        settings=lambda w: advice_settings(config, w.dataset, int(w.workers)),
    run:
        write_yaml(params.settings, output[0])


checkpoint advise:
    input:
        unpack(advise_inputs),
    output:
        f"{R}/advise/{{dataset}}-w{{workers}}.json",
    log:
        f"{R}/logs/advise/{{dataset}}-w{{workers}}.log",
    benchmark:
        f"{R}/benchmarks/advise/{{dataset}}-w{{workers}}.tsv",
    params:
        partition=lambda w, input: f"--partition {input.partition}" if "partition" in input.keys() else "",
        workdir=f"{R}/advise/books",
    threads: 1
    resources:
        mem_mb=8000,
        runtime=30,
    conda:
        "../envs/gnnflow.yaml"
    shell:
        "{GNNFLOW} advise --config {input.settings} --graph {input.graph} {params.partition} "
        "--workers {wildcards.workers} --calibration {input.calibration} --workdir {params.workdir} "
        "--format json --out {output} > {log} 2>&1"


rule advice_report:
    input:
        advice=advice_files(),
        runs=lambda w: run_records(kept_runs()),
    output:
        md=report(f"{R}/advice.md", caption="../reports/advice.rst", category="1. Results",
                  labels={"table": "advice: predicted epoch time and memory per strategy"}),
        figure=report(f"{R}/figures/advice.png", caption="../reports/advice.rst", category="2. Figures",
                      labels={"figure": "advice: predicted vs measured epoch time", "file": "advice.png"}),
    log:
        f"{R}/logs/advise/report.log",
    params:
        runs=lambda w, input: " ".join(os.path.dirname(p) for p in input.runs),
    conda:
        "../envs/gnnflow.yaml"
    shell:
        "{GNNFLOW} advise --report {input.advice} --runs {params.runs} --out {output.md} "
        "--figure {output.figure} > {log} 2>&1"
