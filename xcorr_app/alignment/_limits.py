"""What a run's options ask of its frames, checked once the input is open and before any frame
is read (:func:`check_limits`): the search bound and one frame's memory
(:func:`xcorr_app.streaming.check_frame_memory`), the prefilter's and the features' filter
radius against the frame.  The automatic choices read whole frames first: a frame no memory
holds, or a prefilter of billions of taps, was refused (or ran out of memory) only after them.

Examples
--------
>>> from xcorr_app.alignment import AlignOptions
>>> check_limits(AlignOptions(prefilter="gaussian:2"), (64, 64), devices=("cpu",))
>>> check_limits(AlignOptions(prefilter="gaussian:1e9"), (64, 64), devices=())
Traceback (most recent call last):
...
xcorr_app.errors.InputError: prefilter gaussian:1e9 makes a filter of radius 4000000000 px, far beyond the 64x64 frame: the radius may be at most 256 px (4 times the frame's larger side, at least 256)
"""

from __future__ import annotations

from ..filters import check_radius
from ..streaming import check_bound, check_frame_memory

__all__ = ["check_limits", "limit_devices"]

#: the truncation of the prefilter's gaussians (scipy.ndimage's default, as the filters use)
TRUNCATE = 4.0


def limit_devices(device, executor="process") -> tuple:
    """The devices one frame must fit on one of (:func:`check_limits`): none on Dask (its
    workers check their own memory), the CPU first where ``device`` is auto (no GPU probed
    for frames the host holds)."""
    if executor == "dask":
        return ()
    if device == "cpu":
        return ("cpu",)
    return ("gpu",) if device == "gpu" or executor == "gpus" else ("cpu", "gpu")


def check_limits(opts, frame_shape, itemsize=2, devices=("cpu",)) -> None:
    """:class:`InputError` where ``opts`` (an :class:`~._options.AlignOptions`) asks more of
    frames of ``frame_shape`` (``itemsize`` bytes a pixel) than they allow: a prefilter
    sigma whose filter reaches far past the frame, a ``max_shift`` past the frame, a ``mask``
    of another shape than the frames, one frame
    that fits none of ``devices`` (a GPU not usable here is skipped).  The features' sigmas
    too: their bank is cut at 31x31 taps, so a sigma far past the frame filters nothing it
    names."""
    check_bound(frame_shape, opts.max_shift)  # (the one check of the bound a run makes)
    if opts.mask_image is not None:
        from .rigid import check_mask_shape

        check_mask_shape(opts.mask, opts.mask_image, frame_shape)
    for option, names, spec in (("prefilter", ("gaussian", "dog"), opts.prefilter),
                                ("features", ("dog", "gabor"), opts.features)):
        name, _, arg = str(spec).partition(":")
        sigmas = arg.split(",")[:1] if name == "gabor" else arg.split(",")  # (its sigma)
        for text in sigmas if name in names else ():
            try:
                sigma = float(text)
            except ValueError:
                continue  # (AlignOptions names a spec that is not numbers)
            check_radius(TRUNCATE * sigma + 0.5, frame_shape, f"{option} {spec}")
    check_frame_memory(frame_shape, itemsize, max_shift=opts.max_shift,
                       normalization=opts.normalization, verify=opts.verify,
                       budget=opts.max_memory, devices=devices)
