"""The run's options (:class:`xcorr_app.alignment.AlignOptions`): every value checked once, up
front, with one line naming the option; the same refusal through the API and the command line;
the defaults stated once (the signature of ``align`` and the CLI's defaults come from it)."""

import dataclasses
import inspect

import numpy as np
import pytest

from cli_helpers import assert_clean_error, xcorr
from sample_paths import stack_path
from xcorr_app import align
from xcorr_app.alignment import AlignOptions
from xcorr_app.errors import InputError

STACK = np.random.default_rng(3).random((3, 24, 28)).astype(np.float32)


@pytest.mark.parametrize("kwargs,words", [
    (dict(upsample=0), "upsample must be a whole number from 1 to 100"),
    (dict(upsample=-5), "upsample must be a whole number"),
    (dict(upsample=1.5), "upsample must be a whole number"),
    (dict(upsample=float("nan")), "upsample must be a whole number"),
    (dict(upsample=10 ** 6), "from 1 to 100"),
    (dict(upsample=50, subpixel="gaussian", boundary="linear"), "would be ignored"),
    (dict(max_shift=True), "max_shift must be a number"),
    (dict(chunk_frames=2.5), "chunk_frames must be a whole number >= 1"),
    (dict(chunk_frames=0), "chunk_frames must be a whole number >= 1"),
    (dict(reference=True), "reference must be one of"),
    (dict(reference=""), "reference is empty"),
    (dict(progress=5), "progress must be a callable"),
    (dict(channel=5), "an array in memory is one channel"),
    (dict(max_deviation=3), "max_deviation needs patches"),
    (dict(patch_overlap=2), "patch_overlap needs patches"),
    (dict(patch_template_passes=1), "patch_template_passes needs patches"),
    (dict(patches="2x2", patch_overlap=-1), "patch_overlap must be a non-negative integer"),
    (dict(patches="-1x2"), "at least 1x1"),
    (dict(interpolate_low=True), "interpolate_low needs min_confidence"),
    (dict(min_confidence=-1), "min_confidence must be a number >= 0"),
    (dict(verify="yes"), "verify must be True or False"),
    (dict(gpus="0", device="cpu"), "drop device='cpu'"),
    (dict(gpus="0,x", device="auto"), "give GPU numbers"),
    (dict(device="tpu"), "unknown device"),
    (dict(max_shfit=3), "did you mean max_shift?"),
])
def test_bad_options_are_one_line_input_errors_before_anything_is_read(kwargs, words,
                                                                        monkeypatch):
    import xcorr_app.alignment._run as run

    monkeypatch.setattr(run, "measure_passes", None)  # (nothing may be measured)
    with pytest.raises(InputError) as err:
        align(STACK, device=kwargs.pop("device", "cpu"), **kwargs)
    assert "\n" not in str(err.value) and words in str(err.value)


@pytest.mark.parametrize("args,words", [
    (["--upsample", "0"], "--upsample must be a whole number from 1 to 100"),
    (["--max-deviation", "3"], "--max-deviation needs patches (piecewise-rigid): give --patches GYxGX too"),
    (["--interpolate-low"], "--interpolate-low needs --min-confidence"),
    (["--reference", ""], "--reference is empty"),
    (["--no-aligned", "--crop"], "--crop shape the aligned stack, which --no-aligned does not write"),
    (["--out", ""], "--out is empty"),
])
def test_the_command_line_refuses_with_the_same_line(tmp_path, args, words):
    args = args if "--out" in args else [*args, "--out", str(tmp_path / "o")]
    assert_clean_error(xcorr("align", stack_path("cell"), "--device", "cpu", *args), words)
    assert not (tmp_path / "o").exists()


def test_the_defaults_are_stated_once():
    """``align``'s signature and the CLI's defaults are AlignOptions' fields."""
    from xcorr_app.cli._align import DEFAULT

    fields = {f.name: f.default for f in dataclasses.fields(AlignOptions)}
    params = inspect.signature(align).parameters
    assert {k: params[k].default for k in fields if k != "reference"} == \
        {k: v for k, v in fields.items() if k != "reference"}
    assert DEFAULT == fields


def test_settings_record_the_resolved_options():
    res = align(STACK, device="cpu", max_shift=4)
    options = res.settings["options"]
    assert options["max_shift"] == [4, 4] and options["prefilter"] != "auto"
    assert options["boundary"] in ("linear", "circular") and options["lucas_kanade"] != "auto"
    assert res.settings["executor"] == "process"


@pytest.mark.parametrize("options,why", [
    ({"normalization": "phase", "subpixel": "gaussian"},
     "phase correlation is refined on its own surface"),
    ({"reference": "previous", "max_shift": 8}, "reference previous measures the frames linear"),
    ({}, "boundary auto measured the frames linear (they do not wrap around)")])
def test_an_unused_upsample_says_why(options, why, rng):
    """The note of an upsample no circular refinement used gives the reason the frames were
    measured linear: detected so, or decided by the options before any pass."""
    from synthetic import drift_stack

    stack = drift_stack(rng, n=6, shape=(64, 72))[0]
    res = align(stack, device="cpu", upsample=10, **options)
    assert f"upsample 10 unused: {why}, where subpixel gaussian does not upsample" in res.notes


def test_phase_correlation_refines_by_the_upsampled_dft_unless_told():
    """``subpixel="auto"``: a 3x3 fit to phase correlation's sharp peak is biased (0.12 px on
    this accuracy-bench stack, a crop of a drifting scene through a camera); the upsampled DFT
    (scikit-image's way) is not."""
    from xcorr_app.bench._accuracy import stack_errors
    from xcorr_app.bench._accuracy_data import make_stack

    assert AlignOptions().subpixel == "gaussian"
    assert AlignOptions(normalization="phase").subpixel == "upsample"
    assert AlignOptions(normalization="phase", subpixel="parabolic").subpixel == "parabolic"
    st = make_stack("plain", 0, image="camera", shape=(128, 128))
    err = {}
    for sub in ("auto", "gaussian"):
        res = align(st.frames, device="cpu", normalization="phase", subpixel=sub, quality=False)
        assert res.settings["subpixel"] == ("upsample" if sub == "auto" else "gaussian")
        err[sub] = stack_errors(res.shifts, st.truth)[0]
    assert err["auto"] < 0.05 < err["gaussian"], err


def test_a_misspelt_option_object_keyword_is_an_input_error():
    """The options objects a pipeline builds once: a keyword that names no option is an
    InputError naming the nearest (the dataclass's __init__ said a TypeError)."""
    from xcorr_app.alignment import AlignOptions, VolumeOptions
    from xcorr_app.errors import InputError

    with pytest.raises(InputError, match="unknown option 'max_shfit'; did you mean max_shift"):
        AlignOptions(max_shfit=2)
    with pytest.raises(InputError, match="unknown option 'voxel'"):
        VolumeOptions(voxel=2)
    assert AlignOptions(max_shift=2).max_shift == (2, 2)


def test_the_recorded_options_say_what_static_auto_decided():
    """settings["options"] records what ran: static "auto" as "off" where nothing was
    removed (it stayed "auto"), as "on" where a pattern was; the run's own settings["static"]
    still says the mode asked for."""
    from xcorr_app.bench._accuracy_data import make_stack

    plain = align(stack_path("cell"), device="cpu")
    assert plain.settings["options"]["static"] == "off"
    assert plain.settings["static"]["mode"] == "auto" and not plain.settings["static"]["removed"]
    blobs = align(make_stack("static_blobs", 0).frames, device="cpu")
    assert blobs.settings["static"]["removed"] and blobs.settings["options"]["static"] == "on"
