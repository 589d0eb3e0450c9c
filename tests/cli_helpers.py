"""Running the ``xcorr`` command in a subprocess, as a user does, and checking its errors
(used by the CLI tests of several subpackages)."""

import hashlib
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def xcorr(*args, cwd=None):
    env = {**os.environ, "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    env.pop("XCORR_DEBUG", None)
    return subprocess.run([sys.executable, "-m", "xcorr_app.cli", *map(str, args)],
                          capture_output=True, text=True, env=env, cwd=cwd, timeout=300)


def assert_clean_error(res, *words):
    assert res.returncode != 0
    assert "Traceback" not in res.stderr
    lines = [ln for ln in res.stderr.strip().splitlines() if not ln.startswith("note:")]
    assert len(lines) == 1 and lines[0].startswith("error: "), res.stderr
    for w in words:
        assert w in lines[0], lines[0]


def digest(path: Path) -> str:
    """A hash of a file, or of every file of a folder (names and contents): inputs are hashed
    before and after a run to show it left them untouched."""
    files = sorted(path.rglob("*")) if path.is_dir() else [path]
    h = hashlib.sha256()
    for f in files:
        if f.is_file():
            h.update(f.name.encode() + f.read_bytes())
    return h.hexdigest()
