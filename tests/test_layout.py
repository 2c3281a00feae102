"""The library's house rules, checked: no import cycles between its modules, imports that point down the layers,
and the library apart from the maintainer's tooling.

An import cycle (kv_cache <-> modeling before core v2, dodged with an import deferred into a function) makes a
module impossible to read or test on its own. Modules are cut by job, not by a line count: a cohesive module is
read in one place, where a count would split it into files that must be read together. What only a maintainer runs (training the family, the site, the learner-time table, the load test against a
server and its client) is ``specdec_tools/``, beside the library: it imports the library, and neither the library
nor a notebook imports it. All of it is read from the source with `ast`, so the checks need no import.
"""

import ast
import json
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
LIBRARY = ROOT / "specdec_lib"


def module_name(path: Path) -> str:
    parts = path.relative_to(LIBRARY.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imported_names(source: str, package: str = "") -> set[str]:
    """Every dotted name ``source`` imports, anywhere in it (deferred imports included): each module, and each
    ``module.name`` of a ``from module import name``; relative imports are resolved against ``package``."""
    found = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join(anchor + ([base] if base else []))
            found |= {base} | {f"{base}.{alias.name}" for alias in node.names}
        elif isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
    return found


def imported_library_modules(path: Path, modules: set[str]) -> set[str]:
    """The specdec_lib modules ``path`` imports, anywhere in the file (deferred imports included)."""
    name = module_name(path)
    package = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
    return {c for c in imported_names(path.read_text(encoding="utf-8"), package) if c in modules and c != name}


def library_graph() -> dict[str, set[str]]:
    paths = sorted(LIBRARY.rglob("*.py"))
    modules = {module_name(p) for p in paths}
    # a package's __init__ re-exports its submodules: importing a submodule runs it, which is not a cycle
    return {module_name(p): {m for m in imported_library_modules(p, modules) if not module_name(p).startswith(m + ".")
                             and not (p.name == "__init__.py")} for p in paths}


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    state: dict[str, int] = {}  # 1 visiting, 2 done
    stack: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        stack.append(node)
        for target in sorted(graph.get(node, ())):
            if state.get(target) == 1:
                return stack[stack.index(target):] + [target]
            if target not in state and (cycle := visit(target)):
                return cycle
        stack.pop()
        state[node] = 2
        return None

    for node in sorted(graph):
        if node not in state and (cycle := visit(node)):
            return cycle
    return None


def test_the_cycle_finder_finds_cycles():
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": set()}) is None


def test_no_import_cycles_between_library_modules():
    graph = library_graph()
    assert {"specdec_lib.core.caches", "specdec_lib.core.forward"} <= graph["specdec_lib.core.rows"]  # rows build on
    assert find_cycle(graph) is None, f"import cycle: {' -> '.join(find_cycle(graph))}"  # both, never the other way


# the packages from the bottom up: a module may import its own layer and the ones below it, never one above
LAYERS = [("specdec_lib.core",), ("specdec_lib.drafters",), ("specdec_lib.decoders", "specdec_lib.loading",
                                                             "specdec_lib.prompts"),
          ("specdec_lib.bench", "specdec_lib.teaching")]


def layer_of(module: str) -> int | None:
    return next((index for index, names in enumerate(LAYERS)
                 if any(module == name or module.startswith(name + ".") for name in names)), None)


def test_lower_layers_never_import_higher_ones():
    upward = [(module, imported) for module, imports in library_graph().items() for imported in imports
              if layer_of(module) is not None and layer_of(imported) is not None
              and layer_of(imported) > layer_of(module)]
    assert not upward, f"imports that point up the layers {LAYERS}: {upward}"


def is_tooling(name: str) -> bool:
    """Whether an imported dotted name is the maintainer's tooling: ``specdec_tools``, or a ``training``, ``serve``
    or ``serve_client`` module wherever it sits (where they were before: ``specdec_lib.training``,
    ``specdec_lib.bench.serve``, ``specdec_lib.bench.serve_client``)."""
    parts = name.split(".")
    return parts[0] == "specdec_tools" or bool({"training", "serve", "serve_client"} & set(parts))


def test_the_tooling_check_tells_the_library_from_the_tools():
    assert imported_names("from ..training.measure import f", "specdec_lib.bench") == {
        "specdec_lib.training.measure", "specdec_lib.training.measure.f"}
    assert all(map(is_tooling, ["specdec_tools", "specdec_tools.site", "specdec_lib.training.cli",
                                "specdec_lib.bench.serve.format_table", "specdec_lib.bench.serve_client"]))
    assert not any(map(is_tooling, ["specdec_lib.bench.model_measures", "specdec_lib.bench.latency", "transformers"]))


def test_the_library_never_imports_the_tooling():
    """Arrows point from the tools to the library only: no specdec_lib module imports specdec_tools, training or the
    serve client, not even from inside a function."""
    upward = {}
    for path in LIBRARY.rglob("*.py"):
        name = module_name(path)
        package = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
        if tooling := sorted(filter(is_tooling, imported_names(path.read_text(encoding="utf-8"), package))):
            upward[name] = tooling
    assert not upward, ("library modules that import the maintainer's tooling (move what they need into the "
                        f"library): {upward}")


def code_cells(notebook: Path) -> str:
    """The notebook's code cells as one Python source (IPython's ``%`` and ``!`` lines left out)."""
    cells = json.loads(notebook.read_text(encoding="utf-8"))["cells"]
    sources = ["".join(cell["source"]) for cell in cells if cell["cell_type"] == "code"]
    return "\n".join(line for source in sources for line in source.splitlines()
                     if not line.lstrip().startswith(("%", "!")))


def test_no_notebook_imports_the_tooling():
    """The course runs on the library alone: no code cell of a notebook or of a solution imports specdec_tools,
    training or the serve client."""
    notebooks = sorted([*ROOT.glob("course/*.ipynb"), *ROOT.glob("course/solutions/*.ipynb")])
    assert len(notebooks) > 10
    found = {path.relative_to(ROOT).as_posix(): tooling for path in notebooks
             if (tooling := sorted(filter(is_tooling, imported_names(code_cells(path)))))}
    assert not found, f"notebooks that import the maintainer's tooling (import it from the library instead): {found}"
