"""Layers only point down: no module imports a package of its own layer or a higher one, packages form no cycle,
and neither do the modules inside one package.

Every ``import`` of ``pyspark_ledger`` and ``bookie_server`` counts, at module
level and inside functions (a lazy import is still a dependency), and so does a
module name handed to ``importlib.import_module`` (``log/__init__``'s table of
lazy names). A package is a sub-package or top-level module of
``pyspark_ledger`` (``log``, ``errors``, ...) or ``bookie_server``. Importing a
submodule (``from pyspark_ledger import entry``) depends on that submodule only.

``pyspark_ledger/__init__.py`` is two things: its module body (``__version__``,
``errors``) sits low, as ``root``; the names it serves on first use
(``LedgerClient``, ``ClientConfig``, ``DefaultSource``) are the ``facade``,
above the client and the connector it loads and below the applications (the
CLI uses it), so ``from pyspark_ledger import LedgerClient`` counts as an
import of the facade.

The order below is what the code needs, lowest first; packages of one layer
do not import each other (the bookie server and the replication client stand
side by side). ``testing`` is the process harness (bookie, ZooKeeper and
Spark launchers, fake bookies): tests import it freely, and of the product
only the sandbox, the demo and the CLI above it do. A new package must be
given a layer here.
"""
from __future__ import annotations

import ast
import functools
import pathlib
from dataclasses import dataclass

ROOT = pathlib.Path(__file__).resolve().parents[1]
TOP_PACKAGES = ("pyspark_ledger", "bookie_server")

LAYERS = (
    ("wire", "arg_types", "private_files", "status", "malloc_tuning"),  # leaves (protobuf, argparse, secrets, ...)
    ("errors",),                      # one exception class per meaning (built on the bookie statuses)
    ("entry", "root"),                # entry format and keys; the package's own module body
    ("metadata",),                    # the metadata model and its stores
    ("protocol", "security"),         # pure protocol decisions on the model; TLS, certificates, repair key
    ("client", "bookie_server"),      # the replication client; the bookie server, never importing the client
    ("log",),                         # streams: logs of ledgers, on the client
    ("spark",),                       # the Spark connector, a client of log/
    ("facade",),                      # the names pyspark_ledger/__init__ loads on first use
    ("testing",),                     # the process harness and fakes
    ("sandbox",),                     # a local cluster on the harness
    ("demo",),
    ("cli",),
)
RANK = {package: rank for rank, layer in enumerate(LAYERS) for package in layer}


@dataclass(frozen=True)
class Import:
    module: str
    line: int
    target: str
    package: str         # the importing module's package
    target_package: str
    local: bool          # inside a function, or a name for importlib

    def __str__(self) -> str:
        where = " (lazily: inside a function or through importlib)" if self.local else ""
        return (f"{self.module} line {self.line} imports {self.target}{where}: "
                f"{self.package} (layer {RANK.get(self.package)}) -> "
                f"{self.target_package} (layer {RANK.get(self.target_package)})")


def module_name(path: pathlib.Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def is_module(name: str) -> bool:
    path = ROOT.joinpath(*name.split("."))
    return path.with_suffix(".py").is_file() or (path / "__init__.py").is_file()


def package_of(module: str, *, facade: bool = False) -> str:
    parts = module.split(".")
    if parts[0] == "bookie_server":
        return "bookie_server"
    if len(parts) == 1:
        return "facade" if facade else "root"
    return parts[1]


ROOT_NAMES = {target.id for node in ast.parse((ROOT / "pyspark_ledger/__init__.py").read_text()).body
              if isinstance(node, ast.Assign) for target in node.targets if isinstance(target, ast.Name)}


def targets(node: ast.AST, module: str, is_package: bool) -> list[tuple[str, bool]]:
    """(imported module or name, whether it is a facade name) for one import statement."""
    if isinstance(node, ast.Import):
        return [(alias.name, False) for alias in node.names]
    base = node.module or ""
    if node.level:
        anchor = module.split(".")[: len(module.split(".")) - node.level + (1 if is_package else 0)]
        base = ".".join(anchor + ([node.module] if node.module else []))
    found = []
    for alias in node.names:
        if is_module(f"{base}.{alias.name}"):
            found.append((f"{base}.{alias.name}", False))
        else:
            lazy = base == "pyspark_ledger" and alias.name not in ROOT_NAMES
            found.append((f"{base}.{alias.name}" if lazy else base, lazy))
    return list(dict.fromkeys(found))  # "from m import a, b" depends on m once


def walk(node: ast.AST, local: bool = False):
    """Every node under ``node`` with whether it is inside a function."""
    for child in ast.iter_child_nodes(node):
        yield child, local
        yield from walk(child, local or isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)))


def imports_of(path: pathlib.Path) -> list[Import]:
    module, source = module_name(path), path.read_text()
    dynamic = "import_module" in source
    found = []
    for node, local in walk(ast.parse(source)):
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            pairs = targets(node, module, path.name == "__init__.py")
        elif dynamic and isinstance(node, ast.Constant) and isinstance(node.value, str) \
                and node.value.split(".")[0] in TOP_PACKAGES and is_module(node.value):
            pairs, local = [(node.value, False)], True
        else:
            continue
        for target, lazy in pairs:
            if target.split(".")[0] in TOP_PACKAGES:
                found.append(Import(module, node.lineno, target, package_of(module, facade=local),
                                    "facade" if lazy else package_of(target), local))
    return found


@functools.cache
def all_imports() -> tuple[Import, ...]:
    return tuple(found for top in TOP_PACKAGES for path in sorted((ROOT / top).rglob("*.py"))
            for found in imports_of(path))


def test_the_scan_sees_module_level_function_local_and_lazy_imports():
    seen = {(found.module, found.target, found.local) for found in all_imports()}
    assert ("pyspark_ledger.spark.planning", "pyspark_ledger.log.log_spans", False) in seen
    assert ("pyspark_ledger.log.streams", "pyspark_ledger.log.stream_schema", True) in seen
    assert ("pyspark_ledger.log", "pyspark_ledger.log.stream_client", True) in seen
    assert ("pyspark_ledger.cli.data_cmds", "pyspark_ledger.LedgerClient", True) in seen


def test_every_package_has_a_layer():
    packages = {found.package for found in all_imports()} | {found.target_package for found in all_imports()}
    assert not packages - set(RANK), f"give these packages a layer in LAYERS: {sorted(packages - set(RANK))}"


def test_no_module_imports_its_own_layer_or_a_higher_one():
    upward = [str(found) for found in all_imports() if found.package != found.target_package
              and RANK[found.target_package] >= RANK[found.package]]
    assert not upward, "imports against the layer order:\n" + "\n".join(upward)


def test_packages_import_each_other_in_no_cycle():
    edges: dict[str, dict[str, Import]] = {}
    for found in all_imports():
        if found.package != found.target_package:
            edges.setdefault(found.package, {}).setdefault(found.target_package, found)
    cycle = find_cycle(edges)
    assert cycle is None, "packages import each other in a cycle:\n" + "\n".join(
        str(edges[a][b]) for a, b in zip(cycle, cycle[1:]))


def module_edges() -> dict[str, dict[str, Import]]:
    """module -> {imported module of the same package: the import}, lazy imports included."""
    edges: dict[str, dict[str, Import]] = {}
    for found in all_imports():
        if found.package == found.target_package and found.module != found.target:
            edges.setdefault(found.module, {}).setdefault(found.target, found)
    return edges


def test_the_modules_of_one_package_import_each_other_in_no_cycle():
    """Inside a package too, a module shared by two others sits below both: a cycle (even through a lazy
    import) means a piece two modules need belongs in a module of its own, below them."""
    edges = module_edges()
    for package in ("spark", "log", "client", "bookie_server"):  # the scan sees imports inside these
        assert any(package_of(module) == package for module in edges), package
    cycle = find_cycle(edges)
    assert cycle is None, "modules of one package import each other in a cycle:\n" + "\n".join(
        str(edges[a][b]) for a, b in zip(cycle, cycle[1:]))


def test_find_cycle_finds_a_cycle_through_any_node_and_none_in_a_chain():
    chain = {"a": {"b": None}, "b": {"c": None}}
    assert find_cycle(chain) is None
    assert find_cycle({**chain, "c": {"d": None}, "d": {"b": None}}) == ["b", "c", "d", "b"]


def find_cycle(edges: dict[str, dict[str, Import]]) -> list[str] | None:
    """A cycle a -> b -> ... -> a as [a, b, ..., a], or None."""
    done: set[str] = set()

    def visit(node: str, path: list[str]) -> list[str] | None:
        if node in path:
            return path[path.index(node):] + [node]
        if node in done:
            return None
        for target in sorted(edges.get(node, {})):
            cycle = visit(target, path + [node])
            if cycle:
                return cycle
        done.add(node)
        return None

    for start in sorted(edges):
        cycle = visit(start, [])
        if cycle:
            return cycle
    return None
