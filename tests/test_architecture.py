"""The import structure of ``src/gnnflow``: layers that run one way (docs/architecture.md).

Every import is read from the source (module level and inside functions alike: a function-level
import is a dependency too), so a cycle or an upward import fails here, naming the files.
"""

from __future__ import annotations

import ast
from collections import defaultdict
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src"
PACKAGE = SRC / "gnnflow"

#: the intended layers, bottom first.  A unit (a package, or a module directly under gnnflow/)
#: may import units of lower layers only; units of one layer do not import each other.
LAYERS: list[list[str]] = [
    ["gnnflow", "errors"],
    ["io", "options"],
    ["config"],
    ["results"],
    ["sampling"],
    ["data", "nn"],
    ["partition"],
    ["runtime"],
    ["comm"],
    ["strategies"],
    ["strategies.minibatch", "strategies.fullbatch"],
    ["strategies.split", "strategies.hec"],
    ["strategies.verify"],
    ["plots"],
    ["advise"],
    ["bench"],
    ["workflow"],
    ["cli"],
]
MAX_LINES = 600


def module_name(path: Path) -> str:
    rel = path.relative_to(SRC).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def modules() -> dict[str, Path]:
    return {module_name(p): p for p in PACKAGE.rglob("*.py")}


def imports(mods: dict[str, Path]) -> dict[str, set[str]]:
    """module -> the gnnflow modules it imports (a name imported from a package counts as its
    submodule when there is one, else as the package)."""
    out: dict[str, set[str]] = defaultdict(set)
    for name, path in mods.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            targets: list[str] = []
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    up = package.split(".")[: len(package.split(".")) - node.level + 1]
                    base = ".".join(up + ([node.module] if node.module else []))
                targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in mods or compiled(f"{base}.{a.name}") else base
                           for a in node.names]
            for t in targets:
                if t not in mods and compiled(t):
                    continue  # a C extension module: a leaf
                while t and t not in mods:
                    t = t.rpartition(".")[0]
                if t and t != name:
                    out[name].add(t)
    return out


def compiled(module: str) -> bool:
    """Whether ``module`` is a C extension of the tree (its source beside the Python modules)."""
    path = SRC.joinpath(*module.split("."))
    return path.with_suffix(".c").exists()


def unit(module: str) -> str:
    """The layer unit of a module: its package below gnnflow (strategies subpackages apart)."""
    parts = module.split(".")
    if len(parts) == 1:
        return "gnnflow"
    if parts[1] == "strategies" and len(parts) > 2 and (PACKAGE / "strategies" / parts[2]).is_dir():
        return f"strategies.{parts[2]}"
    return parts[1]


def layer_of() -> dict[str, int]:
    return {u: i for i, units in enumerate(LAYERS) for u in units}


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one node (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[list[str]] = []
    counter = [0]

    def visit(v: str) -> None:
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in graph.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in list(graph):
        if v not in index:
            visit(v)
    return out


def test_every_unit_has_a_layer():
    units = {unit(m) for m in modules()}
    assert units <= set(layer_of()), f"units without a layer in LAYERS: {sorted(units - set(layer_of()))}"


def test_no_module_cycles():
    found = cycles(imports(modules()))
    assert not found, "modules importing each other in a cycle: " + "; ".join(" -> ".join(c) for c in found)


def test_no_package_imports_another_both_ways():
    pairs: dict[tuple[str, str], list[str]] = defaultdict(list)
    for a, targets in imports(modules()).items():
        for b in targets:
            if unit(a) != unit(b):
                pairs[(unit(a), unit(b))].append(f"{a} -> {b}")
    both = sorted((a, b) for (a, b) in pairs if (b, a) in pairs and a < b)
    assert not both, "packages importing each other: " + "; ".join(
        f"{a} <-> {b} ({pairs[(a, b)][0]}; {pairs[(b, a)][0]})" for a, b in both)


def test_imports_run_down_the_layers():
    layer = layer_of()
    wrong = []
    for a, targets in imports(modules()).items():
        for b in targets:
            ua, ub = unit(a), unit(b)
            if ua != ub and ua in layer and ub in layer and layer[ub] >= layer[ua]:
                wrong.append(f"{a} -> {b} ({ua} is on layer {layer[ua]}, {ub} on {layer[ub]})")
    assert not wrong, "imports that do not run down the layers:\n" + "\n".join(sorted(wrong))


def test_no_module_is_over_600_lines():
    long = {m: n for m, p in modules().items() if (n := len(p.read_text().splitlines())) > MAX_LINES}
    assert not long, f"modules over {MAX_LINES} lines (split them along their seams): {long}"


def test_the_checker_finds_a_cycle_and_an_upward_import():
    """The checks above can fail: a made-up graph with a cycle and an upward import is caught."""
    graph = {"gnnflow.sampling.a": {"gnnflow.sampling.b"}, "gnnflow.sampling.b": {"gnnflow.sampling.a"}}
    assert cycles(graph) == [["gnnflow.sampling.a", "gnnflow.sampling.b"]]
    layer = layer_of()
    assert layer[unit("gnnflow.strategies.driver")] > layer[unit("gnnflow.runtime.launch")]
    assert unit("gnnflow.strategies.minibatch.base") == "strategies.minibatch"
