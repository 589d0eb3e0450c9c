"""The package's layout rules, checked on its source (no import of the package needed).

- no import cycle between modules of ``xcorr_app``, counting imports inside functions;
- no module imports a ``_private`` name from another module of the package (a name that other
  modules need is public in its one home);
- a module imports another subpackage only through that package (``from ..correlate import
  choose_method``), never one of its modules: each subpackage's ``__init__`` exports what the
  others use (tests and tools may import private modules; the package may not);
- a package that imports its names at first use declares them once, in its type stub
  ``__init__.pyi`` (``from .module import name``, read by ``lazy_loader.attach_stub``), and
  every name there exists in the module it names (:func:`stub_problems`);
- no function's body is longer than :data:`MAX_FUNCTION_LINES` lines (its docstring left out)
  unless :data:`LONG_FUNCTIONS` says why; modules are cut by concept, never to a line count;
- data flows one way: the layers below never import the layers above (:data:`LAYERS`);
- a test imports a name a package exports from that package, not from the private module
  behind it (:func:`privately_imported_public_names`; :data:`PRIVATE_ON_PURPOSE` says why a
  file may do otherwise);
- every CUDA source path (``*.cu``, ``*.cuh``) that the code or the docs name exists;
- every Python file a kernel's comment names exists, and so does the name it points at there
  (:func:`python_pointers`);
- comments and docstrings say why, without dates or device-and-figure lines: those go to
  ``docs/performance.md`` (:func:`dated_or_device_figures`; :data:`PENDING_FIGURES` lists the
  files not cleaned yet).
"""

import ast
import bisect
import io
import re
import tokenize
from pathlib import Path, PurePosixPath

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "xcorr_app"
ROOT = PACKAGE.parent
#: a CUDA source named in a text: a path or a file name ending in .cu or .cuh (``<x>`` and
#: ``*`` stand for any name)
CUDA_NAME = re.compile(r"(?<![\w./<>*-])[\w<>*-][\w./<>*-]*\.cuh?(?![\w-])")
#: the longest function body (lines from its first statement after the docstring to its end)
MAX_FUNCTION_LINES = 150
#: ``"module:function"`` -> why it may be longer than :data:`MAX_FUNCTION_LINES` (none today)
LONG_FUNCTIONS: dict = {}
#: subpackage -> its layer; a module may import only from its own layer or those below
LAYERS = {"napari": 7, "cli": 6, "bench": 6, "distributed": 5, "dask": 5, "alignment": 4,
          "filters": 3, "conv": 3, "registration": 3, "correlate": 2, "io": 1, "_cuda": 1,
          "backend": 0, "_first_run": 0, "_environment": 0, "errors": 0, "_version": 0,
          "_config": 0, "_samples": 0, "_run_options": 4, "__init__": 7,
          "__main__": 7,
          "streaming": 2}


def module_name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts)


def modules() -> dict:
    return {module_name(p): p for p in sorted(PACKAGE.rglob("*.py"))}


def resolve(current: str, is_package: bool, node: ast.ImportFrom) -> str:
    if node.level == 0:
        return node.module or ""
    base = current.split(".")
    if not is_package:
        base = base[:-1]
    base = base[:len(base) - (node.level - 1)]
    return ".".join(base + ([node.module] if node.module else []))


def stub_of(path: Path):
    """A package's type stub (``__init__.pyi`` beside its ``__init__.py``), or None."""
    stub = path.with_suffix(".pyi")
    return stub if path.name == "__init__.py" and stub.is_file() else None


def imports(mods: dict):
    """Yield ``(importer, imported module, imported name or None)`` for every import statement
    of the package, top level and inside functions alike.  A package's type stub counts as its
    own source: its ``from .module import names`` are the names the package imports at first
    use (``lazy_loader.attach_stub``), as those lines would at once."""
    for name, path in mods.items():
        is_package = path.name == "__init__.py"
        sources = [path] + ([stub_of(path)] if stub_of(path) else [])
        for node in (n for src in sources for n in ast.walk(ast.parse(src.read_text()))):
            if isinstance(node, ast.Import):
                for alias in node.names:
                    if alias.name.startswith("xcorr_app"):
                        yield name, alias.name, None
            elif isinstance(node, ast.ImportFrom):
                target = resolve(name, is_package, node)
                if not target.startswith("xcorr_app"):
                    continue
                for alias in node.names:
                    sub = f"{target}.{alias.name}"
                    yield name, (sub if sub in mods else target), alias.name


def graph(mods: dict) -> dict:
    edges = {m: set() for m in mods}
    for importer, target, _ in imports(mods):
        if target in mods and target != importer:
            edges[importer].add(target)
    return edges


def cycles(edges: dict) -> list:
    """Strongly connected components with more than one module (Tarjan)."""
    index, low, stack, on, out = {}, {}, [], set(), []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in edges[v]:
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

    for v in edges:
        if v not in index:
            visit(v)
    return out


def parent_package(module: str) -> str:
    return module.rsplit(".", 1)[0]


def layer_of(module: str) -> int:
    parts = module.split(".")
    return LAYERS[parts[1] if len(parts) > 1 else "__init__"]


def test_no_import_cycles():
    edges = graph(modules())
    # a package's __init__ re-exports its own modules: those edges point down into it
    assert cycles(edges) == []


def test_no_private_names_imported_across_modules():
    bad = [f"{importer} imports {name} from {target}"
           for importer, target, name in imports(modules())
           if name and name.startswith("_") and not name.startswith("__")]
    assert bad == []


def is_package(module: str) -> bool:
    return (PACKAGE.parent / module.replace(".", "/") / "__init__.py").exists()


def reaches_into(importer: str, target: str) -> bool:
    """Whether ``importer`` imports ``target``, a module inside another (sub)package than its
    own, rather than that package (``xcorr_app.<sub>``, ``xcorr_app.alignment.rigid``): a
    package's modules are its own business; the top-level modules (``xcorr_app.backend``) are
    everyone's."""
    if is_package(target) or "." not in target:
        return False
    holder = target.rsplit(".", 1)[0]
    own = importer if is_package(importer) else importer.rsplit(".", 1)[0]
    return holder not in (own, "xcorr_app")


def test_other_subpackages_are_imported_through_their_package():
    mods = modules()
    reaching = [f"{importer} imports {name or target} from {target}"
                for importer, target, name in imports(mods)
                if target in mods and reaches_into(importer, target)]
    assert reaching == []


def test_a_package_and_its_own_modules_may_be_imported():
    assert not reaches_into("xcorr_app.alignment._a", "xcorr_app.correlate")
    assert not reaches_into("xcorr_app.correlate", "xcorr_app.correlate._c")
    assert not reaches_into("xcorr_app.correlate._c", "xcorr_app.correlate._d")
    assert reaches_into("xcorr_app.dask", "xcorr_app.distributed._dask")
    assert reaches_into("xcorr_app.conv._im2win", "xcorr_app._cuda.loader")


def body_lines(node) -> int:
    """Lines of a function from its first statement after the docstring to its end."""
    body = node.body
    first = body[1] if len(body) > 1 and isinstance(body[0], ast.Expr) \
        and isinstance(body[0].value, ast.Constant) and isinstance(body[0].value.value, str) \
        else body[0]
    return node.end_lineno - first.lineno + 1


def long_functions(mods: dict) -> dict:
    """``{"module:function": body lines}`` of the functions (methods and nested ones too) whose
    body is longer than :data:`MAX_FUNCTION_LINES`."""
    return {f"{name}:{node.name}": n for name, path in mods.items()
            for node in ast.walk(ast.parse(path.read_text()))
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
            and (n := body_lines(node)) > MAX_FUNCTION_LINES}


def test_no_function_over_the_limit():
    """A function too long to read at once does more than one thing: split it by concept, or
    say in :data:`LONG_FUNCTIONS` why not."""
    assert {k: n for k, n in long_functions(modules()).items() if k not in LONG_FUNCTIONS} == {}
    assert all(LONG_FUNCTIONS.values())  # every exception says why


def test_the_function_check_can_fail(tmp_path):
    doc = '    """A docstring does not count."""\n' + "    x = 1\n" * 10
    (tmp_path / "m.py").write_text("def short():\n" + doc + "\n\ndef long():\n" + doc
                                   + "    y = 2\n" * MAX_FUNCTION_LINES)
    assert long_functions({"m": tmp_path / "m.py"}) == {"m:long": MAX_FUNCTION_LINES + 10}


def test_data_flows_one_way():
    mods = modules()
    upward = [f"{importer} -> {target}" for importer, target, _ in imports(mods)
              if target in mods and layer_of(target) > layer_of(importer)
              and not target.startswith(importer + ".")]
    assert upward == []


def test_every_subpackage_module_is_private_or_a_package():
    """Inside the topic subpackages, modules are private (``_name.py``); the public names are
    those each subpackage's ``__init__`` re-exports."""
    public = [name for name, path in modules().items()
              if name.count(".") == 2 and path.name != "__init__.py"
              and not path.name.startswith("_") and not name.startswith("xcorr_app._cuda")]
    assert public == []


@pytest.mark.parametrize("rule", ["cycle", "private", "layer", "reach", "nested", "lazy cycle"])
def test_the_checks_can_fail(tmp_path, rule, monkeypatch):
    """The checker finds a planted cycle (also through a package's names imported at first
    use), private import, upward import and import of another subpackage's module."""
    pkg = tmp_path / "xcorr_app"
    (pkg / "correlate").mkdir(parents=True)
    (pkg / "alignment").mkdir()
    (pkg / "alignment" / "rigid").mkdir()
    for f in ("__init__.py", "correlate/__init__.py", "alignment/__init__.py",
              "alignment/rigid/__init__.py"):
        (pkg / f).write_text("")
    (pkg / "alignment/rigid/_m.py").write_text("def h(): pass\n")
    body = {"cycle": ("from ..alignment._a import f\n", "from ..correlate._c import g\n"),
            "private": ("", "from ..correlate._c import _hidden\n"),
            "layer": ("from ..alignment._a import f\n", ""),
            "reach": ("", "from ..correlate._c import g\n"),
            "nested": ("", "from .rigid._m import h\n"),
            "lazy cycle": ("from ..alignment._a import f\n", "from ..correlate import g\n")}[rule]
    if rule == "lazy cycle":
        (pkg / "correlate/__init__.py").write_text(ATTACH_STUB)
        (pkg / "correlate/__init__.pyi").write_text("from ._c import g\n")
    (pkg / "correlate/_c.py").write_text(body[0] + "def g(): pass\n_hidden = 1\n")
    (pkg / "alignment/_a.py").write_text(body[1] + "def f(): pass\n")
    monkeypatch.setattr(__import__(__name__), "PACKAGE", pkg, raising=False)
    mods = {module_name(p): p for p in sorted(pkg.rglob("*.py"))}
    found = {
        "cycle": bool(cycles(graph(mods))),
        "lazy cycle": bool(cycles(graph(mods))),
        "private": any(n and n.startswith("_") for _, _, n in imports(mods)),
        "layer": any(layer_of(t) > layer_of(i) for i, t, _ in imports(mods) if t in mods),
        "reach": any(reaches_into(i, t) for i, t, _ in imports(mods) if t in mods),
        "nested": any(reaches_into(i, t) for i, t, _ in imports(mods) if t in mods),
    }
    assert found[rule]


#: what a package that imports its names at first use holds besides its docstring
ATTACH_STUB = ("import lazy_loader\n\n"
               "__getattr__, __dir__, __all__ = lazy_loader.attach_stub(__name__, __file__)\n")


def top_level_statements(body: list):
    """The statements of a module's top level, those inside its top-level ``if``, ``try`` and
    ``with`` blocks too (not those of its functions and classes)."""
    for node in body:
        yield node
        for block in ("body", "orelse", "finalbody", "handlers"):
            inner = getattr(node, block, None)
            if isinstance(inner, list) and not isinstance(
                    node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                yield from top_level_statements(inner)


def top_level_names(path: Path) -> set:
    """The names a module defines or imports at its top level; a package with a type stub: the
    names of its stub (those it imports at first use)."""
    stub = stub_of(path)
    if stub is not None:
        return {alias.asname or alias.name for node in ast.parse(stub.read_text()).body
                if isinstance(node, ast.ImportFrom) for alias in node.names}
    names = set()
    for node in top_level_statements(ast.parse(path.read_text()).body):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
            for target in (node.targets if isinstance(node, ast.Assign) else [node.target]):
                names.update(n.id for n in ast.walk(target) if isinstance(n, ast.Name))
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            names.update((a.asname or a.name).split(".")[0] for a in node.names)
    return names


def source_of(package: Path, module: str):
    """The file of ``module`` (dotted, relative to ``package``): ``m.py`` or ``m/__init__.py``,
    or None."""
    base = package.joinpath(*module.split("."))
    return next((p for p in (base.with_suffix(".py"), base / "__init__.py") if p.is_file()), None)


def is_attach_stub_call(node) -> bool:
    """``lazy_loader.attach_stub(__name__, __file__)``."""
    return isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) \
        and node.func.attr == "attach_stub" and getattr(node.func.value, "id", "") == "lazy_loader"


def init_problems(init: Path, stub, root: Path) -> list:
    """What is wrong with a package's ``__init__.py`` in the light of its stub (or its lack);
    paths from ``root``."""
    where = init.relative_to(root)
    tree = ast.parse(init.read_text())
    calls = [n for n in ast.walk(tree) if isinstance(n, ast.Call)]
    out = [f"{where}: lazy_loader.attach: declare the names in __init__.pyi and call "
           "lazy_loader.attach_stub(__name__, __file__)"
           for n in calls if isinstance(n.func, ast.Attribute) and n.func.attr == "attach"
           and getattr(n.func.value, "id", "") == "lazy_loader"]
    stub_calls = [n for n in calls if is_attach_stub_call(n)]
    if stub is None:
        return out + [f"{where}: lazy_loader.attach_stub without __init__.pyi"] * bool(stub_calls)
    if not stub_calls:
        out.append(f"{where}: has __init__.pyi but does not call lazy_loader.attach_stub")
    for node in top_level_statements(tree.body):
        targets = (node.targets if isinstance(node, ast.Assign) else [node.target]
                   if isinstance(node, (ast.AnnAssign, ast.AugAssign)) else [])
        for target in targets:
            if isinstance(target, ast.Name) and target.id == "__all__":
                out.append(f"{where}:{node.lineno}: hand-written __all__ beside __init__.pyi")
            elif is_attach_stub_call(node.value) and not (
                    isinstance(target, ast.Tuple) and [getattr(e, "id", None) for e in
                                                      target.elts][2:] == ["__all__"]):
                out.append(f"{where}:{node.lineno}: unpack lazy_loader.attach_stub into "
                           "__getattr__, __dir__, __all__")
    return out


def stub_problems(package: Path) -> list:
    """Each package's type stub (``__init__.pyi``), checked against the code: its ``__init__.py``
    calls ``lazy_loader.attach_stub`` and writes no ``__all__`` of its own (the stub's names are
    the package's ``__all__``); every line of the stub is ``from .module import names`` (what
    ``attach_stub`` reads: no other levels, no ``*``, no renaming, which it would ignore) or
    ``from . import submodule``; the module exists and defines or imports each name at its top
    level.  Also: no ``__init__.py`` uses ``lazy_loader.attach``, whose names the layout checks
    would not see."""
    out = []
    for init in sorted(package.rglob("__init__.py")):
        stub = stub_of(init)
        out += init_problems(init, stub, package.parent)
        if stub is None:
            continue
        where = stub.relative_to(package.parent)
        for node in ast.walk(ast.parse(stub.read_text())):
            if isinstance(node, ast.Import) or isinstance(node, ast.ImportFrom) and node.level != 1:
                out.append(f"{where}:{node.lineno}: only `from .module import names` lines")
                continue
            if not isinstance(node, ast.ImportFrom):
                continue
            for alias in node.names:
                if alias.name == "*":
                    out.append(f"{where}:{node.lineno}: lazy_loader reads no `import *`")
                elif alias.asname not in (None, alias.name):
                    out.append(f"{where}:{node.lineno}: {alias.name} as {alias.asname}: "
                               f"lazy_loader would export it as {alias.name}")
                elif node.module is None:
                    if source_of(init.parent, alias.name) is None:
                        out.append(f"{where}:{node.lineno}: no submodule {alias.name}")
                elif (src := source_of(init.parent, node.module)) is None:
                    out.append(f"{where}:{node.lineno}: no module .{node.module}")
                elif alias.name not in top_level_names(src):
                    out.append(f"{where}:{node.lineno}: .{node.module} has no {alias.name}")
    return out


def test_package_stubs_declare_existing_names_once():
    """A package's public names are written once, in its ``__init__.pyi``, and exist where the
    stub says they are: a name renamed or moved fails here, not at its first use."""
    stubs = sorted(PACKAGE.rglob("__init__.pyi"))
    assert stubs  # (the check runs on something)
    assert stub_problems(PACKAGE) == []


def test_the_stub_check_can_fail(tmp_path, monkeypatch):
    pkg = tmp_path / "xcorr_app"
    for sub in ("good", "bad", "old", "hand", "nostub", "deep/_inner"):
        (pkg / sub).mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "deep" / "_inner" / "__init__.py").write_text("from ._x import y\n")
    (pkg / "deep" / "__init__.py").write_text('"""Doc."""\n\n' + ATTACH_STUB)
    (pkg / "deep" / "__init__.pyi").write_text("from ._inner import y\nfrom . import _inner\n")
    (pkg / "good" / "_m.py").write_text(
        "import os.path\nfrom ._n import b as c\nA, (B, C) = 1, (2, 3)\n"
        "try:\n    D = 1\nexcept ImportError:\n    pass\n\n\ndef f():\n    inner = 1\n")
    (pkg / "good" / "__init__.py").write_text(ATTACH_STUB)
    (pkg / "good" / "__init__.pyi").write_text("from ._m import (os, c, A, B, C, D,\n    f)\n")
    (pkg / "bad" / "_m.py").write_text("def f():\n    inner = 1\n")
    (pkg / "bad" / "__init__.py").write_text(
        "import lazy_loader\n\n__getattr__, __dir__, _ = lazy_loader.attach_stub(__name__, "
        "__file__)\n__all__ = ['f']\n")
    (pkg / "bad" / "__init__.pyi").write_text(
        "from ._m import f, inner, g as h\nfrom ._gone import x\nfrom ..good import A\n"
        "from . import _nope\nfrom ._m import *\n")
    (pkg / "old" / "__init__.py").write_text(
        "import lazy_loader\n\n__getattr__, __dir__, __all__ = lazy_loader.attach(\n"
        "    __name__, submod_attrs={'_m': ['f']})\n")
    (pkg / "hand" / "__init__.py").write_text("from ._m import f\n\n__all__ = ['f']\n")
    (pkg / "hand" / "__init__.pyi").write_text("from ._m import f\n")
    (pkg / "hand" / "_m.py").write_text("def f(): pass\n")
    (pkg / "nostub" / "__init__.py").write_text(ATTACH_STUB)
    assert stub_problems(pkg) == [
        "xcorr_app/bad/__init__.py:3: unpack lazy_loader.attach_stub into __getattr__, __dir__, "
        "__all__",
        "xcorr_app/bad/__init__.py:4: hand-written __all__ beside __init__.pyi",
        "xcorr_app/bad/__init__.pyi:1: ._m has no inner",
        "xcorr_app/bad/__init__.pyi:1: g as h: lazy_loader would export it as g",
        "xcorr_app/bad/__init__.pyi:2: no module ._gone",
        "xcorr_app/bad/__init__.pyi:3: only `from .module import names` lines",
        "xcorr_app/bad/__init__.pyi:4: no submodule _nope",
        "xcorr_app/bad/__init__.pyi:5: lazy_loader reads no `import *`",
        "xcorr_app/hand/__init__.py: has __init__.pyi but does not call lazy_loader.attach_stub",
        "xcorr_app/hand/__init__.py:3: hand-written __all__ beside __init__.pyi",
        "xcorr_app/nostub/__init__.py: lazy_loader.attach_stub without __init__.pyi",
        "xcorr_app/old/__init__.py: lazy_loader.attach: declare the names in __init__.pyi and "
        "call lazy_loader.attach_stub(__name__, __file__)"]
    # the layout checks read a stub's lines as the package's imports
    monkeypatch.setattr(__import__(__name__), "PACKAGE", pkg, raising=False)
    mods = {module_name(p): p for p in sorted(pkg.rglob("*.py"))}
    assert ("xcorr_app.good", "xcorr_app.good._m", "f") in set(imports(mods))


#: test files that import a public name from its private module on purpose (path from the
#: repository's root -> why); every other test imports it from its public home
PRIVATE_ON_PURPOSE = {}


def is_private_module(module: str) -> bool:
    return any(p.startswith("_") and not p.startswith("__") for p in module.split("."))


def origin(mods: dict, module: str, name: str, seen=frozenset()) -> tuple:
    """Where ``name`` of ``module`` is defined, ``(module, name)``: followed through the
    ``from ... import`` lines of the modules' top level (a package's stub too); a module
    imported as a name is ``(module, None)``."""
    path = mods.get(module)
    if path is None or (module, name) in seen:
        return module, name
    for src in filter(None, (stub_of(path), path)):
        for node in top_level_statements(ast.parse(src.read_text()).body):
            for alias in node.names if isinstance(node, ast.ImportFrom) else ():
                if (alias.asname or alias.name) == name:
                    target = resolve(module, path.name == "__init__.py", node)
                    if f"{target}.{alias.name}" in mods:
                        return f"{target}.{alias.name}", None
                    return origin(mods, target, alias.name, seen | {(module, name)})
    return module, name


def exported_names(path: Path) -> set:
    """The public names of a package (its stub's) or of a module (its ``__all__``)."""
    if stub_of(path) is not None:
        return top_level_names(path)
    for node in top_level_statements(ast.parse(path.read_text()).body):
        if isinstance(node, ast.Assign) and any(getattr(t, "id", None) == "__all__"
                                                for t in node.targets):
            return {e.value for e in getattr(node.value, "elts", ())
                    if isinstance(e, ast.Constant)}
    return set()


def public_homes(mods: dict) -> dict:
    """``{(defining module, name): {public packages that export it by that name}}``: the
    packages and the modules outside the private ones (``xcorr_app.dask``), by their stub or
    ``__all__``."""
    homes = {}
    for module, path in mods.items():
        if not is_private_module(module) and module != "xcorr_app":
            for name in exported_names(path):
                found = origin(mods, module, name)
                if found[1] == name:  # (not renamed: align_bench is bench._align's main)
                    homes.setdefault(found, set()).add(module)
    return homes


def privately_imported_public_names(tests: Path, mods: dict) -> list:
    """Each ``from xcorr_app.<...>._private import name`` of the test files where a public
    package exports that same ``name`` (the one the private module defines or imports): the
    test is then written against the private module rather than the package's interface."""
    homes, found = public_homes(mods), []
    for path in sorted(tests.rglob("*.py")):
        where = path.relative_to(tests.parent).as_posix()
        if where in PRIVATE_ON_PURPOSE:
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if not (isinstance(node, ast.ImportFrom) and node.level == 0 and node.module
                    and node.module.startswith("xcorr_app") and is_private_module(node.module)):
                continue
            for alias in node.names:
                home = homes.get(origin(mods, node.module, alias.name), set())
                if home and not alias.name.startswith("_"):
                    best = max(home, key=lambda h: (node.module.startswith(h + "."), len(h)))
                    found.append(f"{where}:{node.lineno}: {alias.name} from {node.module}: "
                                 f"import it from {best}")
    return found


def test_tests_import_public_names_from_their_public_home():
    """A test imports what a package exports from the package (``from xcorr_app.correlate
    import output_shape``), not from the private module behind it, so that moving a name
    between a package's modules moves no test; private helpers are imported from their
    module, and :data:`PRIVATE_ON_PURPOSE` says why a file may do otherwise."""
    assert privately_imported_public_names(ROOT / "tests", modules()) == []
    assert all(PRIVATE_ON_PURPOSE.values())  # every exception says why


def test_the_public_name_check_can_fail(tmp_path, monkeypatch):
    pkg, tests = tmp_path / "xcorr_app", tmp_path / "tests"
    (pkg / "sub").mkdir(parents=True)
    tests.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "sub" / "__init__.py").write_text(ATTACH_STUB)
    (pkg / "sub" / "__init__.pyi").write_text("from ._a import f, g\n")
    (pkg / "sub" / "_a.py").write_text("from ._b import g\n\ndef f(): pass\n\n"
                                       "def h(): pass\n\ndef _p(): pass\n")
    (pkg / "sub" / "_b.py").write_text("def g(): pass\n")
    (tests / "test_x.py").write_text(
        "from xcorr_app.sub import f\nfrom xcorr_app.sub._a import h, _p\n\n\n"
        "def test():\n    from xcorr_app.sub._a import f as ff, g\n"
        "    from xcorr_app.sub._b import g\n")
    monkeypatch.setattr(__import__(__name__), "PACKAGE", pkg, raising=False)
    mods = {module_name(p): p for p in sorted(pkg.rglob("*.py"))}
    assert privately_imported_public_names(tests, mods) == [
        "tests/test_x.py:6: f from xcorr_app.sub._a: import it from xcorr_app.sub",
        "tests/test_x.py:6: g from xcorr_app.sub._a: import it from xcorr_app.sub",
        "tests/test_x.py:7: g from xcorr_app.sub._b: import it from xcorr_app.sub"]


def texts_naming_kernels() -> list:
    """The files whose CUDA names must exist: the package's code, the kernels, the docs."""
    return sorted({*PACKAGE.rglob("*.py"), *(ROOT / "kernels").rglob("*.cu*"),
                   *(ROOT / "docs").glob("*.md"), ROOT / "README.md"})


def tree_files(root: Path) -> list:
    """The files of the repository (``/``-separated, from its root), build outputs left out."""
    skip = {"build", "dist", "__pycache__"}
    return [PurePosixPath("/", *p.relative_to(root).parts) for p in root.rglob("*")
            if p.is_file() and not any(part.startswith(".") or part in skip
                                       or part.endswith(".egg-info")
                                       for part in p.relative_to(root).parts)]


def missing_cuda_name(name: str, files: list) -> bool:
    """Whether ``name`` names none of ``files``: a path is read from the repository's root,
    a file name or a path that starts with a pattern (``*``, ``<x>``: any name) matches its
    last parts anywhere."""
    pattern = re.sub(r"<[^>]*>", "*", name)
    if "/" in pattern and "*" not in pattern.split("/")[0]:
        pattern = "/" + pattern
    return not any(f.match(pattern) for f in files)


def test_every_named_cuda_source_exists():
    """A docstring, comment or doc naming a kernel source that moved or never existed points
    its reader nowhere: every ``*.cu``/``*.cuh`` path named must exist."""
    files = tree_files(ROOT)
    stale = [f"{path.relative_to(ROOT)}:{n}: {name}"
             for path in texts_naming_kernels()
             for n, line in enumerate(path.read_text().splitlines(), 1)
             for name in CUDA_NAME.findall(line) if missing_cuda_name(name, files)]
    assert stale == []


def test_the_cuda_name_check_can_fail(tmp_path):
    (tmp_path / "kernels" / "fam").mkdir(parents=True)
    (tmp_path / "kernels" / "fam" / "k.cu").write_text("")
    text = ("see `kernels/fam/k.cu`, k.cu, kernels/<family>/*.cu, <family>/*.cu; gone: "
            "fam/cuda/k.cu, fam/k.cu, old.cuh, <family>/cuda/*.cu")
    files = tree_files(tmp_path)
    assert [n for n in CUDA_NAME.findall(text) if missing_cuda_name(n, files)] == [
        "fam/cuda/k.cu", "fam/k.cu", "old.cuh", "<family>/cuda/*.cu"]


def kernel_sources(root: Path) -> list:
    return sorted(p for p in (root / "kernels").rglob("*") if p.suffix in (".cu", ".cuh"))


def kernel_comments(text: str) -> list:
    """``(line, text, starts)`` of every comment of a CUDA source, by its first line: a ``/* */``
    block (its lines joined, ``starts`` ``[0]``), or a run of ``//`` comments on consecutive lines
    joined by spaces, as a pointer may wrap onto the next line (``starts``: where each line's
    part begins in ``text``).  Simple on purpose: ``//`` and ``/*`` inside string literals count
    as comments too."""
    out, run = [], None
    for m in re.finditer(r"/\*.*?\*/", text, re.S):
        out.append((text.count("\n", 0, m.start()) + 1, " ".join(m.group()[2:-2].split()), [0]))
    text = re.sub(r"/\*.*?\*/", lambda m: "\n" * m.group().count("\n"), text, flags=re.S)
    for n, line in enumerate(text.splitlines(), 1):
        k = line.find("//")
        if k < 0:
            run = None
        elif run is not None and run[0] + len(run[2]) == n:
            run[2].append(len(run[1]) + 1)
            run[1] += " " + line[k + 2:].strip()
        else:
            run = [n, line[k + 2:].strip(), [0]]
            out.append(run)
    return sorted(tuple(c) for c in out)


def line_at(comment, offset: int) -> int:
    """The source line of ``offset`` in a :func:`kernel_comments` comment's text."""
    line, _, starts = comment
    return line + bisect.bisect_right(starts, offset) - 1


def comment_lines(comment) -> list:
    """``(line, text)`` of each source line's part of a :func:`kernel_comments` comment."""
    line, text, starts = comment
    ends = starts[1:] + [len(text)]
    return [(line + i, text[a:b].strip()) for i, (a, b) in enumerate(zip(starts, ends))]


#: a Python file named in a kernel's comment, from the repository's root
#: (``xcorr_app/alignment/warp/_warp.py``), and what follows it
PY_POINTER = re.compile(r"(?<![\w./-])((?:[\w.-]+/)*[\w.-]+\.py)\b((?:'s)?\s+[A-Za-z_]\w*(?:\(\))?"
                        r"(?:(?:,\s*|\s+and\s+|\s*\+\s*)[A-Za-z_]\w*(?:\(\))?)*)?")
#: a pointer to Python code written as a dotted name (``_peaks._gather``,
#: ``alignment/_template.periodic_frames``, ``xcorr_app.conv._dynamic_blocking``): write
#: ``path NAME`` instead, which the check can follow
DOTTED_POINTER = re.compile(r"(?<![\w./])(?:xcorr_app\.\w+|(?:\w+/)*_[a-z]\w*\.(?!py\b|cuh?\b)"
                            r"[A-Za-z_]\w*)")


def is_code_name(word: str) -> bool:
    """Whether a word after a path names code rather than being prose: it has an underscore,
    a digit or a capital, or ends in ``()`` (``rows()``, ``samples3d``, ``FORM_IDS``; not
    ``launches``)."""
    return word.endswith("()") or any(c == "_" or c.isdigit() or c.isupper() for c in word)


def python_pointers(comment: str) -> list:
    """``(offset, path, [names])`` of each Python file a kernel comment names.  The pointer
    forms: ``path``, ``path NAME``, ``path's NAME``, ``path NAME()`` and lists after the path
    (``path NAME, NAME and NAME``, ``path NAME + NAME``); the names are those words right after
    the path that look like code (:func:`is_code_name`), up to the first that does not."""
    found = []
    for m in PY_POINTER.finditer(comment):
        words = [w for w in re.findall(r"[A-Za-z_]\w*(?:\(\))?", m.group(2) or "")
                 if w not in ("s", "and")]
        names = []
        for w in words:
            if not is_code_name(w):
                break
            names.append(w.removesuffix("()"))
        found.append((m.start(), m.group(1), names))
    return found


def defined_names(path: Path) -> set:
    """Names a module defines anywhere (functions, classes, methods, assigned names)."""
    names = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            for target in (node.targets if isinstance(node, ast.Assign) else [node.target]):
                names.update(n.id for n in ast.walk(target) if isinstance(n, ast.Name))
    return names


def stale_kernel_pointers(root: Path) -> list:
    """Each kernel comment's pointer to Python code that leads nowhere: a ``*.py`` path missing
    from the repository's root, a name not defined in the file it names, or a dotted pointer."""
    stale = []
    for src in kernel_sources(root):
        where = src.relative_to(root)
        for comment in kernel_comments(src.read_text()):
            for offset, path, names in python_pointers(comment[1]):
                at = f"{where}:{line_at(comment, offset)}"
                if not (root / path).is_file():
                    stale.append(f"{at}: {path} does not exist")
                    continue
                missing = set(names) - defined_names(root / path)
                stale += [f"{at}: {path} defines no {n}" for n in sorted(missing)]
            stale += [f"{where}:{line_at(comment, m.start())}: {m.group()}: write it as `path NAME`"
                      for m in DOTTED_POINTER.finditer(comment[1])]
    return stale


def test_kernel_comments_point_at_existing_code():
    """A kernel's comment that names the Python code launching it or defining its arithmetic
    (``xcorr_app/alignment/warp/_warp.py shift_frames``) points at a file that exists and at a
    name defined there; the reverse direction is :func:`test_every_named_cuda_source_exists`."""
    assert stale_kernel_pointers(ROOT) == []


def test_the_kernel_pointer_check_can_fail(tmp_path):
    (tmp_path / "kernels" / "fam").mkdir(parents=True)
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "_m.py").write_text("class C:\n    def rows(self): pass\n\n"
                                             "def f_1(): pass\nIDS, OTHER = {}, 1\n")
    (tmp_path / "kernels" / "fam" / "k.cu").write_text(
        "// launched by pkg/_m.py f_1 and rows(); ids: pkg/_m.py's IDS, OTHER (pkg/_m.py\n"
        "// launches it; pkg/_m.py f_1,\n// IDS + rows())\n"
        "/* pkg/_m.py gone_name */ int x;  // gone: pkg/_old.py, tools/probe.py f_1\n"
        "// dotted: _m.f_1, pkg/_m.rows, xcorr_app.pkg._m; not pointers: np.fft, cp.async\n")
    assert python_pointers("a/_m.py's IDS, f_1() and x_2 then y; a/_m.py launches F_3") == [
        (0, "a/_m.py", ["IDS", "f_1", "x_2"]), (37, "a/_m.py", [])]
    assert sorted(stale_kernel_pointers(tmp_path)) == [
        "kernels/fam/k.cu:4: pkg/_m.py defines no gone_name",
        "kernels/fam/k.cu:4: pkg/_old.py does not exist",
        "kernels/fam/k.cu:4: tools/probe.py does not exist",
        "kernels/fam/k.cu:5: _m.f_1: write it as `path NAME`",
        "kernels/fam/k.cu:5: pkg/_m.rows: write it as `path NAME`",
        "kernels/fam/k.cu:5: xcorr_app.pkg: write it as `path NAME`"]


#: a date (``2026-11-25``)
DATE = re.compile(r"\b20\d\d-[01]\d-[0-3]\d\b")
#: a device model
DEVICE = re.compile(r"\b(?:H100|H200|A100|V100|RTX)\b")
#: a measured figure: a time, a rate, a speed-up or a share (``0.3 s``, ``55 GB/s``, ``1.2x``)
FIGURE = re.compile(r"\b\d+(?:\.\d+)?(?:\s?(?:ns|us|ms|s)|x|\s?[KMGT]i?B/s|\s?frames/s|%)(?![\w/])")
#: files not cleaned yet (path from the repository's root -> why)
PENDING_FIGURES: dict = {}


def python_comment_lines(path: Path) -> list:
    """``(line, text)`` of a module's comments and of its docstrings' lines (a string that is a
    statement of its own: a module's, class's or function's docstring, or an attribute's)."""
    text = path.read_text()
    lines = text.splitlines()
    out = [(t.start[0], t.string) for t in tokenize.generate_tokens(io.StringIO(text).readline)
           if t.type == tokenize.COMMENT]
    for node in ast.walk(ast.parse(text)):
        if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant) \
                and isinstance(node.value.value, str):
            out += [(n, lines[n - 1]) for n in range(node.lineno, node.end_lineno + 1)]
    return sorted(out)


def dated_or_device_figures(root: Path) -> list:
    """The comment and docstring lines of the package (but its benches, whose figures are what
    they print) and of the kernels that carry a date, or a device model with a measured figure:
    a comment says why in a line; the figures, their device and date go to
    ``docs/performance.md``.  A hardware limit given as the reason stays (``sm_90 has 228 KiB
    of shared memory``, ``an H100's FP32 rate``): it has no date and no measured figure."""
    found = []
    sources = [(p, python_comment_lines(p)) for p in sorted((root / "xcorr_app").rglob("*.py"))
               if "bench" not in p.relative_to(root).parts[1:2]]
    sources += [(p, [x for c in kernel_comments(p.read_text()) for x in comment_lines(c)])
                for p in kernel_sources(root)]
    for path, comments in sources:
        where = path.relative_to(root).as_posix()
        if where in PENDING_FIGURES:
            continue
        found += [f"{where}:{n}: {text.strip()}" for n, text in comments
                  if DATE.search(text) or (DEVICE.search(text) and FIGURE.search(text))]
    return found


def test_comments_carry_no_dates_or_device_figures():
    assert dated_or_device_figures(ROOT) == []
    assert all(PENDING_FIGURES.values())  # every pending file says why


def test_the_figure_check_can_fail(tmp_path):
    (tmp_path / "xcorr_app" / "bench").mkdir(parents=True)
    (tmp_path / "kernels").mkdir()
    (tmp_path / "xcorr_app" / "m.py").write_text(
        '"""Why: a reason.\n\n(measured 2026-11-25)."""\n\nX = 1  # 0.3 s of a run, H100\n'
        'Y = "H100 2026-11-25"  # a string, not a comment\n\n\ndef f():\n'
        '    """sm_90 has 228 KiB of shared memory (an H100\'s); default 20."""\n'
        '    # fine: the H100 default of 132 SMs\n')
    (tmp_path / "xcorr_app" / "bench" / "_b.py").write_text("# 795 frames/s, H100 2026-11-22\n")
    (tmp_path / "kernels" / "k.cu").write_text(
        "// a reason (measured, H200\n// 2026-11-24)\nint x;  /* 1.9 TB/s on an\nH200 */\n"
        "// faster on an H100\n")
    assert dated_or_device_figures(tmp_path) == [
        "xcorr_app/m.py:3: (measured 2026-11-25).\"\"\"",
        "xcorr_app/m.py:5: # 0.3 s of a run, H100",
        "kernels/k.cu:2: 2026-11-24)",
        "kernels/k.cu:3: 1.9 TB/s on an H200"]
