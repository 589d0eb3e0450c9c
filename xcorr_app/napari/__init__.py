"""The napari plugin (``pip install 'xcorr-app[napari]'``): a dock widget that aligns the
selected image layer (on the GPU where there is one), shows the shift table, the drift plot
and the low-confidence frames, and applies the shifts to other layers; a reader for the TIFF
stacks xcorr reads, and the sample stacks as napari sample data.

napari finds it through the manifest ``napari.yaml`` beside this file (the
``napari.manifest`` entry point).  Only this subpackage imports napari or Qt, and only in the
modules the manifest names (:mod:`._widget`, :mod:`._panels`, :mod:`._form`): importing
``xcorr_app.napari`` needs neither.

Examples
--------
>>> import numpy as np
>>> from xcorr_app.napari import Job, run_job
>>> data = np.random.default_rng(0).random((3, 32, 32)).astype(np.float32)
>>> run_job(Job(data=data, axes="TYX", options={"device": "cpu"})).aligned["aligned"].shape
(3, 32, 32)
"""

from ._layers import Cancelled, default_axes, measure_stack, planes
from ._run import Job, Output, open_aligned, run_job
from ._volumes import run_volumes

__all__ = ["Cancelled", "Job", "Output", "default_axes", "measure_stack", "open_aligned",
           "planes", "run_job", "run_volumes"]
