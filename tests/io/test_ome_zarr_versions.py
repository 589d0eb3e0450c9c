"""An OME-Zarr aligned stack keeps its input's OME-NGFF version (issue 74): an OME-Zarr 0.5 input
(Zarr v3, the metadata under ``ome``, written here by ome-zarr-models) gives a 0.5 output on Zarr
v3 (``dimension_names`` on the array, no per-image ``version``), by ``xcorr align``,
``AlignResult.save`` and ``xcorr apply``, of one channel and of two; every other input (a 0.4
store, a TIFF, an array) keeps 0.4 on Zarr v2.  Each output is valid against ome-zarr-models'
schema of its version, carries the same calibration in both versions, reads back through xcorr
(``xcorr info``, :func:`describe`) and holds the aligned frames."""

import json

import numpy as np
import pytest
import tifffile

from click.testing import CliRunner

from xcorr_app import align
from xcorr_app.cli._main import cli
from xcorr_app.io import describe

from cli_helpers import xcorr
from synthetic import drift_stack

zarr = pytest.importorskip("zarr", minversion="3")
v05 = pytest.importorskip("ome_zarr_models.v05.image")
v04 = pytest.importorskip("ome_zarr_models.v04.image")
from ome_zarr_models.v05.axes import Axis  # noqa: E402
from pydantic_zarr.v3 import ArraySpec  # noqa: E402

#: the inputs' calibration: frame interval (s), pixel size Y, X (µm)
INTERVAL, SIZE_Y, SIZE_X = 0.2, 0.5, 0.25


def write_ngff05(path, data, labels=None):
    """``data`` (``TYX`` or ``TCYX``) as an OME-Zarr 0.5 image by ome-zarr-models (the
    ``multiscales``, Zarr v3 arrays with ``dimension_names``); ``labels``: the channels'
    ``omero`` metadata under ``ome``, as 0.5 places it."""
    names = ["t", "c", "y", "x"] if data.ndim == 4 else ["t", "y", "x"]
    types = {"t": "time", "c": "channel", "y": "space", "x": "space"}
    units = {"t": "second", "y": "micrometer", "x": "micrometer"}
    axes = [Axis(name=n, type=types[n], unit=units.get(n)) for n in names]
    scale = [INTERVAL] + [1.0] * (data.ndim - 3) + [SIZE_Y, SIZE_X]
    spec = ArraySpec.from_array(data, dimension_names=names, chunk_grid={
        "name": "regular", "configuration": {"chunk_shape": [2, *data.shape[1:]]}})
    image = v05.Image.new(array_specs=[spec], paths=["0"], axes=axes, scales=[scale],
                          translations=[None], name=path.name)
    group = image.to_zarr(zarr.storage.LocalStore(str(path)), path="")
    group["0"][:] = data
    if labels:
        ome = dict(group.attrs["ome"])
        ome["omero"] = {"channels": [{"label": name, "color": "FFFFFF", "window": {
            "min": 0, "max": 65535, "start": 0, "end": 65535}} for name in labels]}
        group.attrs["ome"] = ome
    return path


def frames(n=8, shape=(48, 56), seed=3):
    stack, truth = drift_stack(np.random.default_rng(seed), n=n, shape=shape, max_shift=4.0,
                               peak_counts=2000.0)
    return stack, truth


def check_05(store, axes, scale, labels=None):
    """The store is OME-NGFF 0.5 on Zarr v3, valid, with ``axes`` (names), ``scale`` and the
    channels ``labels``; returns its level-0 array."""
    doc = json.loads((store / "zarr.json").read_text())
    assert doc["zarr_format"] == 3 and not (store / ".zattrs").exists()
    attrs = doc["attributes"]
    assert "multiscales" not in attrs and attrs["ome"]["version"] == "0.5"
    image = attrs["ome"]["multiscales"][0]
    assert "version" not in image  # (0.5: the version once, under "ome")
    assert [a["name"] for a in image["axes"]] == list(axes)
    got = image["datasets"][0]["coordinateTransformations"][0]["scale"]
    assert got == pytest.approx(scale)
    assert image["axes"][0] == {"name": "t", "type": "time", "unit": "second"}
    assert {a.get("unit") for a in image["axes"][-2:]} == {"micrometer"}
    group = zarr.open_group(str(store), mode="r")
    v05.Image.from_zarr(group)  # (raises where the metadata break the 0.5 schema)
    array = group["0"]
    assert array.metadata.zarr_format == 3 and list(array.metadata.dimension_names) == list(axes)
    data = np.asarray(array)
    if labels is None:
        assert "omero" not in attrs["ome"]
    else:
        channels = attrs["ome"]["omero"]["channels"]
        assert [c["label"] for c in channels] == labels
        for k, c in enumerate(channels):  # (each channel's window: its range of values)
            part = data[:, k] if "c" in axes else data
            assert c["color"] and c["window"]["start"] == pytest.approx(float(part.min()))
            assert c["window"]["end"] == pytest.approx(float(part.max()))
    return data


def check_reads_back(store, version, labels=()):
    d = describe(store)
    assert d["ngff_version"] == version and d["frame_interval"] == pytest.approx(INTERVAL)
    assert d["pixel_size"][:2] == pytest.approx((SIZE_Y, SIZE_X))
    assert d["pixel_size"][2] == "micrometer" and d["channel_names"] == list(labels)
    info = xcorr("info", store)
    assert info.returncode == 0, info.stderr
    assert f"OME-Zarr (OME-NGFF {version})" in info.stdout
    assert f"pixel size {SIZE_Y:g} x {SIZE_X:g} micrometer" in info.stdout


def test_align_writes_05_for_a_05_input_and_the_frames_are_aligned(tmp_path):
    stack, truth = frames()
    data = stack.astype(np.float32)
    store = write_ngff05(tmp_path / "in.ome.zarr", data)
    assert describe(store)["ngff_version"] == "0.5"
    r = xcorr("align", store, "--out", tmp_path / "out", "--device", "cpu", "-q",
              "--out-format", "ome-zarr")
    assert r.returncode == 0, r.stderr
    out = tmp_path / "out" / "aligned.ome.zarr"
    got = check_05(out, "tyx", [INTERVAL, SIZE_Y, SIZE_X])
    check_reads_back(out, "0.5")
    # aligned: the shifts are the drift's, the frames the TIFF output's of the same run
    shifts = np.loadtxt(tmp_path / "out" / "shifts.csv", delimiter=",", skiprows=1,
                        usecols=(2, 3))
    np.testing.assert_allclose(shifts, truth, atol=0.4)
    ref = xcorr("align", store, "--out", tmp_path / "tif", "--device", "cpu", "-q")
    assert ref.returncode == 0, ref.stderr
    np.testing.assert_array_equal(got, tifffile.imread(tmp_path / "tif" / "aligned.tif"))
    inner = (slice(None), slice(6, -6), slice(6, -6))
    before = np.abs(data[inner] - data[0][inner[1:]]).mean()
    after = np.abs(got[inner] - got[0][inner[1:]]).mean()
    assert after < 0.5 * before
    # and aligned again: 0.5 stays 0.5
    again = align(out, device="cpu", quality=False)
    again.save(tmp_path / "again", format="ome-zarr")
    check_05(tmp_path / "again" / "aligned.ome.zarr", "tyx", [INTERVAL, SIZE_Y, SIZE_X])


def test_save_and_apply_of_two_channels_keep_05(tmp_path):
    stack, _ = frames(n=6, shape=(40, 48), seed=5)
    data = np.stack([stack, stack // 2 + 7], axis=1)  # (uint16, T x C x Y x X)
    labels = ["GCaMP", "tdTomato"]
    store = write_ngff05(tmp_path / "two.ome.zarr", data, labels)
    res = align(store, channel=0, device="cpu", quality=False)
    res.save(tmp_path / "out", format="ome-zarr", channels=[0, 1], keep_dtype=True)
    out = tmp_path / "out" / "aligned.ome.zarr"
    saved = check_05(out, "tcyx", [INTERVAL, 1.0, SIZE_Y, SIZE_X], labels)
    assert saved.dtype == np.uint16 and saved.shape == (6, 2, 40, 48)
    check_reads_back(out, "0.5", labels)
    # the 0.4 output of the same run: the same frames and calibration, only the layout differs
    plain = tmp_path / "plain.tif"
    tifffile.imwrite(plain, data, imagej=True, resolution=(1 / SIZE_X, 1 / SIZE_Y),
                     metadata={"axes": "TCYX", "unit": "um", "finterval": INTERVAL,
                               "Labels": labels * 6})
    align(plain, channel=0, device="cpu", quality=False).save(
        tmp_path / "o4", format="ome-zarr", channels=[0, 1], keep_dtype=True)
    old = zarr.open_group(str(tmp_path / "o4" / "aligned.ome.zarr"), mode="r")
    assert old.metadata.zarr_format == 2 and old.attrs["multiscales"][0]["version"] == "0.4"
    v04.Image.from_zarr(old)
    new = json.loads((out / "zarr.json").read_text())["attributes"]["ome"]
    assert new["multiscales"][0]["axes"] == old.attrs["multiscales"][0]["axes"]
    assert new["multiscales"][0]["datasets"] == old.attrs["multiscales"][0]["datasets"]
    assert new["omero"] == old.attrs["omero"]
    np.testing.assert_array_equal(saved, np.asarray(old["0"]))
    # xcorr apply: the same shifts on channel 1, into a 0.5 store again
    r = xcorr("apply", tmp_path / "out" / "shifts.csv", store, "--channel", "1",
              "--out", tmp_path / "applied.ome.zarr", "--keep-dtype")
    assert r.returncode == 0, r.stderr
    # (channel 1's name, as align --channel 1 writes it)
    applied = check_05(tmp_path / "applied.ome.zarr", "tyx", [INTERVAL, SIZE_Y, SIZE_X],
                       labels[1:])
    np.testing.assert_array_equal(applied, saved[:, 1])
    assert describe(tmp_path / "applied.ome.zarr")["ngff_version"] == "0.5"


def test_other_inputs_keep_04_on_zarr_v2(tmp_path):
    """A 0.4 store (its version read from the image), a TIFF and an array: 0.4 on Zarr v2."""
    stack, _ = frames(n=6, shape=(40, 48), seed=7)
    root = zarr.open_group(str(tmp_path / "in4.ome.zarr"), mode="w", zarr_format=2)
    root.create_array("0", data=stack, chunks=(2, 40, 48))
    root.attrs["multiscales"] = [{"version": "0.4", "axes": [
        {"name": "t", "type": "time", "unit": "second"},
        {"name": "y", "type": "space", "unit": "micrometer"},
        {"name": "x", "type": "space", "unit": "micrometer"}],
        "datasets": [{"path": "0", "coordinateTransformations": [
            {"type": "scale", "scale": [INTERVAL, SIZE_Y, SIZE_X]}]}]}]
    assert describe(tmp_path / "in4.ome.zarr")["ngff_version"] == "0.4"
    tifffile.imwrite(tmp_path / "in.tif", stack)
    for name, source in (("zarr", tmp_path / "in4.ome.zarr"), ("tif", tmp_path / "in.tif"),
                         ("array", stack)):
        align(source, device="cpu", quality=False).save(tmp_path / name, format="ome-zarr")
        out = tmp_path / name / "aligned.ome.zarr"
        group = zarr.open_group(str(out), mode="r")
        assert group.metadata.zarr_format == 2 and "ome" not in group.attrs, name
        assert group.attrs["multiscales"][0]["version"] == "0.4"
        v04.Image.from_zarr(group)
        assert describe(out)["ngff_version"] == "0.4"
    check_reads_back(tmp_path / "zarr" / "aligned.ome.zarr", "0.4")


@pytest.mark.parametrize("version", ["0.4", "0.5"])
@pytest.mark.parametrize("scale", [1.0, 0.5])
def test_a_scale_without_a_unit_is_no_pixel_size_and_the_output_invents_none(tmp_path,
                                                                                version, scale):
    """(A unitless 1 read back as a pixel size of (1.0, 1.0, ""): an uncalibrated input's
    OME-Zarr output said it had one.)  OME-NGFF's units are optional: a scale without one is
    in pixels."""
    stack, _ = frames(n=5, shape=(32, 40), seed=11)
    store = tmp_path / "in.ome.zarr"
    if version == "0.5":
        axes = [Axis(name="t", type="time"), Axis(name="y", type="space"),
                Axis(name="x", type="space")]
        spec = ArraySpec.from_array(stack, dimension_names=["t", "y", "x"])
        group = v05.Image.new(array_specs=[spec], paths=["0"], axes=axes,
                              scales=[[1.0, scale, scale]], translations=[None],
                              name="in").to_zarr(zarr.storage.LocalStore(str(store)), path="")
        group["0"][:] = stack
    else:
        root = zarr.open_group(str(store), mode="w", zarr_format=2)
        root.create_array("0", data=stack, chunks=(2, 32, 40))
        root.attrs["multiscales"] = [{"version": "0.4", "axes": [
            {"name": "t", "type": "time"}, {"name": "y", "type": "space"},
            {"name": "x", "type": "space"}], "datasets": [{"path": "0",
            "coordinateTransformations": [{"type": "scale", "scale": [1.0, scale, scale]}]}]}]
    d = describe(store)
    assert (d["format"], d["ngff_version"], d["pixel_size"]) == ("OME-Zarr", version, None)
    info = CliRunner().invoke(cli, ["info", str(store)])
    assert info.exit_code == 0 and "pixel size unknown" in info.stdout, info.output
    # an uncalibrated input, the TIFF and this store: no unit in the output, none read back
    tifffile.imwrite(tmp_path / "plain.tif", stack)
    for name, source in (("zarr", store), ("tif", tmp_path / "plain.tif")):
        r = CliRunner().invoke(cli, ["align", str(source), "--out", str(tmp_path / name),
                                     "--device", "cpu", "-q", "--out-format", "ome-zarr",
                                     "--no-quality", "--no-verify"])
        assert r.exit_code == 0, r.output
        out = tmp_path / name / "aligned.ome.zarr"
        attrs = zarr.open_group(str(out), mode="r").attrs.asdict()
        image = attrs.get("ome", attrs)["multiscales"][0]
        assert [a.get("unit") for a in image["axes"]] == [None, None, None]
        assert image["datasets"][0]["coordinateTransformations"][0]["scale"] == [1.0, 1.0, 1.0]
        assert describe(out)["pixel_size"] is None
