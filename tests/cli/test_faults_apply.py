"""``xcorr apply``'s faults: rows are matched to frames by their ``frame`` number, and a table
or motion field that does not fit the stack (frames given twice, beyond or missing, another
frame count or size, a table of volumes, a field on another grid, infinite or absurd shifts, a
damaged or truncated file) is one ``error:`` line, exit 2, within seconds, nothing written; a
frame with no shift is written unshifted with one ``note:`` line.  The API refuses the same
shifts (:func:`xcorr_app.apply_shifts`, ``apply_field``)."""

import csv
import json
import time

import numpy as np
import pytest
import tifffile

import xcorr_app
from cli_helpers import assert_clean_error, digest, xcorr
from xcorr_app.alignment import apply_field
from xcorr_app.errors import InputError

#: the stacks: (frames, height, width, pixel type)
STACKS = {"f32": (6, 40, 52, np.float32), "u16": (5, 33, 30, np.uint16)}


def _stack(kind):
    n, h, w, dtype = STACKS[kind]
    rng = np.random.default_rng(7)
    frames = rng.random((n, h, w)) * (1000 if dtype == np.uint16 else 1)
    return frames.astype(dtype)


def _stack_file(kind, tmp_path_factory):
    frames = _stack(kind)
    path = tmp_path_factory.mktemp(kind) / "stack.tif"
    tifffile.imwrite(path, frames)
    return path, frames


@pytest.fixture(scope="module", params=sorted(STACKS))
def stack(request, tmp_path_factory):
    """``(path, frames)`` of a small TIFF stack, of each of :data:`STACKS`."""
    return _stack_file(request.param, tmp_path_factory)


@pytest.fixture(scope="module")
def one_stack(tmp_path_factory):
    """``(path, frames)`` of the float32 stack (for faults of the file read, not the stack)."""
    return _stack_file("f32", tmp_path_factory)


def _shifts(n, seed=3):
    return np.random.default_rng(seed).uniform(-3, 3, (n, 2)).round(3)


def _write_table(path, frames, shifts, fmt=None, frame_shape=None, extra=None):
    """A shift table as xcorr align writes it (``frame, source, dy, dx``), its rows in the order
    given: ``shifts.csv`` or ``shifts.json`` by ``path``'s suffix."""
    rows = [{"frame": f, "source": "stack.tif", "dy": dy, "dx": dx, **(extra or {})}
            for f, (dy, dx) in zip(frames, shifts)]
    if path.suffix == ".json":
        def num(v):
            v = v.item() if isinstance(v, np.generic) else v
            return None if isinstance(v, float) and np.isnan(v) else v
        doc = {"input": "stack.tif", "settings": {},
               "frames": [{k: num(v) for k, v in r.items()} for r in rows]}
        if frame_shape is not None:
            doc["frame_shape"] = frame_shape
        path.write_text(json.dumps(doc))
    else:
        with open(path, "w", newline="", encoding="utf-8") as f:
            writer = csv.DictWriter(f, fieldnames=list(rows[0]))
            writer.writeheader()
            writer.writerows(rows)
    return path


def _in_process(*args):
    """``xcorr ARGS`` run in this process (click's runner: the command's own error handling,
    a tenth of a process's start), as :func:`cli_helpers.xcorr` gives it."""
    from types import SimpleNamespace

    from click.testing import CliRunner

    from xcorr_app.cli._main import cli

    res = CliRunner().invoke(cli, [str(a) for a in args])
    return SimpleNamespace(returncode=res.exit_code, stdout=res.stdout, stderr=res.stderr)


def _applied(shifts_path, stack_path, tmp_path, *extra):
    out = tmp_path / "o" / "out.tif"
    res = _in_process("apply", shifts_path, stack_path, "--device", "cpu", "--out", out, *extra)
    assert res.returncode == 0, res.stderr
    return tifffile.imread(out), res


def _api(stack_path, shifts):
    return np.concatenate([c for _, c in xcorr_app.apply_shifts(stack_path, shifts,
                                                                device="cpu")])


def _refused(tmp_path, shifts_path, stack_path, *words):
    """The run is one ``error:`` line with ``words``, exit 2, in under 10 s, and writes
    nothing; the inputs are unchanged."""
    out = tmp_path / "o" / "out.tif"
    before = digest(shifts_path), digest(stack_path)
    t0 = time.monotonic()
    res = _in_process("apply", shifts_path, stack_path, "--device", "cpu", "--out", out)
    assert time.monotonic() - t0 < 10
    assert res.returncode == 2
    assert_clean_error(res, str(shifts_path.name), *words)
    assert not out.parent.exists()
    assert (digest(shifts_path), digest(stack_path)) == before


@pytest.mark.parametrize("fmt", ["csv", "json"])
def test_rows_are_matched_to_frames_by_their_number(tmp_path, stack, fmt):
    path, frames = stack
    n = len(frames)
    shifts = _shifts(n)
    order = np.random.default_rng(1).permutation(n)
    if (order == np.arange(n)).all():
        order = order[::-1]
    table = _write_table(tmp_path / f"shifts.{fmt}", order, shifts[order])
    got, res = _applied(table, path, tmp_path)
    np.testing.assert_array_equal(got, _api(path, shifts))
    # (in row order every frame would take another's shift: a different stack)
    assert not np.array_equal(got, _api(path, shifts[order]))
    assert "note:" not in res.stderr


@pytest.mark.parametrize("fmt", ["csv", "json"])
@pytest.mark.parametrize("case, words", [
    ("twice", ["frame 1 more than one shift"]),
    ("beyond", ["frame {n}", "has {n} frames", "none for its frame 2"]),
    ("negative", ["row 1: frame", "-1", "not a frame number"]),
    ("fraction", ["row 2: frame", "1.5", "not a frame number"]),
    ("blank", ["row 4: frame", "not a frame number"]),
    ("more rows", ["shifts of {m} frames", "has {n}"]),
    ("fewer rows", ["shifts of {k} frames", "has {n}"]),
])
def test_frames_given_twice_beyond_or_missing_are_one_line(tmp_path, stack, fmt, case, words):
    path, frames = stack
    n = len(frames)
    numbers, shifts = list(range(n)), _shifts(n)
    if case == "twice":
        numbers[2] = 1
    elif case == "beyond":
        numbers[2] = n
    elif case == "negative":
        numbers[0] = -1
    elif case == "fraction":
        numbers[1] = "1.5" if fmt == "csv" else 1.5
    elif case == "blank":
        numbers[3] = "" if fmt == "csv" else None
    elif case == "more rows":
        numbers, shifts = list(range(n + 2)), _shifts(n + 2)
    else:
        numbers, shifts = numbers[:-2], shifts[:-2]
    table = _write_table(tmp_path / f"shifts.{fmt}", numbers, shifts)
    _refused(tmp_path, table, path, *(w.format(n=n, m=n + 2, k=n - 2) for w in words))


@pytest.mark.parametrize("table", ["csv", "json", "json frames"])
def test_a_table_of_volumes_is_refused(tmp_path, one_stack, table):
    path, frames = one_stack
    n = len(frames)
    rows = [{"t": t, "dz": 0.5 * t, "dy": 0.25, "dx": -1.0} for t in range(n)]
    if table == "csv":
        shifts = tmp_path / "shifts.csv"
        shifts.write_text("t,dz,dy,dx\n" + "".join(f"{r['t']},{r['dz']},{r['dy']},{r['dx']}\n"
                                                    for r in rows))
    elif table == "json":
        shifts = tmp_path / "shifts.json"
        shifts.write_text(json.dumps({"input": "v.tif", "device": "cpu", "volumes": rows}))
    else:
        shifts = tmp_path / "shifts.json"
        shifts.write_text(json.dumps({"frames": [dict(r, frame=r["t"]) for r in rows]}))
    _refused(tmp_path, shifts, path, "(dz, dy, dx)", "--volumes")


def _field_file(path, n, frame_shape, grid=(2, 3), scale=1.0, frame_shape_key=True, **change):
    """A ``motion_field.npz`` as ``align --patches`` writes it for frames of ``frame_shape``."""
    h, w = frame_shape
    cy = np.linspace(h / 4, 3 * h / 4, grid[0])
    cx = np.linspace(w / 4, 3 * w / 4, grid[1])
    centres = np.stack(np.meshgrid(cy, cx, indexing="ij"), axis=-1)
    rng = np.random.default_rng(5)
    rigid = rng.uniform(-2, 2, (n, 2))
    field = (rigid[:, None, None, :] + rng.uniform(-0.5, 0.5, (n, *grid, 2))) * scale
    arrays = {"field": field, "rigid": rigid, "centres": centres,
              "deviation": field - rigid[:, None, None, :]}
    if frame_shape_key:
        arrays["frame_shape"] = np.asarray(frame_shape, np.int64)
    arrays.update(change)
    np.savez(path, **arrays)
    return path


def test_a_field_is_applied_as_the_api_applies_it(tmp_path, stack):
    path, frames = stack
    n, (h, w) = len(frames), frames.shape[1:]
    npz = _field_file(tmp_path / "motion_field.npz", n, (h, w))
    got, _ = _applied(npz, path, tmp_path)
    with np.load(npz) as z:
        want = np.concatenate([c for _, c in apply_field(path, z["field"], z["centres"],
                                                         device="cpu")])
    np.testing.assert_array_equal(got, want)
    assert not np.array_equal(got, frames.astype(np.float32))


@pytest.mark.parametrize("case, words", [
    ("centres beyond", ["patch centres", "beyond the {h}x{w} frame"]),
    ("frame_shape", ["measured on frames of {H}x{W} pixels", "has {h}x{w}"]),
    ("beside", ["measured on frames of {H}x{W} pixels", "has {h}x{w}"]),
])
def test_a_field_of_another_frame_size_is_refused(tmp_path, stack, case, words):
    path, frames = stack
    n, (h, w) = len(frames), frames.shape[1:]
    big = (2 * h, 2 * w) if case == "centres beyond" else (h + 3, w + 1)
    npz = _field_file(tmp_path / "motion_field.npz", n, big,
                      frame_shape_key=case == "frame_shape")
    if case == "beside":  # (the centres lie inside the smaller frame too)
        (tmp_path / "shifts.json").write_text(json.dumps({"frame_shape": list(big),
                                                          "frames": []}))
    _refused(tmp_path, npz, path, *(s.format(h=h, w=w, H=big[0], W=big[1]) for s in words))


@pytest.mark.parametrize("fmt", ["csv", "json"])
@pytest.mark.parametrize("bad", ["inf", "-inf", "1e300", "height", "width"])
def test_infinite_or_absurd_shifts_are_refused(tmp_path, stack, fmt, bad):
    path, frames = stack
    n, (h, w) = len(frames), frames.shape[1:]
    shifts = _shifts(n).astype(object)
    column = 1 if bad == "width" else 0
    shifts[2, column] = {"height": float(h), "width": float(-w)}.get(bad, bad)
    if fmt == "json" and isinstance(shifts[2, column], str):
        shifts[2, column] = float(bad)  # (as a number: standard JSON has no inf; Python's does)
    table = _write_table(tmp_path / f"shifts.{fmt}", range(n), shifts)
    _refused(tmp_path, table, path, "of frame 2", "is infinite" if "inf" in bad else
             f"wholly out of its {h}x{w} frame")


def test_a_shift_just_inside_the_frame_is_applied(tmp_path, stack):
    path, frames = stack
    n, (h, w) = len(frames), frames.shape[1:]
    shifts = _shifts(n)
    shifts[1] = (h - 1.5, -(w - 1.5))
    got, _ = _applied(_write_table(tmp_path / "shifts.csv", range(n), shifts), path, tmp_path)
    np.testing.assert_array_equal(got, _api(path, shifts))


@pytest.mark.parametrize("case, words", [
    ("1e30", ["frame 0 (and of {m} other frames)", "wholly out of the {h}x{w} frame"]),
    ("inf", ["frame 3", "wholly out of the {h}x{w} frame"]),
    ("one patch NaN", ["frame 1", "NaN at some of its patches but not all"]),
])
def test_an_absurd_field_is_refused(tmp_path, stack, case, words):
    path, frames = stack
    n, (h, w) = len(frames), frames.shape[1:]
    npz = _field_file(tmp_path / "motion_field.npz", n, (h, w),
                      scale=1e30 if case == "1e30" else 1.0)
    if case != "1e30":
        with np.load(npz) as z:
            arrays = dict(z)
        k, value = (3, np.inf) if case == "inf" else (1, np.nan)
        arrays["field"][k, 0, 1, 0] = value
        np.savez(npz, **arrays)
    _refused(tmp_path, npz, path, *(s.format(h=h, w=w, m=n - 1) for s in words))


@pytest.mark.parametrize("fmt", ["csv", "json"])
def test_frames_without_a_shift_are_unshifted_with_one_note(tmp_path, stack, fmt):
    path, frames = stack
    n = len(frames)
    shifts = _shifts(n)
    shifts[[1, 3]] = np.nan
    table = _write_table(tmp_path / f"shifts.{fmt}", range(n), shifts)
    if fmt == "csv":  # (one blank, one "nan" as shifts.csv writes it)
        table.write_text(table.read_text().replace("nan,nan", ",", 1))
    got, res = _applied(table, path, tmp_path, "-q")
    notes = [ln for ln in res.stderr.splitlines() if ln.startswith("note:")]
    assert notes == [f"note: 2 of {n} frames have no shift in {table} (blank or NaN: none was "
                     "measured) and are written unshifted"]
    np.testing.assert_array_equal(got[[1, 3]], frames[[1, 3]].astype(np.float32))
    np.testing.assert_array_equal(got, _api(path, shifts))


def test_a_field_without_a_frame_is_unshifted_with_one_note(tmp_path, stack):
    path, frames = stack
    n, (h, w) = len(frames), frames.shape[1:]
    npz = _field_file(tmp_path / "motion_field.npz", n, (h, w))
    with np.load(npz) as z:
        arrays = dict(z)
    arrays["field"][2] = np.nan
    arrays["rigid"][2] = np.nan
    np.savez(npz, **arrays)
    got, res = _applied(npz, path, tmp_path)
    assert f"note: 1 of {n} frames has no shift in {npz} (blank or NaN: none was measured) " \
        "and is written unshifted" in res.stderr
    np.testing.assert_array_equal(got[2], frames[2].astype(np.float32))
    assert not np.array_equal(got[1], frames[1].astype(np.float32))


@pytest.mark.parametrize("fmt", ["csv", "json"])
def test_a_row_with_only_one_of_dy_dx_is_refused(tmp_path, one_stack, fmt):
    path, frames = one_stack
    shifts = _shifts(len(frames))
    shifts[4, 1] = np.nan
    table = _write_table(tmp_path / f"shifts.{fmt}", range(len(frames)), shifts)
    _refused(tmp_path, table, path, "frame 4 has only one of dy, dx")


#: damaged ``shifts.json`` documents: (what is changed, words of the error)
DAMAGED_JSON = {
    "frame_shape 3 numbers": ({"frame_shape": [64, 64, 1]}, ["frame_shape [64, 64, 1]"]),
    "frame_shape text": ({"frame_shape": "64x64"}, ["frame_shape '64x64'"]),
    "frame_shape null": ({"frame_shape": None}, ["frame_shape None"]),
    "frame_shape floats": ({"frame_shape": [64.0, 64.5]}, ["frame_shape [64.0, 64.5]"]),
    "frame_shape true": ({"frame_shape": [True, 64]}, ["frame_shape [True, 64]"]),
    "frames text": ({"frames": "abc"}, ["not a shift table", "frame records"]),
    "frames numbers": ({"frames": [1, 2, 3]}, ["not a shift table", "frame records"]),
    "a list": ([1, 2], ["not a shift table"]),
    "dy a list": ({"dy": [1.0]}, ["not a shift table", "dy of row 1 is [1.0]"]),
    "dy true": ({"dy": True}, ["not a shift table", "dy of row 1 is True"]),
    "dx a word": ({"dx": "left"}, ["not a shift table", "dx of row 1 is 'left'"]),
    "no dx": ({"dx": "drop"}, ["not a shift table", "no 'dx'"]),
}


@pytest.mark.parametrize("case", sorted(DAMAGED_JSON))
def test_a_damaged_shifts_json_is_one_line(tmp_path, one_stack, case):
    path, frames = one_stack
    n = len(frames)
    table = _write_table(tmp_path / "shifts.json", range(n), _shifts(n),
                         frame_shape=list(frames.shape[1:]))
    change, words = DAMAGED_JSON[case]
    doc = json.loads(table.read_text())
    if isinstance(change, list):
        doc = change
    elif "dy" in change or "dx" in change:
        key, value = next(iter(change.items()))
        for r in doc["frames"]:
            r[key] = value
            if value == "drop":
                del r[key]
    else:
        doc.update(change)
    table.write_text(json.dumps(doc))
    _refused(tmp_path, table, path, *words)


def test_a_damaged_shifts_json_beside_the_table_is_one_line(tmp_path, one_stack):
    path, frames = one_stack
    table = _write_table(tmp_path / "shifts.csv", range(len(frames)), _shifts(len(frames)))
    (tmp_path / "shifts.json").write_text(json.dumps({"frame_shape": [64, 64, 1],
                                                      "frames": []}))
    _refused(tmp_path, table, path, "shifts.json", "frame_shape [64, 64, 1]")


@pytest.mark.parametrize("case, words", [
    ("centres fewer", ["centres (1, 3, 2) do not match its field of 2x3 patches"]),
    ("centres one coordinate", ["centres (2, 3, 1) do not match"]),
    ("centres not increasing", ["not a grid"]),
    ("centres NaN", ["not a grid"]),
    ("field 3-D", ["its field (", "damaged"]),
    ("rigid of other frames", ["rigid (", "damaged"]),
    ("field of words", ["field holds <U", "not numbers"]),
    ("field of objects", ["not a readable motion_field.npz", "pickle"]),
    ("no centres", ["no 'centres' array"]),
    ("frame_shape 3 numbers", ["frame_shape [40, 52, 1]"]),
    ("truncated", ["not a readable motion_field.npz", "truncated or damaged"]),
    ("empty", ["not a readable motion_field.npz"]),
    ("text", ["not a readable motion_field.npz"]),
    ("npy", ["not a readable motion_field.npz", "not an .npz archive"]),
])
def test_a_damaged_motion_field_is_one_line(tmp_path, one_stack, case, words):
    path, frames = one_stack
    n, (h, w) = len(frames), frames.shape[1:]
    npz = _field_file(tmp_path / "motion_field.npz", n, (h, w))
    with np.load(npz) as z:
        a = dict(z)
    if case == "centres fewer":
        a["centres"] = a["centres"][:1]
    elif case == "centres one coordinate":
        a["centres"] = a["centres"][..., :1]
    elif case == "centres not increasing":
        a["centres"] = a["centres"][:, ::-1]
    elif case == "centres NaN":
        a["centres"][0, 0, 0] = np.nan
    elif case == "field 3-D":
        a["field"] = a["field"][..., 0]
    elif case == "rigid of other frames":
        a["rigid"] = a["rigid"][:-1]
    elif case == "field of words":
        a["field"] = np.full(a["field"].shape, "x")
    elif case == "field of objects":
        a["field"] = np.array([None, 1.0], dtype=object)
    elif case == "no centres":
        del a["centres"]
    elif case == "frame_shape 3 numbers":
        a["frame_shape"] = np.array([40, 52, 1])
    if case in ("truncated", "empty", "text", "npy"):
        raw = npz.read_bytes()
        if case == "npy":
            np.save(tmp_path / "f.npy", a["field"])
            raw = (tmp_path / "f.npy").read_bytes()
        npz.write_bytes({"truncated": raw[:len(raw) // 2], "empty": b"",
                         "text": b"frame,dy,dx\n0,1,2\n", "npy": raw}[case])
    else:
        np.savez(npz, **a)
    _refused(tmp_path, npz, path, *words)


@pytest.mark.parametrize("encoding", ["latin-1", "utf-8-sig", "cp1252"])
def test_a_table_in_another_encoding_is_read(tmp_path, one_stack, encoding):
    path, frames = one_stack
    n = len(frames)
    shifts = _shifts(n)
    table = tmp_path / "shifts.csv"
    rows = "".join(f"{i},caf\u00e9 \u00b5m.tif,{dy!r},{dx!r}\n" for i, (dy, dx) in
                   enumerate(shifts.tolist()))
    table.write_bytes(("frame,source,dy,dx\n" + rows).encode(encoding))
    got, _ = _applied(table, path, tmp_path)
    np.testing.assert_array_equal(got, _api(path, shifts))


def test_a_csv_row_of_another_field_count_is_refused(tmp_path, one_stack):
    path, frames = one_stack
    table = _write_table(tmp_path / "shifts.csv", range(len(frames)), _shifts(len(frames)))
    lines = table.read_text().splitlines()
    lines[3] = ",".join(lines[3].split(",")[:3])  # (a line cut short: no dx)
    table.write_text("\n".join(lines) + "\n")
    _refused(tmp_path, table, path, "row 3 has fewer fields than its header")


def test_a_csv_column_named_twice_or_a_binary_file_is_refused(tmp_path, one_stack):
    """A header naming dy twice was applied with its last column's values (exit 0); an image
    given as the table quoted its bytes for a screen."""
    path, frames = one_stack
    table = tmp_path / "shifts.csv"
    table.write_text("frame,dy,dx,dy\n" + "".join(f"{k},0.5,0.5,9\n" for k in range(len(frames))))
    _refused(tmp_path, table, path, "its header names dy more than once")
    image = tmp_path / "image.csv"
    image.write_bytes(path.read_bytes())
    _refused(tmp_path, image, path, "a binary file, not a text table")


@pytest.mark.parametrize("bad", [np.inf, -np.inf])
def test_the_api_refuses_infinite_shifts(bad):
    frames = _stack("f32")
    shifts = _shifts(len(frames))
    shifts[2, 0] = bad
    with pytest.raises(InputError, match="frame 2 is infinite"):
        list(xcorr_app.apply_shifts(frames, shifts, device="cpu"))
    shifts[2] = np.nan  # (no shift measured: left unshifted)
    out = np.concatenate([c for _, c in xcorr_app.apply_shifts(frames, shifts, device="cpu")])
    np.testing.assert_array_equal(out[2], frames[2])


@pytest.mark.parametrize("resample", ["bilinear", "fourier"])
@pytest.mark.parametrize("far", [1e300, 40.0, -52.0])
def test_the_api_writes_a_frame_moved_wholly_out_as_fill(far, resample):
    """A run's own shifts may leave the first frame's view (a drift chained by reference
    "previous"): the API writes that frame as ``fill``, quietly (a table from a file is
    refused by ``xcorr apply`` first)."""
    import warnings

    frames = _stack("f32")
    shifts = _shifts(len(frames))
    shifts[2, int(far < 0)] = far
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        out = np.concatenate([c for _, c in xcorr_app.apply_shifts(
            frames, shifts, fill=-1.0, resample=resample, device="cpu")])
    assert (out[2] == -1.0).all() and (out[1] != -1.0).any()


def test_the_dask_api_refuses_them_as_well():
    xdask = pytest.importorskip("xcorr_app.dask")
    pytest.importorskip("dask")
    frames = _stack("u16")
    shifts = _shifts(len(frames))
    shifts[0, 1] = -np.inf
    with pytest.raises(InputError, match="frame 0 is infinite"):
        xdask.apply_shifts(frames, shifts, device="cpu")


@pytest.mark.parametrize("case, match", [
    ("1e30", "moves patches wholly out of the 40x52 frame"),
    ("centres", r"patch centres of shape \(2, 2, 2\) do not match"),
    ("beyond", "lie beyond the 40x52 frame"),
])
def test_the_api_refuses_a_field_that_does_not_fit(tmp_path, case, match):
    frames = _stack("f32")
    n, (h, w) = len(frames), frames.shape[1:]
    npz = _field_file(tmp_path / "f.npz", n, (h, w) if case != "beyond" else (2 * h, 2 * w),
                      scale=1e30 if case == "1e30" else 1.0)
    with np.load(npz) as z:
        field, centres = z["field"], z["centres"]
    if case == "centres":
        centres = centres[:, :2]
    with pytest.raises(InputError, match=match):
        list(apply_field(frames, field, centres, device="cpu"))


def test_a_runs_own_drift_beyond_the_frame_is_written_blank():
    """A run's shifts (a drift chained by reference "previous" may leave the first frame's
    view) are written, that frame blank."""
    from xcorr_app.alignment import aligned_channels

    frames = _stack("f32")
    shifts = _shifts(len(frames))
    shifts[3] = (45.0, -2.0)
    parts, shape = aligned_channels(frames, shifts, [None], frames.shape[1:], device="cpu")
    out = np.concatenate([part[0][1] for part in parts])
    assert shape == frames.shape[1:] and (out[3] == 0).all() and (out[2] != 0).any()
    ok = np.arange(len(frames)) != 3
    np.testing.assert_array_equal(out[ok], _api(frames, np.where(ok[:, None], shifts, 0.0))[ok])
    shifts[3] = (np.inf, 0.0)
    with pytest.raises(InputError, match="frame 3 is infinite"):
        list(aligned_channels(frames, shifts, [None], frames.shape[1:], device="cpu")[0])


@pytest.mark.parametrize("scale", [1e-300, 1e300])
def test_float64_pixels_float32_cannot_hold_are_refused(tmp_path, scale):
    """float64 frames are shifted in float32: pixels it cannot hold (their output was all zero
    or infinite) are one line, in the CLI and the API, with nothing written."""
    frames = np.random.default_rng(5).random((5, 24, 30)) * scale
    path = tmp_path / "stack.tif"
    tifffile.imwrite(path, frames)
    table = tmp_path / "shifts.csv"
    _write_table(table, range(5), _shifts(5))
    res = xcorr("apply", table, path, "--out", tmp_path / "out.tif")
    assert_clean_error(res, "outside float32's range")
    assert not (tmp_path / "out.tif").exists()
    with pytest.raises(InputError, match="outside float32's range"):
        list(xcorr_app.apply_shifts(frames, _shifts(5), device="cpu"))
