# Run records -> one tidy table -> per-run summary, paper-style figures and the paper's scorecard.


rule aggregate:
    input:
        lambda w: run_records(kept_runs()),
    output:
        parquet=f"{R}/table.parquet",
        csv=f"{R}/table.csv",
    log:
        f"{R}/logs/aggregate.log",
    benchmark:
        f"{R}/benchmarks/aggregate.tsv",
    params:
        runs=lambda w, input: " ".join(os.path.dirname(p) for p in input),
    conda:
        "../envs/gnnflow.yaml"
    shell:
        "{GNNFLOW} results aggregate {params.runs} --out {output.parquet} > {log} 2>&1"


rule summarize:
    input:
        f"{R}/table.parquet",
    output:
        summary=report(f"{R}/summary.csv", caption="../reports/summary.rst", category="1. Results",
                       labels={"table": "summary (CSV): every per-run figure"}),
        results=f"{R}/results.csv",
        results_html=report(f"{R}/results.html", caption="../reports/results.rst", category="1. Results",
                            labels={"table": "results: one row per run"}),
    log:
        f"{R}/logs/summarize.log",
    benchmark:
        f"{R}/benchmarks/summarize.tsv",
    conda:
        "../envs/gnnflow.yaml"
    shell:
        "{GNNFLOW} results summarize {input} --out {output.summary} --results-out {output.results} --results-out {output.results_html} > {log} 2>&1"


rule plot:
    input:
        table=f"{R}/table.parquet",
        bench=lambda w: [f"{R}/bench/{b}.json" for b in FIGURES[w.figure].get("options", {}).get("benchmarks", [])],
    output:
        report(
            f"{R}/figures/{{figure}}.png",
            caption="../reports/figure.rst",
            category="2. Figures",
            labels=lambda w: {"figure": figure_title(FIGURES[w.figure]), "file": f"{w.figure}.png"},
        ),
    log:
        f"{R}/logs/plot/{{figure}}.log",
    benchmark:
        f"{R}/benchmarks/plot/{{figure}}.tsv",
    params:
        spec=lambda w: json.dumps({k: v for k, v in FIGURES[w.figure].items() if k != "caption"}),
        caption=lambda w: FIGURES[w.figure].get("caption", ""),
        source=config.get("title", "config/config.yaml"),
    conda:
        "../envs/gnnflow.yaml"
    shell:
        "{GNNFLOW} plot --table {input.table} --spec {params.spec:q} --bench-dir {R}/bench "
        "--out {output} > {log} 2>&1"


rule scorecard:
    input:
        unpack(scorecard_inputs),
    output:
        csv=report(f"{R}/scorecard.csv", caption="../reports/scorecard.rst", category="3. Scorecard"),
        html=report(f"{R}/scorecard.html", caption="../reports/scorecard.rst", category="3. Scorecard"),
    log:
        f"{R}/logs/scorecard.log",
    benchmark:
        f"{R}/benchmarks/scorecard.tsv",
    params:
        tables=scorecard_tables,
        title=config.get("title", "config/config.yaml"),
    conda:
        "../envs/gnnflow.yaml"
    shell:
        "{GNNFLOW} results scorecard {params.tables} --claims {input.claims} --bench-dir {R}/bench "
        "--title {params.title:q} --out {output.csv} --html {output.html} > {log} 2>&1"


rule rule_costs:
    input:
        all_targets(costs=False),
    output:
        csv=f"{R}/rule_costs.csv",
        html=report(f"{R}/rule_costs.html", caption="../reports/rule_costs.rst", category="1. Results",
                    labels={"table": "rule costs: wall time, peak memory and CPU time of each job"}),
    log:
        f"{R}/logs/rule_costs.log",
    params:
        datasets=lambda w: json.dumps({**{d: d for d in DATASETS}, **{r: run.dataset for r, run in RUNS.items()}}),
    conda:
        "../envs/gnnflow.yaml"
    shell:
        "{GNNFLOW} results costs {R}/benchmarks --datasets {params.datasets:q} --out {output.csv} --out {output.html} > {log} 2>&1"
