"""The package's import graph, read from the source with ``ast`` (issue 39): no cycle, imports at the module's head
except the listed lazy ones, no function over 80 lines, and docs/architecture.md's layer picture holds.

The modules are those of ``arldiag/``, ``collectors/`` and ``dashboards/``; the last two install as
``arldiag.collectors`` and ``arldiag.dashboards`` (pyproject.toml ``package-dir``), which is what their imports
say. An edge A -> B means A's code imports B: the module named, or for ``from P import n`` the submodule ``P.n`` when
there is one. Importing ``P.Q.m`` also runs the ``__init__`` of every package on the way, so those are edges too
(unless A is inside that package: its ``__init__`` is then already running). ``from arldiag import Collector``
resolves through ``arldiag/__init__.py``'s lazy names to the module that defines it. Imports under
``if TYPE_CHECKING:`` never run and are left out.
"""
from __future__ import annotations

import ast
import re
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = {"arldiag": ROOT / "arldiag", "arldiag.collectors": ROOT / "collectors",
            "arldiag.dashboards": ROOT / "dashboards"}
MAX_LINES = 80
# The long function kept on purpose: the reference trainer's loop reads top to bottom (CleanRL-style).
LONG_KEPT = {"arldiag.trainer.loop:train"}

# Function-level arldiag imports that stay in the function: "module:function -> imported module": why. Each keeps a
# heavy optional dependency off a light path (the import of `arldiag`, a Collector in a trainer, a CLI command
# that does not need it).
LAZY = {
    "arldiag:__getattr__ -> arldiag.collectors.collector": "PEP 562 lazy name: `import arldiag` loads no pyarrow",
    "arldiag:__getattr__ -> arldiag.store.reader": "PEP 562 lazy name: `import arldiag` loads no pyarrow/DuckDB",
    "arldiag:__getattr__ -> arldiag.detectors": "PEP 562 lazy name: `import arldiag` loads no detector (pandas)",
    "arldiag:__getattr__ -> arldiag.wiring": "PEP 562 lazy name: `import arldiag` loads no collector (pyarrow)",
    "arldiag:__getattr__ -> arldiag.monitor": "PEP 562 lazy name: `import arldiag` loads no detector (pandas)",
    "arldiag.collectors.verl_loss:loss -> arldiag.trainer.losses": "torch: the plugin module is imported by verl "
                                                                     "in every process, torch only when a loss runs",
    "arldiag.fleetrun.tasks:report_text -> arldiag.report.build": "pandas: the fleet tasks module (ls, detect, "
                                                                  "eval-detect, each Ray worker) loads no pandas",
    "arldiag.fleetrun.tasks:report_text -> arldiag.report.cli": "pandas: the fleet tasks module (ls, detect, "
                                                                "eval-detect, each Ray worker) loads no pandas",
    "arldiag.report:__getattr__ -> arldiag.report.build": "pandas/plotly: `import arldiag.report` stays light",
    "arldiag.report:__getattr__ -> arldiag.report.cli": "pandas/plotly: `import arldiag.report` stays light",
    "arldiag.report.cli:render -> arldiag.report.html": "plotly: only the html format draws figures",
    "arldiag.report.cli:render -> arldiag.report.markdown": "pandas: `arldiag report --help` stays light",
    "arldiag.report.cli:render -> arldiag.report.jsonout": "pandas: `arldiag report --help` stays light",
    "arldiag.report.cli:write_report -> arldiag.report.build": "pandas/DuckDB: `arldiag report --help` stays light",
    "arldiag.report.sections._common:figures -> arldiag.report.figures": "plotly: the md/json formats draw nothing",
    "arldiag.dashboards.app:create_app -> arldiag.dashboards.callbacks": "dash/plotly: `arldiag dashboard --help` "
                                                                          "and the app module load no Dash",
    "arldiag.dashboards.app:create_app -> arldiag.dashboards.layout": "dash/plotly: `arldiag dashboard --help` and "
                                                                       "the app module load no Dash",
    "arldiag.dashboards.app:create_app -> arldiag.dashboards.fleet": "dash: `arldiag dashboard --help` and the app "
                                                                      "module load no Dash",
    "arldiag.trainer.cli:main -> arldiag.trainer.loop": "torch: `arldiag train --help`/--print-config load no torch, "
                                                         "and numerics pins its settings before torch loads",
    "arldiag.wiring:_attach_hf -> arldiag.collectors.trl": "transformers: attach() of a verl config never imports it",
    "arldiag.wiring:_attach_trl -> arldiag.collectors.trl_grpo": "torch/trl: attach() of a verl config never "
                                                                 "imports them",
    "arldiag.wiring:_attach_verl -> arldiag.collectors.verl_loss": "verl's loss registry: attach() of a TRL "
                                                                   "trainer never imports it",
}

# Not a heavy dependency: the dashboard's detectors bridge catches an import failure of the detectors package and
# falls back to the run's stored alerts (tests/dashboard/test_dashboard_data.py checks the fallback).
FALLBACK = {
    "arldiag.dashboards.detectors_bridge:load -> arldiag.detectors": "the dashboard shows stored alerts when the "
                                                                     "detectors fail to import",
    "arldiag.dashboards.detectors_bridge:_label -> arldiag.detectors": "the dashboard draws no label line when the "
                                                                       "detectors fail to import",
}


@dataclass(frozen=True)
class Import:
    importer: str
    target: str
    function: str | None   # the outermost function it sits in; None at the module level
    line: int

    @property
    def key(self) -> str:
        return f"{self.importer}:{self.function} -> {self.target}"


def modules(packages: dict[str, Path] = PACKAGES) -> dict[str, tuple[Path, bool]]:
    """Every module: dotted name -> (file, is a package's __init__)."""
    out = {}
    for pkg, folder in packages.items():
        for path in sorted(folder.rglob("*.py")):
            parts = list(path.relative_to(folder).with_suffix("").parts)
            is_pkg = parts[-1] == "__init__"
            out[".".join([pkg] + (parts[:-1] if is_pkg else parts))] = (path, is_pkg)
    return out


def _existing(name: str, mods) -> str | None:
    while name and name not in mods:
        name = name.rpartition(".")[0]
    return name or None


def _lazy_names(mods) -> dict[str, str]:
    """``arldiag.NAME`` -> the module ``arldiag/__init__.py``'s ``__getattr__`` imports it from."""
    if "arldiag" not in mods:
        return {}
    out = {}
    for node in ast.walk(ast.parse(mods["arldiag"][0].read_text())):
        if isinstance(node, ast.ImportFrom) and node.module:
            out.update((a.asname or a.name, node.module) for a in node.names)
    return out


def imports(mods) -> list[Import]:
    """Every import of a module of ``mods`` by a module of ``mods`` (TYPE_CHECKING blocks left out)."""
    lazy = _lazy_names(mods)
    root = {m.split(".")[0] for m in mods}
    out = []
    for mod, (path, is_pkg) in mods.items():
        pkg = mod if is_pkg else mod.rpartition(".")[0]

        def add(name, node, func):
            target = _existing(name, mods)
            if target is not None and target != mod:
                out.append(Import(mod, target, func, node.lineno))

        def visit(node, func):
            for ch in ast.iter_child_nodes(node):
                if isinstance(ch, ast.If) and "TYPE_CHECKING" in ast.unparse(ch.test):
                    continue
                f = func or (ch.name if isinstance(ch, (ast.FunctionDef, ast.AsyncFunctionDef)) else None)
                if isinstance(ch, ast.Import):
                    for a in ch.names:
                        if a.name.split(".")[0] in root:
                            add(a.name, ch, f)
                elif isinstance(ch, ast.ImportFrom):
                    base = ch.module or ""
                    if ch.level:
                        up = pkg.split(".")[: len(pkg.split(".")) - ch.level + 1]
                        base = ".".join(up + ([base] if base else []))
                    if base.split(".")[0] not in root:
                        continue
                    for a in ch.names:
                        full = f"{base}.{a.name}"
                        if full in mods:
                            add(full, ch, f)
                        elif base == "arldiag" and a.name in lazy and mod != "arldiag":
                            add(lazy[a.name], ch, f)
                        else:
                            add(base, ch, f)
                visit(ch, f)

        tree = ast.parse(path.read_text(), str(path))
        visit(tree, None)
        # `import arldiag` then `arldiag.Collector(...)`: the lazy name's module is what runs
        plain = [e for e in out if e.importer == mod and e.target == "arldiag"]
        if plain and mod != "arldiag":
            for node in ast.walk(tree):
                if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and \
                        node.value.id == "arldiag" and node.attr in lazy:
                    out.append(Import(mod, lazy[node.attr], plain[0].function, plain[0].line))
    return out


def graph(mods, edges: list[Import]) -> dict[str, set[str]]:
    """Module -> the modules its import runs, package __init__s on the way included."""
    g = {m: set() for m in mods}
    for e in edges:
        g[e.importer].add(e.target)
        parent = e.target.rpartition(".")[0]
        while parent:
            if parent in mods and not (e.importer + ".").startswith(parent + "."):
                g[e.importer].add(parent)
            parent = parent.rpartition(".")[0]
        g[e.importer].discard(e.importer)
    return g


def cycles(g: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan, iterative), each sorted."""
    index, low, stack, on, out, counter = {}, {}, [], set(), [], [0]
    for start in sorted(g):
        if start in index:
            continue
        work = [(start, iter(sorted(g[start])))]
        index[start] = low[start] = counter[0]
        counter[0] += 1
        stack.append(start)
        on.add(start)
        while work:
            v, it = work[-1]
            for w in it:
                if w not in index:
                    index[w] = low[w] = counter[0]
                    counter[0] += 1
                    stack.append(w)
                    on.add(w)
                    work.append((w, iter(sorted(g[w]))))
                    break
                if w in on:
                    low[v] = min(low[v], index[w])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[v])
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
    return out


def long_functions(mods, limit: int = MAX_LINES) -> dict[str, int]:
    """"module:function" (nested ones by their own name) -> lines, for every function over ``limit`` lines."""
    out = {}
    for mod, (path, _) in mods.items():
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                n = node.end_lineno - node.lineno + 1
                if n > limit:
                    out[f"{mod}:{node.name}"] = n
    return out


def layers(text: str) -> list[tuple[str, list[str]]]:
    """docs/architecture.md's "## Layers" table, top layer first: (layer, module patterns)."""
    section = text.split("\n## Layers", 1)[1].split("\n## ", 1)[0]
    rows = [r for r in section.splitlines() if r.startswith("| ") and not r.startswith("| layer")]
    out = []
    for r in rows:
        cells = [c.strip() for c in r.strip("|").split("|")]
        out.append((cells[0], re.findall(r"`([^`]+)`", cells[1])))
    return out


def layer_of(mod: str, table: list[tuple[str, list[str]]]) -> int:
    """Index of the layer whose pattern matches ``mod`` most specifically (``pkg.*``: the package and below)."""
    best, rank = None, -1
    for i, (_, patterns) in enumerate(table):
        for p in patterns:
            if p.endswith(".*") and (mod == p[:-2] or mod.startswith(p[:-1])) or mod == p:
                if len(p) > rank:
                    best, rank = i, len(p)
    return best


MODS = modules()
EDGES = imports(MODS)
# The edges that run at import: the module-level ones.
RUNNING = [e for e in EDGES if e.function is None]


# ---- the checker itself, on a hand-made package -------------------------------------------------------------------

def _write(tmp_path, files: dict[str, str]):
    for rel, text in files.items():
        p = tmp_path / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(text)
    return modules({"pkg": tmp_path / "pkg"})


def test_the_checker_finds_a_cycle_through_a_package_init_and_skips_lazy_and_type_checking_imports(tmp_path):
    mods = _write(tmp_path, {
        "pkg/__init__.py": "",
        "pkg/a.py": "from pkg.sub import b\n",
        "pkg/sub/__init__.py": "from pkg.sub.c import X\n",
        "pkg/sub/b.py": "",
        "pkg/sub/c.py": "from . import d\nimport pkg.a\n",
        "pkg/sub/d.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    import pkg.a\n"
                        "def f():\n    from pkg import a\n",
        "pkg/sub/e.py": "import pkg.sub.b as b\n",
    })
    edges = imports(mods)
    assert {(e.importer, e.target, e.function) for e in edges} == {
        ("pkg.a", "pkg.sub.b", None), ("pkg.sub", "pkg.sub.c", None), ("pkg.sub.c", "pkg.sub.d", None),
        ("pkg.sub.c", "pkg.a", None), ("pkg.sub.d", "pkg.a", "f"), ("pkg.sub.e", "pkg.sub.b", None)}
    g = graph(mods, [e for e in edges if e.function is None])
    assert g["pkg.a"] == {"pkg.sub.b", "pkg.sub"}        # importing pkg.sub.b runs pkg/sub/__init__.py
    assert cycles(g) == [["pkg.a", "pkg.sub", "pkg.sub.c"]]
    assert cycles(graph(mods, [e for e in edges if e.importer != "pkg.sub.c"])) == []


def test_the_checker_measures_function_lengths_and_reads_the_layer_table(tmp_path):
    body = "".join(f"    x{i} = {i}\n" for i in range(MAX_LINES - 1))
    mods = _write(tmp_path, {"pkg/__init__.py": "", "pkg/m.py": f"def ok():\n{body}\ndef long():\n{body}    y = 1\n"})
    assert long_functions(mods) == {"pkg.m:long": MAX_LINES + 1}
    table = layers("# t\n## Layers\n\n| layer | modules |\n|---|---|\n| top | `a.cli` |\n| low | `a.*`, `b` |\n"
                   "\n## Next\n| x | `c` |\n")
    assert table == [("top", ["a.cli"]), ("low", ["a.*", "b"])]
    assert [layer_of(m, table) for m in ("a.cli", "a.x", "a", "b", "c")] == [0, 1, 1, 1, None]


# ---- the package -----------------------------------------------------------------------------------------------

def test_the_graph_sees_the_package():
    assert {"arldiag.settings", "arldiag.collectors.collector", "arldiag.dashboards.app"} <= set(MODS)
    keys = {(e.importer, e.target) for e in EDGES}
    assert ("arldiag.collectors.collector", "arldiag.schema") in keys
    assert len(EDGES) > 500


def test_no_import_cycle():
    found = cycles(graph(MODS, RUNNING))
    assert not found, "import cycles (each a strongly connected set of modules):\n" + "\n".join(
        f"  {len(c)} modules: {' <-> '.join(c)}" for c in found)


def test_every_function_level_import_is_listed_with_its_reason():
    inside = {e.key for e in EDGES if e.function is not None}
    unlisted = sorted(inside - set(LAZY) - set(FALLBACK))
    assert not unlisted, ("imports inside functions: move them to the module's head, or list them in LAZY with "
                          "the heavy dependency they keep off a light path:\n  " + "\n  ".join(unlisted))
    stale = sorted((set(LAZY) | set(FALLBACK)) - inside)
    assert not stale, "allowlist entries that match no import any more:\n  " + "\n  ".join(stale)
    assert not set(LAZY) & set(FALLBACK)
    assert all(len(r) > 10 and "\n" not in r for r in (*LAZY.values(), *FALLBACK.values()))


def test_no_function_over_80_lines():
    found = long_functions(MODS)
    over = {k: v for k, v in found.items() if k not in LONG_KEPT}
    assert not over, f"functions over {MAX_LINES} lines: {over}"
    assert LONG_KEPT <= set(found), f"kept long functions that are no longer long: {LONG_KEPT - set(found)}"


def test_every_module_imports_only_its_own_layer_or_the_ones_below():
    table = layers((ROOT / "docs" / "architecture.md").read_text())
    unplaced = sorted(m for m in MODS if layer_of(m, table) is None)
    assert not unplaced, f"modules in no layer of docs/architecture.md: {unplaced}"
    upward = sorted(f"{e.key} (layer {table[layer_of(e.importer, table)][0]!r} imports "
                    f"{table[layer_of(e.target, table)][0]!r})" for e in RUNNING
                    if layer_of(e.target, table) < layer_of(e.importer, table))
    assert not upward, "imports of a higher layer:\n  " + "\n  ".join(upward)
