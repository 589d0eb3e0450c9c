"""Where the bundled sample stacks are: in the installed package (``xcorr_app/sample_data/``,
which ``setup.py`` fills when a wheel is built), else in the checkout the package runs from
(``sample_data/``: an editable install).  napari's sample data and ``xcorr bench align
--first-runs`` both find them here.

Examples
--------
>>> sample_path("moon").name, sample_path("moon", truth=True).name
('moon_drift.tif', 'moon_truth.csv')
"""

from __future__ import annotations

from pathlib import Path

from .errors import InputError

#: the sample stacks (12 drifting frames of 120x160 each; ``sample_data/README.md``)
SAMPLES = ("cell", "moon", "hubble")
#: the folder that holds them in an installed package
PACKAGED = Path(__file__).resolve().parent / "sample_data"
#: the folder that holds them in a checkout (the package's parent folder)
CHECKOUT = Path(__file__).resolve().parents[1] / "sample_data"


def sample_files(name: str) -> tuple:
    """The file names of sample ``name``: its stack and its true shifts."""
    return f"{name}_drift.tif", f"{name}_truth.csv"


def sample_path(name: str = "cell", truth: bool = False) -> Path:
    """The sample stack ``name`` (``<name>_drift.tif``), or with ``truth`` its true shifts
    (``<name>_truth.csv``): the installed package's copy first, then the checkout's.

    Raises
    ------
    InputError
        For a name not in :data:`SAMPLES`, or where neither folder has the file.
    """
    if name not in SAMPLES:
        raise InputError(f"no sample {name!r}: the samples are {', '.join(SAMPLES)}")
    file = sample_files(name)[bool(truth)]
    for folder in (PACKAGED, CHECKOUT):
        if (folder / file).is_file():
            return folder / file
    raise InputError(f"the sample {file} is in neither {PACKAGED} (a wheel's) nor {CHECKOUT} "
                     "(a checkout's): reinstall xcorr-app, or pass a stack's path")
