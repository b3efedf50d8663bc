# Run records -> one tidy table -> per-run summary, paper-style figures and the paper's scorecard.


rule aggregate:
    input:
        run_records(),
    output:
        parquet=f"{R}/table.parquet",
        csv=f"{R}/table.csv",
    log:
        f"{R}/logs/aggregate.log",
    params:
        runs=lambda w, input: " ".join(os.path.dirname(p) for p in input),
    conda:
        "../envs/gnnflow.yaml"
    shell:
        "gnnflow results aggregate {params.runs} --out {output.parquet} > {log} 2>&1"


rule summarize:
    input:
        f"{R}/table.parquet",
    output:
        report(f"{R}/summary.csv", caption="../reports/summary.rst", category="Tables"),
    log:
        f"{R}/logs/summarize.log",
    conda:
        "../envs/gnnflow.yaml"
    shell:
        "gnnflow results summarize {input} --out {output} > {log} 2>&1"


rule plot:
    input:
        table=f"{R}/table.parquet",
        bench=lambda w: [f"{R}/bench/{b}.json" for b in FIGURES[w.figure].get("options", {}).get("benchmarks", [])],
    output:
        report(
            f"{R}/figures/{{figure}}.png",
            caption="../reports/figure.rst",
            category="Figures",
            labels=lambda w: {"figure": w.figure, "kind": FIGURES[w.figure]["kind"]},
        ),
    log:
        f"{R}/logs/plot/{{figure}}.log",
    params:
        spec=lambda w: json.dumps({k: v for k, v in FIGURES[w.figure].items() if k != "caption"}),
        caption=lambda w: FIGURES[w.figure].get("caption", ""),
        source=config.get("title", "config/config.yaml"),
        runs=lambda w: " ".join(os.path.dirname(p) for p in figure_runs(w)),
    conda:
        "../envs/gnnflow.yaml"
    shell:
        "gnnflow plot --table {input.table} --spec {params.spec:q} --bench-dir {R}/bench "
        "--out {output} > {log} 2>&1"


rule scorecard:
    input:
        unpack(scorecard_inputs),
    output:
        csv=report(f"{R}/scorecard.csv", caption="../reports/scorecard.rst", category="Scorecard"),
        html=report(f"{R}/scorecard.html", caption="../reports/scorecard.rst", category="Scorecard"),
    log:
        f"{R}/logs/scorecard.log",
    params:
        tables=scorecard_tables,
        title=config.get("title", "config/config.yaml"),
    conda:
        "../envs/gnnflow.yaml"
    shell:
        "gnnflow results scorecard {params.tables} --claims {input.claims} --bench-dir {R}/bench "
        "--title {params.title:q} --out {output.csv} --html {output.html} > {log} 2>&1"
