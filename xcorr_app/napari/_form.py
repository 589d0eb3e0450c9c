"""The run's options as a magicgui form, its defaults read from
:class:`~xcorr_app.alignment.AlignOptions` (stated there alone).

Only the common options are shown (:data:`SHOWN`); the others keep AlignOptions' defaults.
An empty text or a zero where the default is None (``max_shift``, ``patches``,
``min_confidence``) means None.

Examples
--------
>>> form = options_form()
>>> form.max_shift.value = 8
>>> form.reference.value = "frame"
>>> form.frame.value = 3
>>> opts = form_options(form)
>>> opts["max_shift"], opts["reference"], opts["device"], "patches" in opts
(8, 3, 'auto', False)
"""

from __future__ import annotations

import dataclasses

from magicgui import widgets

from ..alignment import BOUNDARIES, LUCAS_KANADE, NORMALIZATIONS, SUBPIXEL, AlignOptions
from ..backend import DEVICES

#: the reference choices of the form; "frame" takes the index beside it
REFERENCES = ("first", "mean", "refined", "frame")
#: the options the form shows, in its order
SHOWN = ("device", "max_shift", "patches", "normalization", "subpixel", "prefilter", "window",
         "boundary", "lucas_kanade", "verify", "min_confidence", "interpolate_low", "quality")
#: option -> its choices (a drop-down)
CHOICES = {"device": DEVICES, "normalization": NORMALIZATIONS, "subpixel": SUBPIXEL,
           "boundary": BOUNDARIES, "lucas_kanade": LUCAS_KANADE}
#: options whose 0 or empty text means None (no bound, no patches, no threshold)
OPTIONAL = ("max_shift", "min_confidence", "patches")
#: what each option's widget says when hovered
TIPS = {"max_shift": "largest shift searched, px (0: up to half the frame, by FFT)",
        "patches": "piecewise-rigid grid, e.g. 4x4 (empty: rigid only)",
        "min_confidence": "flag frames whose peak / second peak is below it (0: off)",
        "prefilter": "auto, none, gaussian:S or dog:S1,S2",
        "window": "none, hann, tukey or tukey:ALPHA",
        "device": "auto: the GPU where CuPy sees one",
        "quality": "the quality report: each frame's correlation before and after, the residual "
                   "shift (one more pass over the stack)"}


def defaults() -> dict:
    """AlignOptions' field -> default."""
    return {f.name: f.default for f in dataclasses.fields(AlignOptions)}


def _widget(name, default):
    tip = TIPS.get(name, "")
    if name in CHOICES:
        return widgets.ComboBox(name=name, choices=CHOICES[name], value=default, tooltip=tip)
    if name == "max_shift":
        return widgets.SpinBox(name=name, value=default or 0, min=0, max=100_000, tooltip=tip)
    if name == "min_confidence":
        return widgets.FloatSpinBox(name=name, value=default or 0.0, min=0.0, max=1e6,
                                    step=0.1, tooltip=tip)
    if isinstance(default, bool):
        return widgets.CheckBox(name=name, value=default, tooltip=tip)
    return widgets.LineEdit(name=name, value="" if default is None else str(default),
                            tooltip=tip)


def options_form() -> widgets.Container:
    """The form: ``reference`` (with ``frame``, the index for ``reference="frame"``) then
    :data:`SHOWN`, each at AlignOptions' default."""
    d = defaults()
    ref = d["reference"] if d["reference"] in REFERENCES else REFERENCES[0]
    items = [widgets.ComboBox(name="reference", choices=REFERENCES, value=ref,
                              tooltip="first frame, mean of all, refined template, or a frame"),
             widgets.SpinBox(name="frame", value=0, min=0, max=10**7, visible=False,
                             tooltip="the reference frame's index")]
    items += [_widget(n, d[n]) for n in SHOWN]
    form = widgets.Container(widgets=items, labels=True)
    form.reference.changed.connect(lambda v: setattr(form.frame, "visible", v == "frame"))
    return form


def form_options(form) -> dict:
    """The keywords of :func:`xcorr_app.align` the form sets (those left at their default
    are left out, except ``reference`` and ``device``)."""
    d = defaults()
    ref = form.reference.value
    opts = {"reference": form.frame.value if ref == "frame" else ref}
    for name in SHOWN:
        value = getattr(form, name).value
        if not isinstance(value, bool) and not value:  # 0 or empty: None, or the default
            value = None if name in OPTIONAL else d[name]
        if value != d[name] or name == "device":
            opts[name] = value
    return opts
