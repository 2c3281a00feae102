"""A learner re-runs cells: running any one code cell twice in a row, or an earlier cell again after later ones, must
still work. This module proves it statically, with ``ast``, for every notebook of the course and its solutions (a
fraction of a second, no kernel), by two rules over the top-level names of the code cells:

(a) **A name a cell reads from another cell has one binder.** A cell that reads a name bound by an earlier cell sees,
    when it is re-run after a later cell rebinds that name, the later value: cell 5 reads ``context`` (a list, from
    cell 3) and cell 35 rebinds ``context`` to a tensor, so cell 5 run again breaks or prints something else. The
    same holds the other way round: when cell 5 binds ``context`` to a list and cell 35 to a tensor that cell 39
    reads, running cell 5 again (to look at its figure) and then cell 39 hands cell 39 the list. A new value needs
    a new name. Shadowing a builtin that a cell uses counts too.
(b) **No cell reads a name and then rebinds it.** ``x = x + 1``, ``context = torch.tensor(context)``, ``total += t``
    (``total`` from an earlier cell) or ``del x`` give a second run of the same cell another input than the first.

A *binding* is an assignment (tuple and starred targets, augmented, annotated with a value, ``:=``), ``def``,
``class``, an import, a ``for`` or ``with ... as`` target, an ``except ... as`` name or ``del``, anywhere in a cell's
module scope (inside ``if``/``for``/``try`` too, never inside a function). A *read* is a name loaded in the module
scope, in a comprehension or a lambda (their bodies count where they are written: a lambda is nearly always called
by the statement that makes it), or inside a function body that refers to a global.

A function body runs when the function is called, so its global reads belong to the cell that calls it, at the call:
wherever a cell names a function (calls it, or hands it on, as ``timeit(f)`` or ``{"a": f}`` do) the function's
global reads (and those of the functions it names, transitively) count as reads of that cell at that place. A cell
that only defines the function reads nothing through it. Methods count for the cell that names their class. This
keeps false positives rare: a helper that reads ``model`` is fine until a cell calls it before another cell rebinds
``model``, which is exactly when a re-run changes what the call does.

Not a rebinding: importing the same thing again (``import torch`` in two cells), a cell that binds a name before it
reads it (``fig, ax = plt.subplots(); ax.set_title(...)``), a loop variable bound by each cell that uses it. The
allow-list ``HARMLESS`` holds the few names whose rebinding is intended and harmless; each entry says why.
What the rules cannot see is mutation in place (``context.append(t)``, ``model.half()``): the ``slow`` test at the
end runs notebook 00 with every code cell executed twice in a row on a real kernel, the premise of these rules.

IPython syntax is skipped safely: a line magic or a shell line becomes ``pass`` (``%time``/``%timeit`` keep their
statement), ``%%time``/``%%timeit``/``%%capture`` cells are read without the magic line, any other cell magic
(``%%bash``, ``%%writefile``) is not Python and is skipped.
"""

from __future__ import annotations

import ast
import json
import re
from dataclasses import dataclass
from pathlib import Path

import pytest

COURSE = Path(__file__).resolve().parents[1] / "course"
NOTEBOOKS = sorted(COURSE.rglob("*.ipynb"))
NOTEBOOK_IDS = [str(path.relative_to(COURSE)) for path in NOTEBOOKS]

HARMLESS = {
    "_",  # the throwaway name: bound by whoever uses it, never read as a value from another cell
}

SCOPES = (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef,
          ast.ListComp, ast.SetComp, ast.DictComp, ast.GeneratorExp)
KEPT_LINE_MAGICS = re.compile(r"^%(?:time|timeit)\s+(?:-\S+\s+(?:\d+\s+)?)*")
PYTHON_CELL_MAGICS = ("%%time", "%%timeit", "%%capture")


# --------------------------------------------------------------------------------------- a cell's reads and binds


@dataclass(frozen=True)
class Event:
    """One read or binding of a top-level name, in the order a cell runs them. ``same_as``: for an import, the
    import itself (importing the same thing again is no rebinding); ``calls``: for a ``def`` or ``class``, the
    global names its body reads when called."""

    kind: str  # "read" or "bind"
    name: str
    same_as: str | None = None
    calls: frozenset[str] = frozenset()


def python_source(source: str) -> str | None:
    """The cell's Python with IPython magics and shell lines neutralised (None: a cell magic that is not Python)."""
    lines = source.splitlines()
    if lines and lines[0].lstrip().startswith("%%"):
        if not lines[0].lstrip().startswith(PYTHON_CELL_MAGICS):
            return None
        lines = lines[1:]
    out = []
    for line in lines:
        stripped = line.lstrip()
        indent = line[: len(line) - len(stripped)]
        if stripped.startswith("%") and KEPT_LINE_MAGICS.match(stripped):
            out.append(indent + KEPT_LINE_MAGICS.sub("", stripped))
        elif stripped.startswith(("%", "!")):
            out.append(indent + "pass")
        else:
            out.append(re.sub(r"^(\s*[\w, ]+=\s*)[!%].*$", r"\1None", line))  # files = !ls
    return "\n".join(out)


def _targets(node: ast.AST) -> tuple[list[str], list[ast.AST]]:
    """The names an assignment target binds, and the expressions it reads (``a[i] = v`` reads ``a`` and ``i``)."""
    if isinstance(node, ast.Name):
        return [node.id], []
    if isinstance(node, (ast.Tuple, ast.List)):
        names, reads = [], []
        for element in node.elts:
            more_names, more_reads = _targets(element)
            names += more_names
            reads += more_reads
        return names, reads
    if isinstance(node, ast.Starred):
        return _targets(node.value)
    return [], [node]  # an attribute or a subscript: reads its object and index


def _own_nodes(scope: ast.AST):
    """Every node of a scope, nested scopes included as nodes but not entered."""
    stack = list(ast.iter_child_nodes(scope))
    while stack:
        node = stack.pop()
        yield node
        if not isinstance(node, SCOPES):
            stack.extend(ast.iter_child_nodes(node))


def _locals(scope: ast.AST) -> set[str]:
    """The names a function, lambda or comprehension binds for itself (``global`` ones excepted)."""
    names = set()
    if isinstance(scope, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
        arguments = scope.args
        names |= {arg.arg for arg in arguments.posonlyargs + arguments.args + arguments.kwonlyargs}
        names |= {arg.arg for arg in (arguments.vararg, arguments.kwarg) if arg is not None}
    if isinstance(scope, (ast.ListComp, ast.SetComp, ast.DictComp, ast.GeneratorExp)):
        for generator in scope.generators:
            names |= set(_targets(generator.target)[0])
        return names  # a comprehension binds only its targets (``:=`` inside binds the enclosing scope)
    declared = set()
    for node in _own_nodes(scope):
        if isinstance(node, ast.Name) and isinstance(node.ctx, (ast.Store, ast.Del)):
            names.add(node.id)
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            names |= {(alias.asname or alias.name).split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ExceptHandler) and node.name:
            names.add(node.name)
        elif isinstance(node, (ast.Global, ast.Nonlocal)):
            declared |= set(node.names)
    return names - declared


def free_reads(scope: ast.AST) -> set[str]:
    """The names a nested scope (function, lambda, comprehension) reads from outside itself."""
    if isinstance(scope, ast.ClassDef):  # the class body runs at once; its methods when called
        return set().union(*(free_reads(node) for node in scope.body if isinstance(node, SCOPES)), set())
    local = _locals(scope)
    reads = set()
    for node in _own_nodes(scope):
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load):
            reads.add(node.id)
        elif isinstance(node, SCOPES):
            reads |= free_reads(node)
    return reads - local


def _expression(node: ast.AST):
    """The events of evaluating an expression (or a statement part that is one), in evaluation order."""
    if isinstance(node, ast.Name):
        if isinstance(node.ctx, ast.Load):
            yield Event("read", node.id)
        return
    if isinstance(node, ast.NamedExpr):
        yield from _expression(node.value)
        yield Event("bind", node.target.id)
        return
    if isinstance(node, (ast.Lambda, ast.ListComp, ast.SetComp, ast.DictComp, ast.GeneratorExp)):
        for name in sorted(free_reads(node)):
            yield Event("read", name)
        for inner in ast.walk(node):  # a := inside a comprehension binds the cell's scope
            if isinstance(inner, ast.NamedExpr):
                yield Event("bind", inner.target.id)
        return
    for child in ast.iter_child_nodes(node):
        yield from _expression(child)


def _assign(target: ast.AST):
    names, reads = _targets(target)
    for read in reads:
        yield from _expression(read)
    for name in names:
        yield Event("bind", name)


def _statements(statements: list[ast.stmt]):
    for statement in statements:
        yield from _statement(statement)


def _statement(node: ast.stmt):  # noqa: C901 - one branch per kind of statement
    """The events of one module-scope statement, in the order Python runs them."""
    if isinstance(node, (ast.Import, ast.ImportFrom)):
        for alias in node.names:
            if alias.name != "*":
                origin = f"from {'.' * node.level}{node.module or ''} " if isinstance(node, ast.ImportFrom) else ""
                same_as = f"{origin}import {alias.name} as {alias.asname}"
                yield Event("bind", (alias.asname or alias.name).split(".")[0], same_as=same_as)
    elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        arguments = [] if isinstance(node, ast.ClassDef) else [node.args, node.returns]
        parts = [*node.decorator_list, *getattr(node, "bases", []), *getattr(node, "keywords", []), *arguments]
        for part in parts:
            if part is not None:
                yield from _expression(part)
        if isinstance(node, ast.ClassDef):  # the class body runs now; its own names are the class's
            own = _locals(node)
            for statement in node.body:
                if not isinstance(statement, SCOPES):
                    yield from (event for event in _statement(statement)
                                if event.kind == "read" and event.name not in own)
        yield Event("bind", node.name, calls=frozenset(free_reads(node)))
    elif isinstance(node, ast.Assign):
        yield from _expression(node.value)
        for target in node.targets:
            yield from _assign(target)
    elif isinstance(node, ast.AugAssign):
        if isinstance(node.target, ast.Name):
            yield Event("read", node.target.id)
        yield from _expression(node.value)
        yield from _assign(node.target)
    elif isinstance(node, ast.AnnAssign):
        yield from _expression(node.annotation)
        if node.value is not None:
            yield from _expression(node.value)
            yield from _assign(node.target)
    elif isinstance(node, (ast.For, ast.AsyncFor)):
        yield from _expression(node.iter)
        yield from _assign(node.target)
        yield from _statements(node.body + node.orelse)
    elif isinstance(node, (ast.With, ast.AsyncWith)):
        for item in node.items:
            yield from _expression(item.context_expr)
            if item.optional_vars is not None:
                yield from _assign(item.optional_vars)
        yield from _statements(node.body)
    elif isinstance(node, (ast.If, ast.While)):
        yield from _expression(node.test)
        yield from _statements(node.body + node.orelse)
    elif isinstance(node, ast.Try):
        yield from _statements(node.body)
        for handler in node.handlers:
            if handler.type is not None:
                yield from _expression(handler.type)
            if handler.name:
                yield Event("bind", handler.name)
            yield from _statements(handler.body)
        yield from _statements(node.orelse + node.finalbody)
    elif isinstance(node, ast.Delete):
        for target in node.targets:
            if isinstance(target, ast.Name):  # del x reads x (it must exist) and unbinds it
                yield Event("read", target.id)
            yield from _assign(target)
    elif not isinstance(node, (ast.Global, ast.Nonlocal)):
        yield from _expression(node)


def cell_events(source: str) -> list[Event]:
    """The reads and bindings of one code cell's module scope, in order (empty for a non-Python cell magic)."""
    python = python_source(source)
    return [] if python is None else list(_statements(ast.parse(python).body))


# ------------------------------------------------------------------------------------------------ the two rules


@dataclass(frozen=True)
class Binding:
    cell: int
    same_as: str | None
    calls: frozenset[str]

    def differs_from(self, other: Binding | None) -> bool:
        return other is None or self.same_as is None or self.same_as != other.same_as


def code_cells(notebook: dict) -> list[tuple[int, str]]:
    """(cell index in the notebook, source) of every code cell."""
    return [(index, cell["source"] if isinstance(cell["source"], str) else "".join(cell["source"]))
            for index, cell in enumerate(notebook["cells"]) if cell["cell_type"] == "code"]


def rerun_violations(notebook: dict) -> list[str]:
    """Every place where running one cell again (twice in a row, or after later cells) changes what it reads."""
    current: dict[str, Binding] = {}  # the binding each name holds when the notebook runs top to bottom
    bindings: dict[str, list[Binding]] = {}
    outside_reads: list[tuple[int, str, Binding | None]] = []  # (cell, name, the binding it read)
    problems = []
    for index, source in code_cells(notebook):
        bound_here: set[str] = set()
        read_from_before: dict[str, Binding | None] = {}
        reported: set[str] = set()

        def read(name: str, through: tuple[str, ...] = ()) -> None:
            if name not in bound_here and name not in read_from_before:
                read_from_before[name] = current.get(name)
                outside_reads.append((index, name, current.get(name)))
            binding = current.get(name)
            if binding is not None and name not in through:
                for inner in sorted(binding.calls):
                    read(inner, (*through, name))

        try:
            events = cell_events(source)
        except SyntaxError as error:
            problems.append(f"cell {index} is not valid Python ({error.msg}, line {error.lineno})")
            continue
        for event in events:
            if event.kind == "read":
                read(event.name)
                continue
            binding = Binding(index, event.same_as, event.calls)
            if (event.name in read_from_before and event.name not in HARMLESS | reported
                    and binding.differs_from(read_from_before[event.name])):
                problems.append(f"cell {index} reads `{event.name}` and then rebinds it: a second run of the cell "
                                f"starts from its own new `{event.name}`; give the new value another name")
                reported.add(event.name)
            bound_here.add(event.name)
            current[event.name] = binding
            bindings.setdefault(event.name, []).append(binding)
    for index, name, seen in outside_reads:
        others = sorted({binding.cell for binding in bindings.get(name, []) if name not in HARMLESS
                         and binding.cell not in (index, seen and seen.cell) and binding.differs_from(seen)})
        where = f"bound in cell {seen.cell}" if seen is not None else "a builtin or unbound"
        for other in others:
            if other > index:
                problems.append(f"cell {index} reads `{name}` ({where}) and cell {other} rebinds it: running cell "
                                f"{index} again after cell {other} sees cell {other}'s value; give it another name")
            else:
                problems.append(f"cell {index} reads `{name}` ({where}) and cell {other} binds it too: running "
                                f"cell {other} again and then cell {index} sees cell {other}'s value; give one of "
                                "them another name")
    return problems


# ------------------------------------------------------------------------------------------- the course's notebooks


def test_there_are_notebooks_to_check():
    assert len(NOTEBOOKS) >= 10 and any(path.parent.name == "solutions" for path in NOTEBOOKS)


@pytest.mark.parametrize("path", NOTEBOOKS, ids=NOTEBOOK_IDS)
def test_every_cell_can_run_again(path):
    problems = rerun_violations(json.loads(path.read_text(encoding="utf-8")))
    assert not problems, f"{path.relative_to(COURSE)}:\n" + "\n".join(problems)


# ------------------------------------------------------------------------------- the checker, on made-up notebooks


def notebook_of(*sources: str) -> dict:
    """A notebook whose cells are a markdown cell (index 0) and then these code cells (index 1, 2, ...)."""
    cells = [{"cell_type": "markdown", "metadata": {}, "source": "# made up"}]
    cells += [{"cell_type": "code", "metadata": {}, "source": source, "outputs": [], "execution_count": None}
              for source in sources]
    return {"cells": cells, "metadata": {}, "nbformat": 4, "nbformat_minor": 5}


def test_a_notebook_that_is_safe_to_rerun_passes():
    notebook = notebook_of(
        "import torch\nfrom math import sqrt\ncontext = [1, 2, 3]",
        "def total(values):\n    return sum(values) + len(context)\nprint(total(context))",
        "import torch\nfig, ax = plt.subplots()\nax.set_title('x')\n_ = ax.plot(context)",
        "context_ids = torch.tensor(context)\nfor i, value in enumerate(context):\n    print(i, value)",
        "fig, ax = plt.subplots()\nax.bar([1], [2])\nsquares = [i * i for i in context]\n"
        "key = lambda pair: pair[1]\nresult = sorted(enumerate(squares), key=key)",
        "%timeit sqrt(2)\n!ls\ntry:\n    x = 1\nexcept ValueError as error:\n    print(error)",
        "%%time\nrates = {name: 1.0 for name in ['a', 'b']}",
        "%%bash\necho not python",
    )
    assert rerun_violations(notebook) == []


def test_a_later_cell_that_rebinds_what_an_earlier_one_read_fails():
    notebook = notebook_of("context = [1, 2]", "print(len(context))", "context = torch.tensor([1, 2])")
    assert rerun_violations(notebook) == [
        "cell 2 reads `context` (bound in cell 1) and cell 3 rebinds it: running cell 2 again after cell 3 sees "
        "cell 3's value; give it another name"]


def test_an_earlier_cell_that_binds_what_a_later_one_reads_from_another_fails():
    notebook = notebook_of("context = ['The', 'quick']\nprint(context)", "context = torch.tensor([1, 2])",
                           "print(context.shape)")
    assert rerun_violations(notebook) == [
        "cell 3 reads `context` (bound in cell 2) and cell 1 binds it too: running cell 1 again and then cell 3 "
        "sees cell 1's value; give one of them another name"]


def test_rebinding_a_function_a_cell_called_fails():
    notebook = notebook_of("def rate(x):\n    return x / 2", "print(rate(3))", "rate = {'a': 1}")
    assert rerun_violations(notebook) == [
        "cell 2 reads `rate` (bound in cell 1) and cell 3 rebinds it: running cell 2 again after cell 3 sees "
        "cell 3's value; give it another name"]


def test_a_global_a_called_function_reads_counts_for_the_calling_cell():
    defined = notebook_of("scale = 2", "def scaled(x):\n    return helper(x) * 1\ndef helper(x):\n    return x * scale",
                          "print(scaled(3))", "scale = 3")
    assert rerun_violations(defined) == [
        "cell 3 reads `scale` (bound in cell 1) and cell 4 rebinds it: running cell 3 again after cell 4 sees "
        "cell 4's value; give it another name"]
    only_defined = notebook_of("def scaled(x):\n    return x * scale", "scale = 3", "print(scaled(1))")
    assert rerun_violations(only_defined) == []


def test_shadowing_a_builtin_an_earlier_cell_uses_fails():
    problems = rerun_violations(notebook_of("print(max([1, 2]))", "max = 3"))
    assert problems == ["cell 1 reads `max` (a builtin or unbound) and cell 2 rebinds it: running cell 1 again "
                        "after cell 2 sees cell 2's value; give it another name"]


@pytest.mark.parametrize("cell", [
    "x = x + 1",
    "total += 1",
    "context = torch.tensor(context)",
    "for x in x:\n    print(x)",
    "del x",
    "print(peek())\nx = 5",  # the function reads x before the cell rebinds it
    "if (x := x * 2):\n    pass",
])
def test_a_cell_that_reads_a_name_then_rebinds_it_fails(cell):
    name = "total" if "total" in cell else "context" if "context" in cell else "x"
    notebook = notebook_of("x = 1\ntotal = 0\ncontext = [1]\ndef peek():\n    return x", cell)
    problems = rerun_violations(notebook)
    assert problems and problems[0].startswith(f"cell 2 reads `{name}` and then rebinds it"), problems


def test_the_same_import_again_is_no_rebinding_but_another_one_is():
    same = notebook_of("import numpy as np", "print(np.pi)", "import numpy as np")
    assert rerun_violations(same) == []
    other = notebook_of("import numpy as np", "print(np.pi)", "import torch as np")
    assert len(rerun_violations(other)) == 1


def test_ipython_lines_are_skipped_but_kept_statements_read():
    assert python_source("%matplotlib inline\n!pip list\nfiles = !ls\n%timeit -n 3 f(x)") == (
        "pass\npass\nfiles = None\nf(x)")
    assert python_source("%%writefile a.py\nprint(1)") is None
    assert rerun_violations(notebook_of("x = 1", "%time y = x", "x = 2")) != []


# --------------------------------------------------------------------------------- the premise, on a real kernel


def run_every_code_cell_twice(notebook, folder: Path) -> None:
    """Execute ``notebook`` (an nbformat node) on a fresh kernel, each code cell twice in a row; a cell that fails
    raises nbclient's ``CellExecutionError``."""
    import uuid

    import nbformat
    from nbclient import NotebookClient

    twice = []
    for cell in notebook.cells:
        twice.append(cell)
        if cell.cell_type == "code":
            again = nbformat.from_dict(json.loads(json.dumps(cell)))
            again["id"] = uuid.uuid4().hex[:8]
            twice.append(again)
    notebook.cells = twice
    NotebookClient(notebook, timeout=600, kernel_name="python3", resources={"metadata": {"path": str(folder)}}).execute()


@pytest.mark.slow
def test_notebook_00_runs_with_every_code_cell_executed_twice_in_a_row():
    """What the static rules predict, shown on a kernel: each code cell of notebook 00 runs twice in a row."""
    import nbformat

    run_every_code_cell_twice(nbformat.read(COURSE / "00_setup_and_baseline.ipynb", as_version=4), COURSE)


@pytest.mark.slow
def test_running_twice_catches_a_cell_that_rebinds_what_it_read(tmp_path):
    """The dynamic check can fail: the made-up cell of rule (b) breaks on its second run."""
    import nbformat
    from nbclient.exceptions import CellExecutionError

    notebook = nbformat.from_dict(notebook_of("x = 1", "x = x + 1\nassert x == 2"))
    with pytest.raises(CellExecutionError):
        run_every_code_cell_twice(notebook, tmp_path)
