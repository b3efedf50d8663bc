# Dataset sources -> graph store.  A heterogeneous dataset (homogenize: true) is
# then turned into one homogeneous id space (DistDGLv2 §4.1.1).


rule prepare:
    output:
        directory(f"{R}/data/{{dataset}}/graph"),
    log:
        f"{R}/logs/prepare/{{dataset}}.log",
    benchmark:
        f"{R}/benchmarks/prepare/{{dataset}}.tsv",
    params:
        args=prepare_args,
    threads: 2
    resources:
        mem_mb=8000,
        runtime=120,
    conda:
        "../envs/gnnflow.yaml"
    shell:
        "{GNNFLOW} prepare {params.args} --out {output} > {log} 2>&1"


rule homogenize:
    input:
        f"{R}/data/{{dataset}}/graph",
    output:
        directory(f"{R}/data/{{dataset}}/homogeneous"),
    log:
        f"{R}/logs/homogenize/{{dataset}}.log",
    benchmark:
        f"{R}/benchmarks/homogenize/{{dataset}}.tsv",
    resources:
        mem_mb=8000,
        runtime=60,
    conda:
        "../envs/gnnflow.yaml"
    shell:
        "{GNNFLOW} homogenize {input} --out {output} > {log} 2>&1"
