# Config validation and the small functions that turn config into target paths.
import json
import os
import re
import sys

from gnnflow.config import cli_options
from gnnflow.plots.titles import figure_title
from gnnflow.workflow import (
    advice_groups,
    advice_settings,
    expand_runs,
    job_mem_mb,
    job_runtime_min,
    keep_run,
    validate_config,
    write_settings,
)

os.environ.setdefault("DGLBACKEND", "pytorch")
os.environ.setdefault("OUTDATED_IGNORE", "1")

config = validate_config(config)
R = config.get("results", "results")
RUNS = {run.name: run for run in expand_runs(config)}
DATASETS = config["datasets"]
PARTITIONS = config.get("partitions", {})
BENCHMARKS = {b["name"]: b for b in config.get("benchmarks", [])}
FIGURES = {f["name"]: f for f in config.get("figures", [])}
SCORECARD = config.get("scorecard")  # a paper config's claims file and other runs' tables
ADVICE = advice_groups(config)  # (dataset, workers) -> the partition its advice reads (or None)
TOP_K = (config.get("advise") or {}).get("top_k") if ADVICE else None
#: the gnnflow command of the interpreter that runs Snakemake: rules need no activated environment
GNNFLOW = f"{sys.executable} -m gnnflow.cli"


def claims_path():
    """The claims file: relative paths resolve against the working directory, else the repository
    (config/paper/*.claims.yaml ship with the workflow, whatever -d says)."""
    path = SCORECARD["claims"]
    if os.path.isabs(path) or os.path.exists(path):
        return path
    return os.path.join(workflow.basedir, path)
PRESAMPLED = {"node", "presample"}

wildcard_constraints:
    dataset="[A-Za-z0-9_-]+",
    partition="[A-Za-z0-9_-]+",
    run="[A-Za-z0-9_.-]+",
    bench="[A-Za-z0-9_.-]+",
    # only the config's figures: figures/advice.png is the advice_report rule's
    figure="|".join(re.escape(name) for name in FIGURES) or "(?!)",


def graph_dir(dataset):
    """The graph store every later stage reads (homogenized when the dataset asks)."""
    stage = "homogeneous" if DATASETS[dataset].get("homogenize") else "graph"
    return f"{R}/data/{dataset}/{stage}"


def prepare_args(wildcards):
    spec = DATASETS[wildcards.dataset]
    args = [spec["source"]]
    if spec.get("name"):
        args.append(spec["name"])
    if spec.get("raw_dir"):
        args.append(f"--raw-dir {spec['raw_dir']}")
    args.append(cli_options(spec.get("options")))
    return " ".join(a for a in args if a)


def partition_inputs(wildcards):
    spec = PARTITIONS[wildcards.partition]
    inputs = {"graph": graph_dir(wildcards.dataset)}
    if spec["method"] in PRESAMPLED:
        inputs["presample"] = f"{R}/data/{wildcards.dataset}/presample.npz"
    return inputs


def partition_args(wildcards, input):
    spec = PARTITIONS[wildcards.partition]
    args = [f"--method {spec['method']}", f"--parts {spec['parts']}"]
    if spec.get("levels"):
        args.append(f"--levels {spec['levels']}")
    if "presample" in input.keys():
        args.append(f"--presample {input.presample}")
    args.append(cli_options(spec.get("options")))
    return " ".join(a for a in args if a)


def presample_args(wildcards):
    spec = config.get("presample", {})
    args = []
    if "fanouts" in spec:
        args.append("--fanouts " + ",".join(map(str, spec["fanouts"])))
    if "batch_size" in spec:
        args.append(f"--batch-size {spec['batch_size']}")
    if "epochs" in spec:
        args.append(f"--epochs {spec['epochs']}")
    return " ".join(args)


def train_inputs(wildcards):
    run = RUNS[wildcards.run]
    inputs = {"graph": graph_dir(run.dataset)}
    if run.partition:
        inputs["partition"] = f"{R}/data/{run.dataset}/partitions/{run.partition}"
    return inputs


def runs_matching(predicate):
    """A wildcard regex matching exactly the names of the runs the predicate selects."""
    import re

    names = [re.escape(name) for name, run in RUNS.items() if predicate(run)]
    return "|".join(names) if names else "(?!)"


def launch_prefix(wildcards, resources):
    """srun inside a SLURM job (resource mpi set by the cluster profile), local launcher otherwise."""
    mpi = resources.get("mpi", "") if hasattr(resources, "get") else getattr(resources, "mpi", "")
    if mpi:
        return f"{mpi} --ntasks={resources.tasks} --kill-on-bad-exit=1"
    return ""


def run_records(runs=None):
    names = runs if runs is not None else list(RUNS)
    return [f"{R}/runs/{name}/records.jsonl" for name in names]


def kept_runs():
    """The runs the workflow trains: all of them, or with `advise.top_k` the single-process runs
    and the distributed runs of the strategies their advice ranks in the top K (read from the
    advise checkpoint, so only inside input functions)."""
    if not TOP_K:
        return list(RUNS)
    keep = []
    for name, run in RUNS.items():
        key = (run.dataset, run.workers)
        advice = checkpoints.advise.get(dataset=run.dataset, workers=run.workers).output[0] if key in ADVICE else None
        if keep_run(run, advice, TOP_K):
            keep.append(name)
    return keep


def advice_files():
    return [f"{R}/advise/{d}-w{w}.json" for d, w in sorted(ADVICE)]


def advise_inputs(wildcards):
    key = (wildcards.dataset, int(wildcards.workers))
    inputs = {"graph": graph_dir(wildcards.dataset), "settings": f"{R}/advise/{wildcards.dataset}-w{wildcards.workers}.settings.yaml",
              "calibration": (config.get("advise") or {}).get("calibration") or f"{R}/advise/calibration.json"}
    if ADVICE.get(key):
        inputs["partition"] = f"{R}/data/{wildcards.dataset}/partitions/{ADVICE[key]}"
    return inputs


def write_yaml(data, path):
    import yaml

    from gnnflow.io import atomic_file

    with atomic_file(path) as tmp:
        tmp.write_text(yaml.safe_dump(data, sort_keys=False))


def scorecard_inputs(wildcards):
    """The table, the claims file, the benchmarks its claims read, and other runs' tables."""
    from gnnflow.results.claims import load_claims

    claims = load_claims(claims_path())  # a malformed claims file stops the DAG with its key
    return {"table": f"{R}/table.parquet", "claims": claims_path(),
            "bench": [f"{R}/bench/{b}.json" for b in sorted(claims.benches())],
            "others": list(SCORECARD.get("tables", {}).values())}


def scorecard_tables(wildcards, input):
    """`LABEL=TABLE` arguments: this run under its variant's name, then the others."""
    label = config.get("variant") or "here"
    others = " ".join(f"{k}={v}" for k, v in SCORECARD.get("tables", {}).items())
    return f"{label}={input.table} {others}".strip()


def used_partitions():
    return sorted({(r.dataset, r.partition) for r in RUNS.values() if r.partition})


def partition_reports():
    return [f"{R}/data/{d}/partitions/{p}.report.json" for d, p in used_partitions()]


def all_targets(costs=True):
    """Everything a run keeps: graph stores and partition books are products too, so
    deleting one re-creates it and re-runs exactly what depends on it; last the cost of each
    rule (read from the benchmark records the others left)."""
    targets = [graph_dir(d) for d in sorted({r.dataset for r in RUNS.values()})]
    targets += [f"{R}/data/{d}/partitions/{p}" for d, p in used_partitions()]
    targets += [f"{R}/table.parquet", f"{R}/summary.csv", f"{R}/results.csv", f"{R}/results.html"]
    targets += [f"{R}/figures/{name}.png" for name in FIGURES]
    targets += [f"{R}/bench/{name}.json" for name in BENCHMARKS]
    targets += partition_reports()
    if SCORECARD:
        targets += [f"{R}/scorecard.csv", f"{R}/scorecard.html"]
    if ADVICE:
        targets += [f"{R}/advice.md", f"{R}/figures/advice.png"]
    if costs:
        targets += [f"{R}/rule_costs.csv", f"{R}/rule_costs.html"]
    return targets


def train_mem_mb(wildcards):
    """MiB a training job asks for: the memory preflight's estimate of the run plus a margin
    (gnnflow.workflow.job_mem_mb); a run that will not fit stops the workflow here, in one line."""
    run = RUNS[wildcards.run]
    book = f"{R}/data/{run.dataset}/partitions/{run.partition}" if run.partition else None
    return job_mem_mb(run, DATASETS[run.dataset], graph_dir(run.dataset), book)


def train_runtime(wildcards):
    """Minutes a training job asks for: measured by its last execution, else configured."""
    run = RUNS[wildcards.run]
    return job_runtime_min(run, f"{R}/benchmarks/train/{wildcards.run}.tsv", run.runtime)
