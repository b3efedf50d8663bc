# Presampling (GSplit §4) and partitioning (METIS multi-constraint, two-level,
# ParMETIS, GSplit's weighted variants, MG-GCN's 1D) with quality reports.


rule presample:
    input:
        lambda w: graph_dir(w.dataset),
    output:
        f"{R}/data/{{dataset}}/presample.npz",
    log:
        f"{R}/logs/presample/{{dataset}}.log",
    benchmark:
        f"{R}/benchmarks/presample/{{dataset}}.tsv",
    params:
        args=presample_args,
    threads: 1
    resources:
        mem_mb=8000,
        runtime=60,
    conda:
        "../envs/gnnflow.yaml"
    shell:
        "{GNNFLOW} presample {input} {params.args} --out {output} > {log} 2>&1"


rule partition:
    input:
        unpack(partition_inputs),
    output:
        directory(f"{R}/data/{{dataset}}/partitions/{{partition}}"),
    log:
        f"{R}/logs/partition/{{dataset}}.{{partition}}.log",
    benchmark:
        f"{R}/benchmarks/partition/{{dataset}}.{{partition}}.tsv",
    params:
        args=partition_args,
    threads: 2
    resources:
        mem_mb=16000,
        runtime=120,
        tasks=lambda w: PARTITIONS[w.partition].get("options", {}).get("mpi_ranks", 1),
    conda:
        "../envs/gnnflow.yaml"
    shell:
        "{GNNFLOW} partition {input.graph} {params.args} --out {output} > {log} 2>&1"


rule partition_report:
    input:
        f"{R}/data/{{dataset}}/partitions/{{partition}}",
    output:
        f"{R}/data/{{dataset}}/partitions/{{partition}}.report.json",
    log:
        f"{R}/logs/partition/{{dataset}}.{{partition}}.report.log",
    benchmark:
        f"{R}/benchmarks/partition/{{dataset}}.{{partition}}.report.tsv",
    resources:
        mem_mb=8000,
        runtime=30,
    conda:
        "../envs/gnnflow.yaml"
    shell:
        "{GNNFLOW} partition-report {input} --json > {output} 2> {log}"
