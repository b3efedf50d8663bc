# Benchmarks: each prints ratios against a peer measured side by side (JSON kept).


rule bench:
    output:
        f"{R}/bench/{{bench}}.json",
    log:
        f"{R}/logs/bench/{{bench}}.log",
    benchmark:
        f"{R}/benchmarks/bench/{{bench}}.tsv",
    params:
        name=lambda w: BENCHMARKS[w.bench]["bench"],
        args=lambda w: cli_options(BENCHMARKS[w.bench].get("args")),
    threads: 2
    resources:
        mem_mb=16000,
        runtime=60,
    conda:
        "../envs/gnnflow.yaml"
    shell:
        "{GNNFLOW} bench {params.name} --json {params.args} > {output} 2> {log}"
