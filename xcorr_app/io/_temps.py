"""The hidden temporary names of outputs being written (``.NAME.tmp-PID-RAND...``), and the
removal of those whose writer died; an output may be a folder (:data:`FOLDER_OUTPUTS`).

Examples
--------
>>> temp_name("out/aligned.tif").name.startswith(".aligned.tif.tmp-")
True
"""

from __future__ import annotations

import contextlib
import os
import re
import secrets
import shutil
from pathlib import Path

__all__ = ["FOLDER_OUTPUTS", "remove_path", "pid_running", "remove_stale_temps", "temp_name"]

#: outputs that are folders (a Zarr store), written, committed and replaced whole like files
FOLDER_OUTPUTS = (".zarr",)


def remove_path(path: Path) -> None:
    """Delete a file, or a folder output (:data:`FOLDER_OUTPUTS`) with what it holds."""
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path)
    else:
        path.unlink(missing_ok=True)


def pid_running(pid: int) -> bool:
    """Whether a process ``pid`` exists (of any user) on this machine."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except (PermissionError, OverflowError, ValueError):
        return True
    return True


def remove_stale_temps(paths) -> list:
    """Delete the temporary files (:class:`AtomicTarget`'s ``.NAME.tmp-PID-RAND...``) of
    ``paths`` whose writer process no longer runs; those of running processes are left.

    Returns the files deleted.

    Examples
    --------
    >>> remove_stale_temps(["out/aligned.tif"])  # doctest: +SKIP
    [PosixPath('out/.aligned.tif.tmp-4242-0badcafe.tif')]
    """
    removed = []
    for path in map(Path, paths):
        pattern = re.compile(re.escape(f".{path.name}.tmp-") + r"(\d+)-[0-9a-f]+(\.old)?"
                             + re.escape(path.suffix))
        try:
            names = os.listdir(path.parent if str(path.parent) else ".")
        except OSError:
            continue
        for name in names:
            m = pattern.fullmatch(name)
            if m and not pid_running(int(m.group(1))):
                with contextlib.suppress(OSError):
                    remove_path(path.parent / name)
                    removed.append(path.parent / name)
    return removed


def temp_name(path, tag: str = "") -> Path:
    """A new hidden name beside ``path``: ``.NAME.tmp-PID-RAND<tag><suffix>`` (what
    :func:`remove_stale_temps` deletes once its writer is dead).

    Examples
    --------
    >>> temp_name("out/aligned.tif", ".old").name  # doctest: +SKIP
    '.aligned.tif.tmp-4242-0badcafe.old.tif'
    """
    path = Path(path)
    return path.with_name(f".{path.name}.tmp-{os.getpid()}-{secrets.token_hex(4)}{tag}"
                          f"{path.suffix}")
