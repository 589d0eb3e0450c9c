"""The base class of correlation plans (``xcorr_app/_cuda/_plancall.c``, and its Python
stand-in where the extension is not built): where a call goes, with what, and what it returns;
the arguments as ``(left, right, out=None, stream=None)``; errors; references. No GPU: the
compiled call is a recording stand-in.  The extension is compiled here from this tree's source
(a checkout has it built only after ``setup.py build_ext --inplace``); a plan's own calls are
tested in ``tests/correlate``."""

import atexit
import gc
import importlib.util
import shutil
import subprocess
import sys
import sysconfig
import tempfile
import weakref
from pathlib import Path

import pytest

from xcorr_app._cuda import launch
from xcorr_app._cuda.launch import PlanCallBase

SOURCE = Path(launch.__file__).with_name("_plancall.c")


def _compiled_base(tmp):
    cc = shutil.which("gcc") or shutil.which("cc")
    include = sysconfig.get_paths()["include"]
    if cc is None or not (Path(include) / "Python.h").exists():
        return None
    ext = tmp / ("_plancall" + sysconfig.get_config_var("EXT_SUFFIX"))
    res = subprocess.run([cc, "-shared", "-fPIC", "-O2", "-Wall", "-Wextra",
                          "-Wno-missing-field-initializers", f"-I{include}", "-o", str(ext),
                          str(SOURCE)], capture_output=True, text=True)
    assert res.returncode == 0 and "warning" not in res.stderr, res.stderr
    spec = importlib.util.spec_from_file_location("_plancall", ext)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.PlanCall


_TMP = tempfile.mkdtemp(prefix="xcorr-plancall-")
atexit.register(shutil.rmtree, _TMP, True)
BUILT = _compiled_base(Path(_TMP))
COMPILED_BASES = [b for b in (BUILT, PlanCallBase if PlanCallBase.__name__ == "PlanCall"
                              else None) if b is not None]
BASES = COMPILED_BASES + [getattr(launch, "_PythonPlanCall")]
compiled = pytest.mark.parametrize("base", COMPILED_BASES or [
    pytest.param(None, marks=pytest.mark.skip(reason="no C compiler or Python headers here"))])


def make(base, direct=None, stream_ptr=0x77):
    class Plan(base):
        def __init__(self):
            self.calls = []
            if direct is not None:
                self._direct_call = direct
                self._stream_ptr = lambda: stream_ptr

        def _call(self, left, right, out=None, stream=None, direct_tried=False):
            self.calls.append((left, right, out, stream, direct_tried))
            return "python path"

    return Plan()


class Direct:
    def __init__(self, answer):
        self.answer, self.calls = answer, []

    def __call__(self, *args):
        self.calls.append(args)
        if isinstance(self.answer, Exception):
            raise self.answer
        return args[2] if self.answer == "out" else self.answer


def test_the_compiled_base_is_used_where_built():
    """Where the package has both extensions built (an installed wheel, a checkout after
    ``build_ext --inplace``), plans take the compiled base."""
    if importlib.util.find_spec("xcorr_app._cuda._plancall") is None:
        pytest.skip("not built in this tree")
    assert PlanCallBase.__name__ == "PlanCall"


@pytest.mark.parametrize("base", BASES)
def test_without_a_direct_call_every_call_takes_the_python_path(base):
    plan = make(base)
    out, stream = object(), object()
    assert plan(1, 2) == "python path"
    assert plan(1, 2, out) == "python path"
    assert plan(1, right=2, out=out, stream=stream) == "python path"
    assert plan(left=1, right=2) == "python path"
    assert plan.calls == [(1, 2, None, None, False), (1, 2, out, None, False),
                          (1, 2, out, stream, False), (1, 2, None, None, False)]


@pytest.mark.parametrize("args", [(), (1,), (1, 2, 3, 4, 5)])
@pytest.mark.parametrize("base", BASES)
def test_wrong_arguments_are_type_errors(base, args):
    with pytest.raises(TypeError):
        make(base)(*args)


@pytest.mark.parametrize("base", BASES)
def test_an_unknown_keyword_is_a_type_error(base):
    with pytest.raises(TypeError):
        make(base)(1, 2, output=3)


@compiled
def test_a_direct_call_takes_out_given_and_no_stream(base):
    direct = Direct("out")
    plan = make(base, direct)
    out = object()
    assert plan(1, 2, out) is out
    assert plan(1, 2, out=out) is out
    assert plan(1, 2, out, None) is out
    assert direct.calls == [(1, 2, out, 0x77)] * 3
    assert plan.calls == []


@pytest.mark.parametrize("base", BASES)
def test_without_out_or_with_a_stream_the_direct_call_is_not_tried(base):
    direct = Direct("out")
    plan = make(base, direct)
    out, stream = object(), object()
    assert plan(1, 2) == "python path"
    assert plan(1, 2, out, stream) == "python path"
    assert direct.calls == []
    assert plan.calls == [(1, 2, None, None, False), (1, 2, out, stream, False)]


@compiled
@pytest.mark.parametrize("answer", [NotImplemented, RuntimeError("cuGraphLaunch failed")])
def test_a_refusal_or_a_driver_error_goes_to_the_python_path(base, answer):
    direct = Direct(answer)
    plan = make(base, direct)
    out = object()
    assert plan(1, 2, out) == "python path"
    assert sys.exc_info() == (None, None, None)
    assert direct.calls == [(1, 2, out, 0x77)]
    assert plan.calls == [(1, 2, out, None, True)]


@compiled
def test_other_errors_of_the_direct_call_or_the_stream_lookup_propagate(base):
    plan = make(base, Direct(KeyError("boom")))
    with pytest.raises(KeyError, match="boom"):
        plan(1, 2, object())

    def bad_stream():
        raise ValueError("no stream")

    plan = make(base, Direct("out"))
    plan._stream_ptr = bad_stream
    with pytest.raises(ValueError, match="no stream"):
        plan(1, 2, object())
    assert plan.calls == []


@compiled
def test_none_attributes_mean_no_direct_call(base):
    plan = make(base, Direct("out"))
    plan._direct_call = None
    assert plan(1, 2, object()) == "python path"
    plan = make(base, Direct("out"))
    plan._stream_ptr = None
    assert plan(1, 2, object()) == "python path"


@compiled
def test_references_are_not_leaked_and_plans_are_collected(base):
    direct = Direct("out")
    plan = make(base, direct)
    left, right, out = object(), object(), object()
    before = [sys.getrefcount(x) for x in (left, right, out, direct)]
    for _ in range(1000):
        plan(left, right, out)
        direct.calls.clear()
    assert [sys.getrefcount(x) for x in (left, right, out, direct)] == before
    direct.answer = NotImplemented
    for _ in range(1000):
        plan(left, right, out)
    direct.calls.clear()
    plan.calls.clear()
    assert [sys.getrefcount(x) for x in (left, right, out, direct)] == before
    ref = weakref.ref(plan)
    plan.cycle = plan  # collected by the GC through the base's references too
    direct.plan = plan
    del plan, direct
    gc.collect()
    assert ref() is None


@compiled
def test_the_call_holds_what_it_calls_while_the_plan_changes(base):
    """The stream lookup (or another thread) may reset the plan's attributes during a call:
    the call goes on with what it took, and nothing is freed under it."""
    out = object()
    plan = make(base)
    direct = plan._direct_call = Direct("out")

    def lookup():
        plan._direct_call = None  # the plan lets go of both while they run
        plan._stream_ptr = None
        return 0x77

    plan._stream_ptr = lookup
    ref = weakref.ref(direct)
    del direct
    assert plan(1, 2, out) is out
    assert ref() is None  # held by the call only, and released after it
    assert plan(1, 2, out) == "python path"  # no direct call any more
