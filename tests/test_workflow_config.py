"""Workflow config: schema validation names the key; sweeps expand to named runs; dry runs succeed."""

from __future__ import annotations

import copy
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from gnnflow.errors import ConfigError
from gnnflow.workflow import expand_runs, validate_config

ROOT = Path(__file__).resolve().parents[1]
DEFAULT = yaml.safe_load((ROOT / "config" / "config.yaml").read_text())
PAPER_CONFIGS = sorted(p for p in (ROOT / "config" / "paper").glob("*.yaml") if not p.name.endswith(".claims.yaml"))


def _validate(cfg):
    return validate_config(copy.deepcopy(cfg))


def test_default_config_is_valid_and_runs_every_strategy():
    cfg = _validate(DEFAULT)
    strategies = {r.strategy for r in expand_runs(cfg)}
    assert strategies == {"single", "data", "hec", "distdgl", "split", "p3", "fullbatch", "dgcl"}


@pytest.mark.parametrize(
    "mutate, key",
    [
        (lambda c: c.update(bogus_key=1), "bogus_key"),
        (lambda c: c["train"]["defaults"].update(hidden="wide"), "train.defaults.hidden"),
        (lambda c: c["train"]["sweeps"][0].update(strategy="magic"), "train.sweeps[0].strategy"),
        (lambda c: c["train"]["sweeps"][1].update(workers=0), "train.sweeps[1].workers"),
        (lambda c: c["partitions"]["metis4"].update(method="kahip"), "partitions.metis4.method"),
        (lambda c: c["train"]["sweeps"][1].update(partition="nope"), "train.sweeps[mb].partition"),
        (lambda c: c["train"]["sweeps"][1].update(workers=3), "train.sweeps[mb].workers"),
    ],
)
def test_bad_config_names_the_key(mutate, key):
    cfg = copy.deepcopy(DEFAULT)
    mutate(cfg)
    with pytest.raises(ConfigError) as err:
        _validate(cfg)
    assert key in str(err.value)
    assert "\n" not in str(err.value)


def test_sweep_product_and_readable_names():
    cfg = copy.deepcopy(DEFAULT)
    cfg["train"]["sweeps"] = [
        {"name": "abl", "strategy": ["data", "split"], "dataset": "synthetic", "partition": "metis4",
         "workers": 4, "fanouts": [[10, 10], [5, 5]], "options": {"pipeline": [True, False]}},
    ]
    runs = expand_runs(_validate(cfg))
    assert len(runs) == 2 * 2 * 2
    names = [r.name for r in runs]
    assert len(set(names)) == len(names)
    assert "abl-data-synthetic-sage-w4-metis4-f10x10-pipelineTrue" in names
    run = next(r for r in runs if r.name == "abl-split-synthetic-sage-w4-metis4-f5x5-pipelineFalse")
    settings = run.train_settings()
    assert settings["fanouts"] == [5, 5] and settings["options"] == {"pipeline": False}
    assert not settings.get("force")  # the memory preflight refuses unless the config says so
    cfg["train"]["sweeps"][0]["force"] = True
    forced = expand_runs(_validate(cfg))
    assert all(r.train_settings()["force"] is True for r in forced)


def _snakemake(*args, cwd=ROOT):
    exe = shutil.which("snakemake") or str(Path(sys.executable).parent / "snakemake")
    return subprocess.run([exe, *args], cwd=cwd, capture_output=True, text=True, timeout=300)


def test_dry_run_default_config(tmp_path):
    # results go to a fresh directory: `make run` may have left ./results complete (nothing to do)
    proc = _snakemake("-n", "--profile", "profiles/default", "--config", f"results={tmp_path}/results")
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "train" in proc.stdout


@pytest.mark.parametrize("paper", PAPER_CONFIGS, ids=lambda p: p.stem)
def test_dry_run_paper_configs(paper, tmp_path):
    proc = _snakemake("-n", "--profile", "profiles/default", "--configfile", str(paper),
                      "--config", f"results={tmp_path}/results")
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert f"--claims {ROOT}/config/paper/{paper.stem}.claims.yaml" in proc.stdout or \
        f"--claims config/paper/{paper.stem}.claims.yaml" in proc.stdout  # every paper config ends in its scorecard


def test_scorecard_lists_other_tables_and_refuses_a_bad_claims_file(tmp_path):
    full = tmp_path / "full" / "table.parquet"
    full.parent.mkdir()
    full.touch()
    paper = ROOT / "config" / "paper" / "gsplit.yaml"
    card = f"scorecard={{claims: config/paper/gsplit.claims.yaml, tables: {{full: {full}}}}}"
    proc = _snakemake("-n", "--profile", "profiles/default", "--configfile", str(paper),
                      "--config", f"results={tmp_path}/results", card)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert f"-m gnnflow.cli results scorecard small={tmp_path}/results/table.parquet full={full}" in proc.stdout
    bad = tmp_path / "bad.claims.yaml"
    bad.write_text("paper: x\nclaims:\n  - {id: a, statement: s, where: {ref: T}, paper: {value: 1}, compare: mean}\n")
    proc = _snakemake("-n", "--profile", "profiles/default", "--configfile", str(paper),
                      "--config", f"results={tmp_path}/results", f"scorecard={{claims: {bad}}}")
    assert proc.returncode != 0
    assert f"{bad}: key claims[0].compare" in proc.stdout + proc.stderr


def test_workflow_refuses_bad_config_with_one_message(tmp_path):
    bad = tmp_path / "bad.yaml"
    cfg = copy.deepcopy(DEFAULT)
    cfg["train"]["sweeps"][1]["workers"] = 0
    bad.write_text(yaml.safe_dump(cfg))
    proc = _snakemake("-n", "--profile", "profiles/default", "--configfile", str(bad))
    assert proc.returncode != 0
    assert "train.sweeps[1].workers" in proc.stdout + proc.stderr


def test_cluster_profile_runs_every_multi_rank_run_as_one_srun(tmp_path):
    """Under `--profile cluster` every multi-rank run is one srun of `workers` tasks with no node
    count: every strategy runs across hosts (DistDGL's peer: every rank serves its part on its host;
    dgcl's swap planner: each host's shared memory, rows passed between hosts)."""
    proc = _snakemake("-n", "--profile", "cluster", "--config", f"results={tmp_path}/results")
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    runs = {r.name: r for r in expand_runs(_validate(DEFAULT))}
    seen = {}
    for block in proc.stdout.split("rule train_ranks:")[1:]:
        run = re.search(r"output: \S*runs/([^/]+)/records\.jsonl", block).group(1)
        resources = dict(kv.split("=", 1) for kv in re.search(r"resources: (.*)", block).group(1).split(", "))
        seen[run] = resources
        assert resources["mpi"] == "srun" and resources["tasks"] == str(runs[run].workers), (run, resources)
        assert "nodes" not in resources, (run, resources)
    assert "mb-distdgl-synthetic-sage-w4-metis4" in seen
    assert set(seen) == {n for n, r in runs.items() if r.workers > 1}


def _job_resources(text: str) -> dict[str, dict[str, str]]:
    """run -> resources of every training job in a dry run's output."""
    jobs = {}
    for block in re.split(r"\nrule (?=train(?:_ranks)?:)", text)[1:]:
        run = re.search(r"output: \S*runs/([^/]+)/records\.jsonl", block).group(1)
        jobs[run] = dict(kv.split("=", 1) for kv in re.search(r"resources: (.*)", block).group(1).split(", "))
    return jobs


def test_cluster_jobs_ask_for_the_memory_the_preflight_estimates(tmp_path):
    """Every training job asks SLURM for the memory preflight's estimate of its run plus the
    stated margin (here from the sizes the synthetic dataset will have: nothing is prepared yet),
    so the figure differs per run; a run the preflight refuses stops the dry run, in one line."""
    import math

    from gnnflow.config import TrainConfig
    from gnnflow.strategies.base import strategy_class
    from gnnflow.strategies.memory import MIB, GraphSizes, estimate, host_need
    from gnnflow.workflow import MEM_MARGIN

    proc = _snakemake("-n", "--profile", "cluster", "--config", f"results={tmp_path}/results")
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    jobs = _job_resources(proc.stdout)
    runs = {r.name: r for r in expand_runs(_validate(DEFAULT))}
    assert set(jobs) == set(runs)
    n = 32_768  # gnnflow.data.synthetic.DEFAULTS, which config/config.yaml keeps
    sizes = GraphSizes(num_nodes=n, num_edges=12 * n, feature_dim=32, num_classes=8, num_train=n // 2)
    for name, run in runs.items():
        cls = strategy_class(run.strategy)
        cfg = cls.parse_options(TrainConfig.from_dict({**run.train_settings(), "graph": "g", "partition": None}))
        need = host_need(estimate(cfg, sizes, cls), cls, run.workers)
        assert int(jobs[name]["mem_mb"]) == math.ceil(need / MIB * (1 + MEM_MARGIN)), (name, jobs[name])
    assert len({int(j["mem_mb"]) for j in jobs.values()}) >= 5, jobs  # sized per run, not one constant
    assert int(jobs["mb-distdgl-synthetic-sage-w4-metis4"]["mem_mb"]) > int(
        jobs["ref-single-synthetic-sage-w1-b512"]["mem_mb"])

    exe = shutil.which("snakemake") or str(Path(sys.executable).parent / "snakemake")
    small = subprocess.run([exe, "-n", "--profile", "cluster", "--config", f"results={tmp_path}/results"],
                           cwd=ROOT, capture_output=True, text=True, timeout=300,
                           env=dict(os.environ, GNNFLOW_MEMORY_AVAILABLE_MIB="600"))
    assert small.returncode != 0
    out = small.stdout + small.stderr
    assert re.search(r"run \S+: memory: \w+ with \d rank\(s\) on this host needs about \d+ MiB .* but 600 MiB "
                     r"is available \(GNNFLOW_MEMORY_AVAILABLE_MIB=600\); use fewer workers", out), out[-3000:]
