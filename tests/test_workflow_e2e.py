"""The workflow end to end on a small config: outputs, re-run, targeted re-run, HTML report.

Runs Snakemake in a temporary working directory (``-d``) with
``tests/slurm/config.yaml`` (a single-process and a 2-rank data-parallel run, and
a scorecard over ``tests/slurm/claims.yaml``).  With root and Slurm (marker ``slurm``):
the same config under ``snakemake --profile cluster`` on a single-node cluster, and the
4-rank runs of ``tests/slurm/two-node.yaml`` on a 2-node cluster of simulated hosts
(docs/cluster.md).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SMALL = ROOT / "tests" / "slurm" / "config.yaml"

pytestmark = pytest.mark.slow


def tool_env(**extra: str) -> dict[str, str]:
    """The environment rules run in: no activated environment (this interpreter's bin taken off
    PATH), as a user who runs `.venv/bin/snakemake` directly; rules find gnnflow through the
    interpreter that runs Snakemake, not through PATH."""
    env = dict(os.environ, **extra)
    own = str(Path(sys.executable).parent)
    env["PATH"] = os.pathsep.join(p for p in env.get("PATH", "").split(os.pathsep) if p and p != own)
    env.pop("VIRTUAL_ENV", None)
    return env


def snakemake_cmd(workdir: Path, *args: str, config: Path = SMALL, cores: bool = True) -> list[str]:
    exe = str(Path(sys.executable).parent / "snakemake")
    return [exe, "-s", str(ROOT / "Snakefile"), "-d", str(workdir), "--configfile", str(config),
            *(["--cores", "2"] if cores else []), *args]


def snakemake(workdir: Path, *args: str, timeout: int = 900, env: dict[str, str] | None = None,
              cores: bool = True, config: Path = SMALL) -> subprocess.CompletedProcess:
    return subprocess.run(snakemake_cmd(workdir, *args, config=config, cores=cores), capture_output=True,
                          text=True, timeout=timeout, cwd=ROOT, env=env or tool_env())


def planned_jobs(proc: subprocess.CompletedProcess) -> dict[str, int]:
    """Rule -> count from a dry run's job stats table."""
    jobs = {}
    for line in (proc.stdout + proc.stderr).splitlines():
        m = re.match(r"^(\w+)\s+(\d+)$", line.strip())
        if m and m.group(1) != "total":
            jobs[m.group(1)] = int(m.group(2))
    return jobs


@pytest.fixture(scope="module")
def local_run(tmp_path_factory):
    workdir = tmp_path_factory.mktemp("wf-local")
    proc = snakemake(workdir)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    return workdir


def test_outputs(local_run):
    import pandas as pd

    results = local_run / "results"
    table = pd.read_parquet(results / "table.parquet")
    assert set(table["strategy"]) == {"single", "data"}
    assert (results / "table.csv").exists()
    assert set(table.loc[table["strategy"] == "data", "rank"]) == {0, 1}
    assert (results / "summary.csv").exists()
    png = results / "figures" / "accuracy.png"
    assert png.exists() and png.stat().st_size > 5000
    card = pd.read_csv(results / "scorecard.csv")
    assert list(card["claim"]) == ["accuracy", "features", "speedup"]  # every claim listed, with a verdict
    assert set(card["verdict (here)"]) <= {"reproduced", "same direction", "not reproduced", "not measurable here"}
    assert card.set_index("claim").at["speedup", "verdict (here)"] == "not measurable here"


def test_rerun_does_nothing(local_run):
    proc = snakemake(local_run, "-n")
    assert proc.returncode == 0
    assert "Nothing to be done" in proc.stdout + proc.stderr


def test_deleting_a_partition_reruns_exactly_downstream(local_run):
    part = local_run / "results" / "data" / "tinysyn" / "partitions" / "metis2"
    saved = part.with_name("metis2.saved")
    shutil.copytree(part, saved)
    shutil.rmtree(part)
    try:
        jobs = planned_jobs(snakemake(local_run, "-n"))
        assert jobs == {"partition": 1, "partition_report": 1, "train_ranks": 1, "aggregate": 1,
                        "summarize": 1, "plot": 1, "scorecard": 1, "rule_costs": 1, "all": 1}, jobs
    finally:
        shutil.rmtree(part, ignore_errors=True)
        saved.rename(part)


def test_cluster_jobs_ask_for_what_the_runs_preflight_estimated(local_run):
    """Planned for SLURM after the runs, each training job asks for what the memory preflight of
    its own run logged ("... N MiB on this host", from the store and book it trained on) plus the
    stated margin."""
    from gnnflow.workflow import MEM_MARGIN

    proc = snakemake(local_run, "-n", "--forcerun", "train", "train_ranks", *CLUSTER_ARGS[:2])
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    asked = {}
    for block in re.split(r"\nrule (?=train(?:_ranks)?:)", proc.stdout)[1:]:
        run = re.search(r"wildcards: run=(\S+)", block).group(1)
        asked[run] = int(re.search(r"mem_mb=(\d+)", block).group(1))
    assert set(asked) == {"ref-single-tinysyn-sage-w1", "dp-data-tinysyn-sage-w2-metis2"}
    for run, mem_mb in asked.items():
        log = (local_run / "results" / "logs" / "train" / f"{run}.log").read_text()
        host_mib = int(re.search(r"memory estimate: .*; (\d+) MiB on this host", log).group(1))
        assert abs(mem_mb - host_mib * (1 + MEM_MARGIN)) <= 2, (run, mem_mb, host_mib)


def _nonblank(png: Path) -> float:
    from PIL import Image, ImageStat

    img = Image.open(png).convert("L")
    return ImageStat.Stat(img).stddev[0]


def _report_table(page, report: Path, label: str) -> list[list[str]]:
    """The rows of the table the report's "1. Results" entry ``label`` shows, header first."""
    page.goto(f"file://{report}")
    page.get_by_text("1. Results", exact=True).click()
    page.locator("tr", has_text=label).first.locator("a[iconname=eye]").click()
    table = page.frame_locator("iframe").first.locator("table#table")
    table.wait_for(state="visible", timeout=20000)
    return [[c.strip() for c in row.split("\t")] for row in table.inner_text().splitlines() if row.strip()]


def test_html_report_shows_figures(local_run, tmp_path):
    report = local_run / "results" / "report.html"
    proc = snakemake(local_run, "--report", str(report))
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    sync_playwright = pytest.importorskip("playwright.sync_api").sync_playwright
    if chromium is None:
        pytest.skip("no Chromium installed (scripts/setup-env.sh --test installs Debian's)")
    shot, card_shot = tmp_path / "figure.png", tmp_path / "scorecard-figure.png"
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=chromium, args=[
            "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
            "--disable-background-networking", "--disable-component-update", "--disable-sync"])
        try:
            page = browser.new_page(viewport={"width": 1280, "height": 1000})
            # the results first: the results table (one row per run) and what each rule cost
            page.goto(f"file://{report}")
            page.get_by_text("1. Results", exact=True).click()
            labels = page.locator("nav table").inner_text()
            assert labels.index("results: one row per run") < labels.index("rule costs")
            results = _report_table(page, report, "results: one row per run")
            assert results[0][:2] == ["strategy", "run"] and "peak memory per rank (MiB)" in results[0]
            assert sorted(r[0] for r in results[1:]) == ["data", "single"]
            costs = _report_table(page, report, "rule costs")
            assert costs[0][:3] == ["rule", "dataset", "target"]
            ran = {(r[0], r[2]) for r in costs[1:]}
            assert {("prepare", "tinysyn"), ("partition", "tinysyn.metis2"), ("train", "ref-single-tinysyn-sage-w1"),
                    ("train", "dp-data-tinysyn-sage-w2-metis2"), ("plot", "accuracy")} <= ran, ran
            assert all(float(r[3]) > 0 for r in costs[1:])  # every job's wall time measured
            page.goto(f"file://{report}")
            page.get_by_text("2. Figures", exact=True).click()
            page.locator("tr", has_text="accuracy.png").first.locator("a[iconname=eye]").click()
            figure = page.locator("img[src^='data:image/png']").first
            figure.wait_for(state="visible", timeout=20000)
            box = figure.bounding_box()
            assert box is not None and box["width"] > 300 and box["height"] > 200
            figure.screenshot(path=str(shot))
            # the scorecard page: every claim with its verdict, and its figures drawn
            page.goto(f"file://{report}")
            page.get_by_text("3. Scorecard", exact=True).click()
            page.locator("tr", has_text="scorecard.html").first.locator("a[iconname=eye]").click()
            card = page.frame_locator("iframe").first
            for claim in ("accuracy", "features", "speedup"):
                assert card.locator(f"h2#{claim}").is_visible()
            figures = card.locator("img.claim")
            assert figures.count() == 3  # a figure per measured claim (speedup: context only)
            for i in range(figures.count()):
                figures.nth(i).scroll_into_view_if_needed()
                box = figures.nth(i).bounding_box()
                assert box is not None and box["width"] > 300 and box["height"] > 100
            figures.first.screenshot(path=str(card_shot))
        finally:
            browser.close()
    assert _nonblank(shot) > 5.0  # the plotted figure, not an empty frame
    assert _nonblank(card_shot) > 5.0


SLURM_TOOLS = ("munged", "slurmctld", "slurmd", "sbatch", "srun", "squeue", "sinfo")
CLUSTER_SH = ROOT / "tests" / "slurm" / "cluster.sh"
#: `snakemake --profile cluster` as on a cluster without an accounting daemon (docs/cluster.md)
CLUSTER_ARGS = ("--profile", "cluster", "--slurm-status-command", "squeue", "--slurm-no-account",
                "--slurm-init-seconds-before-status-checks", "2")


def _skip_without_slurm() -> None:
    missing = [t for t in SLURM_TOOLS if shutil.which(t) is None]
    if missing or os.geteuid() != 0:
        pytest.skip(f"needs root and Slurm ({', '.join(missing) or 'not root'}); scripts/setup-env.sh --test installs it")


@pytest.fixture
def slurm_state(tmp_path):
    """A short directory for the test cluster's state: slurmstepd makes a Unix socket per job
    step in its spool there, and a socket path holds 108 bytes at most (a deep ``tmp_path``,
    e.g. a pytest-xdist worker's, is too long: the step fails and its job is requeued for
    ever).  Its logs are kept in ``tmp_path / "slurm-logs"``."""
    import tempfile

    state = Path(tempfile.mkdtemp(prefix="gfslurm-", dir="/tmp"))
    try:
        yield state
    finally:
        if (state / "log").is_dir():
            shutil.copytree(state / "log", tmp_path / "slurm-logs", dirs_exist_ok=True)
        shutil.rmtree(state, ignore_errors=True)


def cluster_sh(action: str, state: Path, *args: str) -> None:
    done = subprocess.run([str(CLUSTER_SH), action, str(state), *args], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr


@pytest.mark.slurm
def test_slurm_cluster_run_equals_local_run(local_run, tmp_path, slurm_state):
    """`snakemake --profile cluster` on a real single-node Slurm cluster (munge +
    slurmctld + slurmd on localhost, no accounting daemon), with the 2-rank
    training rule started by srun; the records equal the local run's."""
    import pandas as pd

    _skip_without_slurm()
    state = slurm_state
    cluster_sh("start", state)
    try:
        env = tool_env(SLURM_CONF=str(state / "slurm.conf"))
        work = tmp_path / "wf"
        proc = snakemake(work, *CLUSTER_ARGS, "--jobs", "2", env=env, cores=False, timeout=1200)
        assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    finally:
        cluster_sh("stop", state)
    log = (work / "results" / "logs" / "train" / "dp-data-tinysyn-sage-w2-metis2.log").read_text()
    assert "started by srun" in log  # ranks came from srun, not the local launcher
    keys = ["run_id", "epoch", "rank"]
    cols = ["loss", "train_acc", "val_acc", "test_acc", "sampled_edges", "features_loaded"]
    local = pd.read_parquet(local_run / "results" / "table.parquet").sort_values(keys).reset_index(drop=True)
    slurm = pd.read_parquet(work / "results" / "table.parquet").sort_values(keys).reset_index(drop=True)
    assert local[keys].equals(slurm[keys])
    pd.testing.assert_frame_equal(local[cols], slurm[cols], rtol=1e-4, atol=1e-6)


# ------------------------------------------------------------------------------- 2-node Slurm
TWO_NODE = ROOT / "tests" / "slurm" / "two-node.yaml"

# The launch paths srun can take: our ranks (every strategy of ours starts its ranks through
# the same srun path of runtime/launch.py, and tests/test_multihost.py runs each strategy
# across two hosts) and the DistDGL peer's (its servers and trainers are started its own way).
SPANNING_STRATEGIES = ("data", "distdgl")


def spanning_runs() -> list[str]:
    """The 4-rank runs of ``TWO_NODE``, one per strategy of ``SPANNING_STRATEGIES``."""
    import yaml

    from gnnflow.workflow import expand_runs, validate_config

    config = validate_config(yaml.safe_load(TWO_NODE.read_text()))
    runs = [r for r in expand_runs(config) if r.workers == 4 and r.strategy in SPANNING_STRATEGIES]
    assert sorted(r.strategy for r in runs) == sorted(SPANNING_STRATEGIES), runs
    return [r.name for r in runs]


def run_targets(runs: list[str]) -> list[str]:
    return [f"results/runs/{name}/records.jsonl" for name in runs]


def rank_hosts(log: str) -> dict[int, str]:
    """Global rank -> host, from the lines of ranks started by srun in a training log."""
    found = re.findall(r"rank (\d+)/\d+ on host (\S+) \(local rank \d+\) started by srun", log)
    return {int(rank): host for rank, host in found}


@pytest.mark.slurm
def test_two_node_slurm_runs_equal_local_runs(tmp_path, slurm_state):
    """`snakemake --profile cluster` on a real 2-node Slurm cluster: two simulated hosts
    (tests/simhosts.py: network namespaces, each with its address and hostname) running
    a slurmd each, slurmctld and Snakemake on the first, the working directory shared,
    starting from a local run's graph and partitions.  The 4-rank data and DistDGL runs of
    ``tests/slurm/two-node.yaml`` (``SPANNING_STRATEGIES``) are started by srun with ranks 0,1 on
    simhost0 and 2,3 on simhost1 (each node has this machine's cores, so a job of 4
    one-CPU tasks takes both nodes), and their records equal the local runs', the DistDGL
    peer's included (seeded sampling requests and blocks built with one thread:
    docs/cluster.md)."""
    from conftest import unmeasured_records
    from simhosts import SimulatedHosts, available

    _skip_without_slurm()
    if (why := available()) is not None:
        pytest.skip(why)
    runs = spanning_runs()
    targets = run_targets(runs)
    local = tmp_path / "local"
    proc = snakemake(local, "--until", *targets, config=TWO_NODE)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    work, state = tmp_path / "wf", slurm_state
    # the same graph and partitions (copied with their times, so Snakemake keeps them): only the
    # training jobs go through Slurm (the single-node test runs every other rule there)
    shutil.copytree(local / "results" / "data", work / "results" / "data")
    hosts = SimulatedHosts(2, tmp_path / "hosts")
    started: list[subprocess.Popen] = []
    try:
        cluster_sh("conf", state, *[f"{n}={a}" for n, a in zip(hosts.names, hosts.addresses, strict=True)])
        conf = str(state / "slurm.conf")
        daemons = [(0, ["slurmctld", "-D", "-f", conf])] + [
            (k, ["slurmd", "-D", "-f", conf, "-N", name]) for k, name in enumerate(hosts.names)]
        for k, cmd in daemons:
            started.append(hosts.popen(k, cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
        up = hosts.run(0, [str(CLUSTER_SH), "wait", str(state), "2"], capture_output=True, text=True, timeout=120)
        assert up.returncode == 0, up.stderr
        cmd = snakemake_cmd(work, *CLUSTER_ARGS, "--jobs", "2", "--until", *targets, config=TWO_NODE, cores=False)
        proc = hosts.run(0, cmd, capture_output=True, text=True, timeout=1500, cwd=ROOT,
                         env=tool_env(SLURM_CONF=conf))
        assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    finally:
        try:
            cluster_sh("stop", state)
        finally:
            hosts.close()  # whatever is left (daemons, job steps) dies with its host
            for p in started:
                p.wait(timeout=30)
    for name in runs:
        log = (work / "results" / "logs" / "train" / f"{name}.log").read_text()
        assert rank_hosts(log) == {0: "simhost0", 1: "simhost0", 2: "simhost1", 3: "simhost1"}, (name, log[-3000:])
        got, want = (unmeasured_records(w / "results" / "runs" / name) for w in (work, local))
        assert got == want, name
