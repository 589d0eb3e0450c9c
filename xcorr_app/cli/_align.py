"""``xcorr align``: estimate the drift of every frame of a stack and write the aligned stack."""

from __future__ import annotations

import dataclasses
import functools
import json
import signal
import time
from pathlib import Path
from types import SimpleNamespace

import click

from ..alignment import (AlignOptions, BOUNDARIES, DEFAULT_UPSAMPLE, LUCAS_KANADE,
                         check_limits, limit_devices)
from ..alignment import MODELS
from ..alignment.rigid import DESPIKE, STATIC
from ._options import (BIDI, FEATURES, MEMORY, NORMALIZATIONS, PREFILTER, RESAMPLE_ANY,
                       SUBPIXEL, WINDOW, default_out, note_cpu_fallback, note_device,
                       planner_notes, print_notes, progress_bar, readable_frames_of, scale_out,
                       scale_out_command, stack_command, where)
from ._flags import as_flags, say_later
from ._input import apply_channels, input_options, input_path
from ._main import DeviceCommand
from ._volumes import GRID_TEXT, MAX_SHIFT_ZYX, VOLUME_OPTIONS, check_volume_options
from ..errors import InputError
from ..io import OUT_FORMATS, plural

__all__ = ["align", "note_late_signal"]

#: the defaults of the options of :func:`xcorr_app.align`, from their one home
DEFAULT = {f.name: f.default for f in dataclasses.fields(AlignOptions)}

#: what to measure (the options of :func:`xcorr_app.align`), in the order of ``--help``
MEASURE_OPTIONS = (
    click.option("--reference", default=None,
                 help="first | refined | refined:ITER (template of the aligned frames, every "
                      "frame measured again: noisy stacks; ITER 1 or 2 passes) | mean | mean:N "
                      "(of the first N frames) | previous (frame to frame, accumulated) | a "
                      f"frame INDEX | an image FILE.  [default: {DEFAULT['reference']}]"),
    click.option("--max-shift", type=MAX_SHIFT_ZYX, default=None,
                 help="Search shifts only up to N pixels (the planner picks the warp-shuffle "
                      "kernels or FFT); default: up to half the frame, by FFT.  SZ,SY,SX "
                      "voxels with --volumes."),
    click.option("--normalization", type=click.Choice(NORMALIZATIONS),
                 default=DEFAULT["normalization"],
                 show_default=True,
                 help="zncc: zero-normalized per shift over the overlap; none: mean-subtracted "
                      "sums; phase: phase correlation (FFT)."),
    click.option("--subpixel", type=click.Choice(SUBPIXEL), default=DEFAULT["subpixel"],
                 show_default=True,
                 help="Subpixel refinement: 2-D fit on the 3x3 peak neighbourhood (gaussian, "
                      "parabolic), 3-point fits along rows and columns (...3), or upsampled "
                      "DFT (upsample); auto: upsample with --normalization phase, else "
                      "gaussian."),
    click.option("--upsample", type=int, default=DEFAULT["upsample"], metavar="K",
                 help="Upsampling factor (1-100) of --subpixel upsample and the circular "
                      f"refinement (resolution 1/K px).  [default: {DEFAULT_UPSAMPLE}]"),
    click.option("--prefilter", type=PREFILTER, default=DEFAULT["prefilter"], show_default=True,
                 help="Filter frames before correlating; auto: dog:1,4 (band-pass) when the "
                      "brightness changes by more than 10% over the stack (bleaching over a "
                      "background), else gaussian:1."),
    click.option("--bidi", type=BIDI, default=DEFAULT["bidi"], show_default=True,
                 help="Bidirectional (resonant) scan: remove the x offset of every other line "
                      "before measuring and in aligned.tif; auto: estimated from a few frames "
                      "and removed where it is at least 0.1 px; PX: that offset in pixels "
                      "(recorded in shifts.json, which xcorr apply reads)."),
    click.option("--static", type=click.Choice(STATIC), default=DEFAULT["static"],
                 show_default=True,
                 help="Patterns fixed on the sensor (hot pixels, stray light, dust, column "
                      "offsets) that pull shifts to zero: auto finds them in a few frames and "
                      "removes them from the frames it measures (aligned.tif: as read); on: "
                      "always; off: never."),
    click.option("--despike", type=click.Choice(DESPIKE), default=DEFAULT["despike"],
                 show_default=True,
                 help="Bright specks of one frame (cosmic rays, single hot pixels) that pull "
                      "shifts: auto finds them in a few frames and takes them out of the "
                      "frames it measures (aligned.tif: as read); on: always; off: never."),
    click.option("--boundary", type=click.Choice(BOUNDARIES), default=DEFAULT["boundary"],
                 show_default=True,
                 help="linear: frames are views of a larger scene; circular: frames wrap "
                      "around (circular shifts, periodic test data); auto: detected after the "
                      "first pass (periodic stacks are measured once more)."),
    click.option("--lucas-kanade", "lucas_kanade", type=click.Choice(LUCAS_KANADE),
                 default=DEFAULT["lucas_kanade"], show_default=True,
                 help="on: refine every frame's shift by a Lucas-Kanade fit against a denoised "
                      "template of the other frames (low light); reference: by a Gauss-Newton "
                      "step against the reference, in the pass (steady stacks); auto: on for "
                      "noisy stacks, reference for steady ones."),
    click.option("--model", type=click.Choice(MODELS), default=DEFAULT["model"],
                 show_default=True,
                 help="translation: a shift per frame; rigid-body: a rotation about the frame "
                      "centre and a shift per frame (measured from 3x3 patches; aligned.tif and "
                      "xcorr apply rotate and shift), for stacks that rotate.  Either way frames "
                      "still rotated by enough that a corner may be 0.5 px off are flagged "
                      "rotated."),
    click.option("--window", type=WINDOW, default=DEFAULT["window"], show_default=True,
                 help="Apodize frames before correlating (suppresses edge effects)."),
    click.option("--features", type=FEATURES, default=None,
                 help="Register on the local energy of this filter bank (im2win or, for 3x3 "
                      "filters, Winograd kernel) instead of the prefiltered frames."),
    click.option("--tune", is_flag=True,
                 help="GPU: measure the likeliest kernels for this problem (at most 2 s, cached) "
                      "instead of the planner's cost model (also XCORR_TUNE=1, xcorr tune)."),
    click.option("--min-confidence", type=float, default=DEFAULT["min_confidence"],
                 help="Flag frames whose peak / second peak is below this."),
    click.option("--interpolate-low", is_flag=True,
                 help="Give flagged frames shifts interpolated from their neighbours."),
    click.option("--patches", type=GRID_TEXT, default=None,
                 help="Piecewise-rigid: after the rigid pass, measure GYxGX overlapping patches "
                      "of every frame within --max-deviation of its rigid shift and warp by the "
                      "smooth motion field (writes motion_field.npz and motion_field.png); "
                      "GZxGYxGX patches of every volume with --volumes (the field in "
                      "shifts.json)."),
    click.option("--patch-overlap", type=int, default=DEFAULT["patch_overlap"], metavar="PX",
                 help="Overlap of neighbouring patches in pixels [default: a quarter of the "
                      "grid's stride]."),
    click.option("--max-deviation", type=int, default=DEFAULT["max_deviation"], show_default=True,
                 metavar="PX",
                 help="Largest shift of a patch from its frame's rigid shift (with --patches)."),
    click.option("--patch-template-passes", type=int, default=DEFAULT["patch_template_passes"],
                 show_default=True,
                 metavar="N",
                 help="With --patches: N times (0-2), average the frames warped by their "
                      "fields into a new template and measure the patches again against it "
                      "(as NoRMCorre); one more read of the stack each."),
    click.option("--mask", default=None, metavar="FILE|nan",
                 help="Measure on the pixels of this image that are nonzero only (TIFF or "
                      ".npy, the frames' shape): a static artefact, a saturated bar or dead "
                      "columns set to 0 take no part in any shift (masked ZNCC).  'nan': each "
                      "frame's own NaN pixels left out.  No FFT check nor quality report "
                      "then."),
    click.option("--max-memory", type=MEMORY, default=None,
                 help="Cap on memory held at once, e.g. 2G (host buffers + GPU working set); "
                      "default: half the free GPU memory. Results do not depend on it."),
)

#: what to write
OUTPUT_OPTIONS = (
    click.option("--out", "out_dir", type=str, default=None,
                 help="Output folder [default: STEM_xcorr in the current folder, wherever "
                      "the input is]; with several PATHs, the folder of their STEM_xcorr "
                      "folders and sessions.csv [default: the current folder]."),
    click.option("--resample", type=click.Choice(RESAMPLE_ANY), default="bilinear",
                 show_default=True,
                 help="How aligned.tif is resampled at subpixel shifts (fourier: rigid only; "
                      "cubic: with --patches only)."),
    click.option("--crop", is_flag=True,
                 help="Crop aligned.tif to the area every shifted frame covers."),
    click.option("--fill", type=float, default=0.0, show_default=True,
                 help="Value for pixels shifted in from outside the frame (without --crop)."),
    click.option("--no-verify", is_flag=True, help="Skip the FFT reference measurement (faster)."),
    click.option("--no-quality", is_flag=True,
                 help="Skip the quality report (quality.png and the correlation and residual "
                      "columns of shifts.json: the stack is read twice more for it)."),
    click.option("--no-aligned", is_flag=True, help="Do not write aligned.tif."),
    click.option("--out-format", default="tiff", show_default=True,
                 metavar=f"[{'|'.join(OUT_FORMATS)}|hdf5:/NAME]",
                 help="Format of the aligned stack: tiff (aligned.tif, ImageJ), ome-tiff "
                      "(aligned.ome.tif), ome-zarr (aligned.ome.zarr, a folder: OME-NGFF 0.5 "
                      "for a 0.5 input, else 0.4), hdf5 (aligned.h5, dataset /aligned; "
                      "hdf5:/NAME names it, e.g. hdf5:/data as suite2p reads), nwb (an NWB "
                      "input only: aligned.nwb, a copy of it with a MotionCorrection in "
                      "processing/ophys); each with the input's pixel size, channel names and "
                      "frame interval."),
    click.option("--in-place", "in_place", is_flag=True,
                 help="With --out-format nwb: write the MotionCorrection into the NWB input "
                      "itself (replaced by a completed copy: room for a second copy needed) "
                      "instead of aligned.nwb; --force replaces an earlier xcorr run's."),
    click.option("--keep-dtype", is_flag=True,
                 help="Write the aligned stack in the input's pixel type (integers rounded "
                      "and clipped) instead of float32."),
    click.option("--apply-to", default=None, metavar="all|LIST",
                 help="With --channel K: measure on channel K and write these channels (all, "
                      "or e.g. 0,2) aligned by the same shifts into one hyperstack."),
    click.option("--json", "as_json", is_flag=True, help="Print the result as JSON on stdout."),
)


def _options(fn):
    for option in reversed(MEASURE_OPTIONS + OUTPUT_OPTIONS + VOLUME_OPTIONS):
        fn = option(fn)
    return fn


@click.command(cls=DeviceCommand)
@click.argument("path", nargs=-1, required=True, type=click.Path(path_type=Path),
                metavar="PATH...")
@_options
@scale_out_command
@stack_command
@input_options
def align(path, dataset, z, axes, **options):
    """Estimate the drift of every frame of PATH and write the aligned stack.

    PATH is a multi-page TIFF (ImageJ hyperstacks and OME-TIFF included), a folder of TIFFs,
    a Zarr/OME-Zarr store, an HDF5 or NWB file (FILE:/DATASET or --dataset); it is streamed,
    so it may be larger than the GPU's or the host's memory. Writes shifts.csv,
    shifts.json, aligned.tif and drift.png into the output folder (with --patches also
    motion_field.npz and motion_field.png). Shifts are (dy, dx) to apply to each frame to align
    it with the reference, as in scikit-image.

    Several PATHs (or a quoted glob pattern, 'session/*.tif') are a session: each recording
    into its own folder OUT/STEM_xcorr (--out: the parent, default the current folder), one
    table OUT/sessions.csv; a finished recording is skipped unless --force; --gpus aligns one
    recording a GPU at once.
    """
    from ..alignment import is_pattern

    if len(path) > 1 or is_pattern(path[0]):  # a session (docs/cli.md, "Many recordings")
        from ._align_sessions import align_session_cli

        check_volume_options(options)  # SZ,SY,SX and --voxel-size only with --volumes
        return align_session_cli(path, dataset, z, axes, SimpleNamespace(**options), AS_GIVEN)
    path = path[0]
    path = input_path(path, dataset, z, axes)  # FILE:/DATASET?z=K&axes=A: every reader
    # opens it so
    o = SimpleNamespace(path=path, **options)
    o.quiet = o.quiet or o.as_json
    if o.volumes:  # (T, Z, Y, X): 3-D registration
        from ._volumes import align_volumes_cli

        return align_volumes_cli(o)
    from ..io import HoldsVolumes

    try:
        with readable_frames_of(path, o.readable_frames, o.workers, o.scheduler):
            _align(o)
    except HoldsVolumes as exc:  # (a T x Z file: its volumes, where the options allow it)
        from ._volumes import align_volumes_cli, given_options, unused_by_volumes

        unused = unused_by_volumes(o, given_options())
        if unused:
            raise InputError(f"{exc} ({', '.join(unused)} "
                             f"{'does' if len(unused) == 1 else 'do'} not apply to volumes)") \
                from None
        o.volumes = True  # (the note: once the volumes' options pass, not before an error)
        return align_volumes_cli(o, note=_held_note(path, exc))


def _held_note(path, held) -> str:
    return (f"note: {path} holds volumes ({plural(held.times, 'time point')} of "
            f"{plural(held.planes, 'Z plane')}, axes {held.axes}): registered in 3-D as with "
            f"--volumes ({held.one_plane} aligns one plane)")


def _align(o):
    """``xcorr align`` once its options are parsed (``o``): the run, its outputs written by
    :class:`~xcorr_app.alignment.outputs.RunOutputs` (as :meth:`AlignResult.save` writes
    them)."""
    from ..alignment.outputs import RunOutputs
    from ..io import parse_out_format, split_source

    # (once: the format's name, and an HDF5 output's dataset)
    o.out_format, o.out_dataset = parse_out_format(o.out_format)
    path = o.path
    out_dir = o.out_dir if o.out_dir is not None else default_out(path, "_xcorr")
    shape, itemsize, n = _check(o)  # (o.opts: the run's options, parsed once)
    outputs = RunOutputs(out_dir, aligned=not o.no_aligned, format=o.out_format,
                         quality=o.opts.quality, patches=o.opts.patches is not None,
                         force=o.force, name="--out",
                         in_place=split_source(path)[0] if o.in_place else None,
                         inputs=[split_source(path)[0]] + [Path(f) for f in
                                                           (o.reference, o.opts.mask)
                                                           if _is_file(f)])
    frame_gb = shape[0] * shape[1] * itemsize / 1e9
    # all outputs appear together when everything succeeded, or none (and no folder it made)
    with outputs:
        with scale_out(o.gpus, o.workers, o.scheduler, o.device, stack_bytes=n * frame_gb * 1e9,
                       quiet=o.quiet) as (client, gpu_ids):
            # aligned.tif written as the run goes where it can, and finished while the other
            # outputs are written (closed before the commit)
            sink = outputs.aligned_sink(shape, n, o.aligned_as) \
                if _aligned_by_the_run(o, client, gpu_ids) else None
            res = _measure(o, client, gpu_ids, n, frame_gb, out=sink)
            ran_on = where(o.dev, client, gpu_ids)
            frames = None
            if sink is None and not o.no_aligned:  # (warped here, on the run's GPUs, or by Dask)
                warp = None
                if client is not None:
                    from ..distributed import aligned_blocks

                    warp = functools.partial(aligned_blocks, res, client, device=o.device)
                frames = res.aligned_frames(channels=o.apply_channels, resample=o.resample,
                                            crop=o.crop, fill=o.fill, warp=warp)
            quiet = o.quiet or frames is None
            with progress_bar(n, "writing aligned.tif", quiet) as bar:
                written = outputs.write(res, frames=frames, resample=o.resample, crop=o.crop,
                                        fill=o.fill, progress=bar.update,
                                        aligned=o.aligned_as)
        if o.as_json:
            click.echo(json.dumps(outputs.document))  # (shifts.json's, as written)
        elif not o.quiet:
            _print_summary(path, shape, ran_on, res, res.summary(), res.seconds, frame_gb,
                           written.values())
            for p in outputs.removed:
                click.echo(f"  removed {p} of an earlier run (not written by this one)")
    note_late_signal(outputs)


def note_late_signal(run):
    """Say so when a stop signal came while the finished outputs were renamed (or after): the
    run is whole, its outputs are kept, and it ends normally."""
    if run.late_signal is not None:
        click.echo(f"note: interrupted ({signal.Signals(run.late_signal).name}) after the outputs "
                   "were complete; they are kept", err=True)


def _is_file(name) -> bool:
    if not isinstance(name, (str, Path)):
        return False
    try:
        return Path(name).is_file()
    except (OSError, ValueError):
        return False


#: the options of :class:`AlignOptions` the command line gives as they are (``verify`` is
#: ``--no-verify``)
AS_GIVEN = tuple(f.name for f in dataclasses.fields(AlignOptions)
                 if f.name not in ("verify", "quality", "axes"))  # (--axes: in the path)


def _check(o):
    """Check every option before a cluster starts (``o.opts``, the run's
    :class:`AlignOptions`); open the input once.  What the options ask of the frames (the
    bound, one frame's memory, the filters' radius) the run checks itself before it reads a
    frame (on Dask: here, before the cluster starts).  Returns ``(frame_shape, itemsize,
    n_frames)``."""
    from ..alignment.outputs import aligned_as, channel_metadata, check_save
    from ..errors import XcorrError
    from ..io import HoldsVolumes, check_planes, open_stack

    try:
        check_volume_options(vars(o))  # SZ,SY,SX and --voxel-size only with --volumes
    except InputError as refused:
        try:  # (a file of volumes takes them: its route, HoldsVolumes)
            with open_stack(o.path, channel=o.channel) as src:
                check_planes(src)
        except HoldsVolumes:
            raise
        except XcorrError:  # (a file that cannot be read as it is: the options' line)
            pass
        raise refused
    # (the errors in the API's words: the command prints them as flags, cli._flags)
    o.opts = AlignOptions.from_arguments(**{k: getattr(o, k) for k in AS_GIVEN},
                                         verify=not o.no_verify, quality=not o.no_quality)
    if o.workers is not None or o.scheduler:  # (before a cluster starts; else the run's own)
        o.opts.check_executor("dask")
    # (before the input is opened: a fill aligned.tif cannot hold, not after measuring)
    o.fill = check_save(patches=o.opts.patches is not None, aligned=not o.no_aligned,
                        format=o.out_format, resample=o.resample, crop=o.crop, fill=o.fill,
                        keep_dtype=o.keep_dtype, in_place=o.in_place, model=o.opts.model)
    if o.gpus is not None:
        from ..streaming import need_gpus

        need_gpus()
    with open_stack(o.path, channel=o.channel) as src:  # fail early on a bad input
        check_planes(src)  # (a T x Z TIFF: align's caller registers it in 3-D, or refuses)
        if src.dtype.kind == "f" and src.dtype.itemsize == 8 \
                and (not o.no_aligned or o.opts.patches is not None):
            from ..alignment.rigid import check_float32_range

            what, fix = ("the aligned stack is computed", "run with --no-aligned") \
                if o.opts.patches is None else \
                ("the patches' warped frames are computed", "run without --patches")
            check_float32_range(src.read(0, 1)[0], Path(str(o.path)).name, what,
                                f"the shifts are measured at any scale: {fix}, or scale the "
                                "stack into that range")
        n, shape, itemsize = src.n_frames, src.frame_shape, src.dtype.itemsize
        o.aligned_as = aligned_as(src, o.path, o.keep_dtype, o.out_format,  # (notes too)
                                  o.out_dataset, o.force, o.fill)
        print_notes(src, o.quiet)
        o.apply_channels = apply_channels(o.apply_to, o.channel, src, o.no_aligned)
        # (the names of the channels written: those applied to, or the measured one alone)
        o.aligned_as = channel_metadata(o.aligned_as, o.apply_channels, o.channel)
    # in this process the run decides the device, once, where it starts on it
    # (backend.decide_device): what comes before it overlaps CUDA's start
    o.dev, o.limits = None, None
    if o.workers is not None or o.scheduler:  # (before a cluster starts: its workers decide)
        o.dev = note_device(o.device, o.quiet)
        o.limits = (tuple(shape), itemsize, limit_devices(o.device, "dask"))
        check_limits(o.opts, *o.limits)  # (the run's check: the pipeline is told, o.limits)
    planner_notes(o.quiet)
    return shape, itemsize, n


def _measure(o, client, gpu_ids, n, frame_gb, out=None):
    """The shifts of every frame: on a Dask cluster, on ``--gpus``, or in this process
    (``out``: :func:`xcorr_app.align`'s, on one device)."""
    opts = o.opts._decided(gpus=gpu_ids)  # (the GPUs found for --gpus)
    if o.gpus is not None and gpu_ids is None:  # --gpus all on a small stack: one GPU, as asked
        opts = opts._decided(device="gpu")
    with progress_bar(n, "measuring", o.quiet) as bar:
        update = _rate_updater(bar, frame_gb)
        if client is not None:
            from ..distributed import align as dask_align

            return dask_align(o.path, client=client, progress=update, options=opts,
                              _limits_checked=o.limits)
        from ..alignment import align as run_align

        res = run_align(o.path, out=out, progress=update, options=opts)
    if gpu_ids is None:
        if o.dev is None and o.device == "auto" and res.settings["device"] == "cpu" \
                and not res.settings.get("device_note"):  # (auto on the CPU by choice: noted)
            note_cpu_fallback(o.quiet)
            say_later()  # (measured: its checks passed, said before the outputs' lines)
        o.dev = res.settings["device"]
    return res


def _aligned_by_the_run(o, client, gpu_ids) -> bool:
    """aligned.tif written by the run itself (``align(out=)``: during the last patch pass, or
    from the stack kept on the GPU): on one device, with the defaults of the aligned frames
    (no ``--crop``, which needs every frame's shifts first, bilinear, ``--fill 0``)."""
    return not o.no_aligned and client is None and gpu_ids is None and not o.crop \
        and o.resample == "bilinear" and o.fill == 0.0 and o.apply_to is None


def _rate_updater(bar, frame_gb):
    """A progress callback that also shows GB/s of input read."""
    t0 = time.perf_counter()
    done = [0]

    def update(k):
        done[0] += k
        bar.update(k)
        bar.set_postfix_str(f"{done[0] * frame_gb / max(time.perf_counter() - t0, 1e-9):.2f} GB/s",
                            refresh=False)
    return update


def _print_summary(path, shape, dev, res, s, seconds, frame_gb, written):
    rate = s["frames"] / max(seconds, 1e-9)
    click.echo(f"xcorr align: {s['frames']} frames of {shape[0]}x{shape[1]} from {path} on {dev} "
               f"({rate:.1f} frames/s, {rate * frame_gb:.3g} GB/s)")
    fit = {"on": ", Lucas-Kanade fit against the template",
           "reference": ", Gauss-Newton step against the reference"}.get(
        res.settings.get("lucas_kanade"), "")
    click.echo(f"  max |shift| {s['max_abs_shift']:.2f} px; reference {res.settings['reference']}, "
               f"subpixel {res.settings['subpixel']}{fit}, correlation {res.plan}")
    if res.settings["verify"]:
        n_ok = int(res.agree.sum())
        click.echo(f"  FFT reference: integer peaks agree on {n_ok}/{s['frames']} frames "
                   f"({100 * s['agreement']:.1f}%), RMS difference {s['rms_vs_fft']:.3f} px")
    if res.motion_field is not None:
        import numpy as np

        g = res.settings["patches"]
        mag = np.sqrt((res.deviation() ** 2).sum(axis=-1))
        mag = mag[np.isfinite(mag)]
        click.echo(f"  patches {g['grid'][0]}x{g['grid'][1]} of {g['size'][0]}x{g['size'][1]} px "
                   f"(overlap {g['overlap'][0]},{g['overlap'][1]}): |deviation| from the rigid "
                   f"shift mean {mag.mean() if mag.size else float('nan'):.3f} px, max "
                   f"{mag.max() if mag.size else float('nan'):.3f} px")
    if res.rotation_deg is not None:
        import numpy as np

        turn = np.abs(res.rotation_deg[np.isfinite(res.rotation_deg)])
        click.echo(f"  model rigid-body: |rotation| mean {turn.mean() if turn.size else 0:.3f}, "
                   f"max {turn.max() if turn.size else 0:.3f} degrees")
    rotated = s.get("quality", {}).get("rotated_frames")
    if rotated:
        fix = "" if res.rotation_deg is not None else "; --model rigid-body aligns them"
        click.echo(f"  {plural(len(rotated), 'frame')} flagged rotated (still rotated against the "
                   f"template: a corner may be over 0.5 px off){fix}")
    for note in s.get("notes", []):  # border peaks, constant and NaN frames, ...
        click.echo(f"  note: {as_flags(note)}")
    if s["low_confidence_frames"]:
        what = ("flagged in shifts.csv" if not res.settings["interpolate_low"]
                else "shifts interpolated from neighbours" if s.get("interpolated_frames")
                else "flagged in shifts.csv, not interpolated (no frame was confident enough "
                     "to interpolate from)")
        click.echo(f"  {s['low_confidence_frames']} frame(s) below --min-confidence "
                   f"{res.settings['min_confidence']}: {what}")
    click.echo("  wrote " + ", ".join(str(p) for p in written))
