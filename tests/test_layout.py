"""The package's layout rules, checked on its source (no import of the package needed).

- no import cycle between modules of ``xcorr_app``, counting imports inside functions;
- no module imports a ``_private`` name from another module of the package (a name that other
  modules need is public in its one home);
- a module imports another subpackage only through that package (``from ..correlate import
  choose_method``), never one of its modules: each subpackage's ``__init__`` exports what the
  others use (tests and tools may import private modules; the package may not);
- no module is longer than :data:`MAX_LINES` lines;
- data flows one way: the layers below never import the layers above (:data:`LAYERS`);
- every CUDA source path (``*.cu``, ``*.cuh``) that the code or the docs name exists.
"""

import ast
import re
from pathlib import Path, PurePosixPath

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "xcorr_app"
ROOT = PACKAGE.parent
#: a CUDA source named in a text: a path or a file name ending in .cu or .cuh (``<x>`` and
#: ``*`` stand for any name)
CUDA_NAME = re.compile(r"(?<![\w./<>*-])[\w<>*-][\w./<>*-]*\.cuh?(?![\w-])")
MAX_LINES = 500
#: subpackage -> its layer; a module may import only from its own layer or those below
LAYERS = {"napari": 7, "cli": 6, "bench": 6, "distributed": 5, "dask": 5, "alignment": 4,
          "filters": 3, "conv": 3, "registration": 3, "correlate": 2, "io": 1, "_cuda": 1,
          "backend": 0, "errors": 0, "_version": 0, "_config": 0, "__init__": 7, "__main__": 7,
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


def imports(mods: dict):
    """Yield ``(importer, imported module, imported name or None)`` for every import statement
    of the package, top level and inside functions alike."""
    for name, path in mods.items():
        tree = ast.parse(path.read_text())
        is_package = path.name == "__init__.py"
        for node in ast.walk(tree):
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
            elif is_package and _is_lazy_attach(node):  # (a package's names at first use)
                for key, names in _lazy_names(node):
                    for attr in names:
                        yield name, f"{name}.{key}", attr


def _is_lazy_attach(node) -> bool:
    """``lazy_loader.attach(__name__, submod_attrs={...})``: the package imports each module's
    names when first asked for them, as ``from .module import names`` would at once."""
    return isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) \
        and node.func.attr == "attach" and getattr(node.func.value, "id", "") == "lazy_loader"


def _lazy_names(node):
    """``(module, names)`` of a :func:`_is_lazy_attach` call's ``submod_attrs``."""
    for kw in node.keywords:
        if kw.arg == "submod_attrs":
            for key, value in zip(kw.value.keys, kw.value.values):
                yield key.value, [e.value for e in value.elts]


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


def test_no_module_over_the_limit():
    long = {name: n for name, path in modules().items()
            if (n := len(path.read_text().splitlines())) > MAX_LINES}
    assert long == {}


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
        (pkg / "correlate/__init__.py").write_text(
            "import lazy_loader\n\n__getattr__, __dir__, _ = lazy_loader.attach(\n"
            "    __name__, submod_attrs={\"_c\": [\"g\"]})\n")
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
