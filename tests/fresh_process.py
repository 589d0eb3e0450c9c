"""What a fresh Python process imports while it runs some code (GPU tests: CuPy imports cupyx
and SciPy, some 500 modules and 0.35 s of a one-shot run, the first time a NumPy ufunc meets a
CuPy array, as ``array / 2`` and ``array > 0`` do; xcorr's GPU runs never ask for them; Dask's
array module, half a second of a run from a path that makes no dask array)."""

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def fresh_output(code: str, *args, timeout: float = 300) -> str:
    """``code`` run in a fresh process (``sys.argv[1:]``: ``args``), this checkout first on its
    path: its standard output (the process must succeed)."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(
        [str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])])}
    res = subprocess.run([sys.executable, "-c", code, *map(str, args)], capture_output=True,
                         text=True, env=env, timeout=timeout)
    assert res.returncode == 0, res.stderr[-3000:]
    return res.stdout

_AUDIT = (
    "import sys, traceback\n"
    "first = []\n"
    "def audit(event, args):\n"
    "    if event == 'import' and args[0].startswith('cupyx') and not first:\n"
    "        first.append(''.join(traceback.format_stack(limit=14)))\n"
    "sys.addaudithook(audit)\n")


def first_cupyx_import(code: str, timeout: float = 300) -> str:
    """Run ``code`` in a fresh process: the stack of its first import of cupyx, '' if none
    (the process must succeed)."""
    code = _AUDIT + code + "\nprint('=== cupyx ===')\nprint(first[0] if first else '')\n"
    return fresh_output(code, timeout=timeout).split("=== cupyx ===\n", 1)[1].strip()
