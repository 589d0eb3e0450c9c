"""Where the bundled sample stacks are, and their ground truth."""

from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
SAMPLES = ("cell", "moon", "hubble")


def truth(name):
    """(12, 2) ground-truth shifts (dy, dx) of sample ``name``."""
    return np.loadtxt(ROOT / "sample_data" / f"{name}_truth.csv", delimiter=",", skiprows=1)[:, 1:]


def stack_path(name):
    return ROOT / "sample_data" / f"{name}_drift.tif"


def folder_path(name):
    return ROOT / "sample_data" / f"{name}_frames"
