"""``xcorr bench``: time xcorr's kernels against the peers on this GPU (the benchmarks live in
:mod:`xcorr_app.bench`; this is their one command line)."""

from __future__ import annotations

from pathlib import Path

import click

from ._main import OnceGroup
from ._options import FORCE, GPUS_LIST, MEMORY, json_rows_option, planner_notes
from ._volumes import PATCHES_ZYX

__all__ = ["bench"]


@click.group(cls=OnceGroup)
def bench():
    """Time xcorr's kernels against the peers on this GPU (CUDA events, medians)."""


@bench.command(name="xcorr")
@click.option("--explain", is_flag=True,
              help="Re-measure every problem's tuned plan and show what was measured.")
@click.option("--quick", is_flag=True, help="A handful of small problems (a smoke run).")
@click.option("--only", metavar="TEXT", help="Only problems whose name contains TEXT.")
@click.option("--no-check", is_flag=True, help="Do not compare the outputs with the FFT peer.")
@json_rows_option("(timings, candidates)")
@FORCE
def bench_xcorr_cmd(explain, quick, only, no_check, json_path, force):
    """Cross-correlation: the planner's kernel vs the overlap baseline, CuPy FFT and PyTorch.

    Prints ms per problem of the cost model's plan (what runs by default, nothing measured)
    and of the tuned plan (every candidate measured) side by side with their ratio, the ratio
    of the fastest peer to ours, and the share of the FP32 FMA peak. Exits 1 if any output
    disagrees with the FFT peer.
    """
    from ..bench import xcorr_bench

    planner_notes()
    status = xcorr_bench(quick=quick, only=only, explain=explain, check=not no_check,
                         json_path=json_path, force=force, echo=click.echo)
    if status:
        raise click.exceptions.Exit(status)


@bench.command(name="filter")
@click.option("--quick", is_flag=True, help="A small stack, 4 frames of 512x512 (a smoke run).")
@click.option("--frames", type=click.IntRange(min=1), default=None,
              help="Frames in the stack  [default: 32, or 4 with --quick].")
@click.option("--size", metavar="H|HxW", default=None,
              help="Frame size  [default: 2048x2048, or 512x512 with --quick].")
@click.option("--only", metavar="NAME[,NAME]",
              help="Only these rows: 3x3, 5x5, 7x7, 11x11, gaussian31.")
@click.option("--no-check", is_flag=True, help="Do not compare our outputs with cupyx.")
@json_rows_option("(timings, ratios, roofline)")
@FORCE
def bench_filter_cmd(quick, frames, size, only, no_check, json_path, force):
    """Filters: the reuse convolution kernels vs cupyx.scipy.ndimage and PyTorch conv2d.

    A float32 stack (32 frames of 2048x2048) with 3x3, 5x5, 7x7, 11x11 filters and a 31-tap
    separable gaussian, reflect boundary. Prints ms of ours (taps in the parameter bank), of
    the papers' layout (taps in shared memory), of cupyx and of PyTorch (fp32, cuDNN, TF32
    off), the ratio of the fastest peer and of cupyx to ours, and the share of the memory
    roofline (one read and one write of the stack at the copy bandwidth measured in the run).
    Exits 1 if an output of ours disagrees with cupyx.
    """
    from ..bench import filter_bench

    status = filter_bench(quick=quick, frames=frames, size=size, only=only,
                               check=not no_check, json_path=json_path, force=force,
                               echo=click.echo)
    if status:
        raise click.exceptions.Exit(status)


@bench.command(name="conv")
@click.option("--quick", is_flag=True, help="Batches of 4 and 2 (a smoke run).")
@click.option("--only", default=None, metavar="im2win|pointwise|LAYER",
              help="Only these rows (e.g. conv5 or pw3).")
@click.option("--repeat", type=click.IntRange(min=1), default=10, show_default=True,
              help="Timed runs per method (the median is reported).")
@click.option("--no-check", is_flag=True, help="Skip comparing our output with cuDNN's.")
@json_rows_option()
@FORCE
def bench_conv_cmd(quick, only, repeat, no_check, json_path, force):
    """Multi-channel convolution: our kernels (im2win, Winograd for 3x3 at stride 1, whichever
    measures faster) on the 12 layers of the im2win paper (batch 128 and 16) and the pointwise
    kernel on MobileNetV2's 1x1 layers (batch 32), against
    PyTorch/cuDNN (fp32, autotuned, TF32 off) and im2col + CuPy matmul (cuBLAS, TF32 off);
    prints TFLOPS, ratios and peak GPU memory."""
    from ..bench import conv_bench

    status = conv_bench(quick=quick, only=only, check=not no_check, json_path=json_path,
                             force=force, echo=click.echo, repeat=repeat)
    if status:
        raise click.exceptions.Exit(status)


@bench.command(name="align")
@click.option("--quick", is_flag=True, help="32 frames of 512x512 (a smoke run).")
@click.option("--frames", type=click.IntRange(min=2), default=None,
              help="Frames in the stack  [default: 512, or 32 with --quick].")
@click.option("--size", metavar="H|HxW", default=None,
              help="Frame size  [default: 2048x2048, or 512x512 with --quick].")
@click.option("--workdir", type=click.Path(path_type=Path), default=None,
              help="Where to write the stack  [default: the temporary folder].")
@click.option("--keep", is_flag=True, help="Keep the stack file afterwards.")
@click.option("--max-memory", type=MEMORY, default=None, help="Passed to xcorr align.")
@click.option("--repeat", type=click.IntRange(min=1), default=1, show_default=True,
              help="Time every row this many times and report the median.")
@json_rows_option()
@click.option("--gpus", type=GPUS_LIST, default=None,
              help="Several GPUs: one-shot xcorr align processes on 1, 2, 4, ... of these GPUs "
                   "(--gpus, and --workers N with Dask), rigid and --patches (default 8x8), "
                   "against one GPU and a read by as many threads; 4096 frames of 2048x2048 "
                   "(32 GiB) by default.")
@click.option("--device", type=click.Choice(["gpu", "cpu"]), default="gpu", show_default=True,
              help="cpu: the CPU path against a scikit-image loop (upsample 20), in process "
                   "and as one-shot processes with their peak memory; 300 frames of "
                   "1024x1024 by default.")
@click.option("--patches", type=PATCHES_ZYX, default=None,
              help="Piecewise-rigid: time align --patches GYxGX in process (host in/out and "
                   "frames on the GPU) against a per-patch CuPy FFT loop and the rigid-only "
                   "path, with the field error against the synthetic truth; 4096 frames of "
                   "512x512 by default.  With --volumes, GZxGYxGX: 3-D patches against the "
                   "rigid 3-D run on volumes deformed by a known field.")
@click.option("--floor", is_flag=True,
              help="Rigid align in process against the hardware's floor: the pinned copy, "
                   "the batched FFT correlation padded as the unbounded search needs (1.5x "
                   "per axis) and unpadded (bounded runs); each align row's share of its "
                   "floor (from NumPy: the larger of the copy and the correlation); 128 and "
                   "1024 frames of 512, 1024 and 2048 px square by default (--frames and "
                   "--size pick one).")
@click.option("--formats", is_flag=True,
              help="One-shot xcorr align processes of the stack written as OME-Zarr and as "
                   "HDF5 (a frame per chunk, uncompressed) against each library's plain read "
                   "(in process and one-shot); 512 frames of 2048x2048 by default.")
@click.option("--volumes", is_flag=True,
              help="3-D registration of a (T, Z, Y, X) uint16 stack on the GPU against "
                   "scikit-image's 3-D phase_cross_correlation and a per-volume CuPy FFT loop, "
                   "in process and as one-shot processes; 64 volumes of 64x512x512 by default "
                   "(--frames: volumes).")
@click.option("--first-runs", is_flag=True,
              help="Whole xcorr align processes as first run: the cell sample on the CPU, on "
                   "the GPU and with the default device, first with fresh caches then warm; "
                   "and a stack (64 frames of 2048x2048 by default) warm against one-shot "
                   "tifffile read + write and the CUDA start (--repeat at least 3).")
@FORCE
def bench_align_cmd(quick, frames, size, workdir, keep, max_memory, repeat, json_path, gpus,
                    device, patches, floor, formats, volumes, first_runs, force):
    """End to end: xcorr align on a uint16 TIFF vs tifffile reading, a per-pair CuPy FFT loop
    and scikit-image.

    Writes a 512-frame 2048x2048 uint16 stack with a known drift to local disk, then times
    reading it with tifffile alone, xcorr align (--max-shift 16, unbounded, and without the FFT
    check), a loop of per-pair CuPy phase correlation (what cuCIM does) and, on 32 frames,
    skimage.registration.phase_cross_correlation; prints frames/s, GB/s, the share of the read
    throughput, the ratio to the per-pair loop and the RMS error against the known drift.
    """
    if patches is not None and len(patches) == 3 and not volumes:
        raise click.UsageError("--patches GZxGYxGX is for --volumes (3-D patches)")
    if gpus is not None:
        from ..bench import align_gpus_bench

        if quick or floor or formats or volumes or first_runs \
                or max_memory is not None or device != "gpu":
            raise click.UsageError("--gpus takes --frames, --size, --patches, --repeat, "
                                   "--workdir, --keep and --json only")
        status = align_gpus_bench(gpus, frames=frames, size=size,
                                  patches=patches if patches is not None else (8, 8),
                                  repeat=repeat, workdir=workdir, keep=keep,
                                  json_path=json_path, force=force, echo=click.echo)
        if status:
            raise click.exceptions.Exit(status)
        return
    if first_runs:
        from ..bench import align_first_runs_bench

        if quick or keep or floor or formats or volumes or patches is not None \
                or max_memory is not None or device != "gpu":
            raise click.UsageError("--first-runs takes --frames, --size, --repeat, --workdir "
                                   "and --json only")
        status = align_first_runs_bench(frames=frames, size=size, repeat=max(repeat, 3),
                                        workdir=workdir, json_path=json_path, force=force,
                                        echo=click.echo)
        if status:
            raise click.exceptions.Exit(status)
        return
    if volumes and (floor or formats or keep):
        raise click.UsageError("--volumes takes --quick, --frames, --repeat, --workdir and "
                               "--json only")
    if floor:
        from ..bench import align_floor_bench, parse_size

        side = None if size is None else [parse_size(size)[0]]
        status = align_floor_bench(frames=None if frames is None else [frames], sides=side,
                                   repeat=max(repeat, 3), echo=click.echo, json_path=json_path)
        if status:
            raise click.exceptions.Exit(status)
        return
    if volumes and patches is not None:  # (3-D patches: their own bench)
        from ..bench import align_volumes_patches_bench

        if len(patches) != 3 or size is not None or max_memory is not None \
                or device != "gpu" or workdir is not None:
            raise click.UsageError("--volumes --patches takes GZxGYxGX, --quick, --frames, "
                                   "--repeat and --json only")
        status = align_volumes_patches_bench(quick=quick, frames=frames, patches=patches,
                                             repeat=repeat, json_path=json_path, force=force,
                                             echo=click.echo)
        if status:
            raise click.exceptions.Exit(status)
        return
    if volumes:
        from ..bench import align_volumes_bench

        if size is not None or max_memory is not None or device != "gpu":
            raise click.UsageError("--volumes takes --quick, --frames, --repeat, --workdir and "
                                   "--json only")
        status = align_volumes_bench(quick=quick, frames=frames, repeat=repeat,
                                     workdir=workdir, json_path=json_path, force=force,
                                     echo=click.echo)
        if status:
            raise click.exceptions.Exit(status)
        return
    if formats:
        from ..bench import align_formats_bench

        if floor or patches is not None or max_memory is not None:
            raise click.UsageError("--formats takes --quick, --frames, --size, --repeat, "
                                   "--device, --workdir, --keep and --json only")
        status = align_formats_bench(quick=quick, frames=frames, size=size, workdir=workdir,
                                     keep=keep, repeat=repeat, device=device,
                                     json_path=json_path, force=force, echo=click.echo)
        if status:
            raise click.exceptions.Exit(status)
        return
    from ..bench import align_bench

    status = align_bench(quick=quick, frames=frames, size=size, workdir=workdir, keep=keep,
                              json_path=json_path, force=force, echo=click.echo,
                              max_memory=max_memory, repeat=repeat,
                              device=device, patches=patches)
    if status:
        raise click.exceptions.Exit(status)


def _seeds(text):
    """``--seeds 0,1,2`` (or ranges: ``10-29``, ``0-2,7``) as a tuple of ints (a bad list is
    a one-line error)."""
    try:
        seeds = []
        for part in (p.strip() for p in text.split(",")):
            first, dash, last = part.partition("-")
            if part and dash and first.strip():
                if int(last) < int(first):
                    raise ValueError(part)
                seeds += range(int(first), int(last) + 1)
            elif part:
                seeds.append(int(part))
        seeds = tuple(seeds)
    except ValueError:
        raise click.BadParameter(f"expected integers or ranges A-B separated by commas, got "
                                 f"{text!r}") from None
    if not seeds or min(seeds) < 0:
        raise click.BadParameter(f"expected non-negative integers, got {text!r}")
    return seeds


@bench.command(name="accuracy")
@click.option("--quick", is_flag=True,
              help="Tiny stacks of every kind, the first seed only (a smoke run, CI).")
@click.option("--seeds", default="0-4", show_default=True, metavar="N[,N|A-B]",
              callback=lambda ctx, param, value: _seeds(value),
              help="Seeds of the stacks (image region, drift, noise); ranges A-B too.")
@click.option("--only", "--kinds", "only", metavar="KIND[,KIND]",
              help="Only these kinds: plain, low_light, bleaching_background, large_drift, "
                   "non_square, circular, piecewise, circular_noisy; the hard ones: "
                   "static_blobs, dust_vignette, fixed_pattern, deep_bleaching, rotation, "
                   "rotation_jitter, shutter; volumes (3-D, only when named).")
@click.option("--gpu", is_flag=True,
              help="Also align every 2-D stack with the default on the GPU, and report per "
                   "kind how far its shifts are from the CPU's (target: 1e-3 px) and the "
                   "frames flagged on one device only.")
@json_rows_option()
@FORCE
def bench_accuracy_cmd(quick, seeds, only, gpu, json_path, force):
    """Accuracy on hard stacks (CPU): xcorr's default and scikit-image's
    phase_cross_correlation (upsample 100, the better normalization of each stack) against the
    exact drift.

    Stacks made from scikit-image's sample images (needs scikit-image), every kind from four
    or more images at two frame sizes and every seed: low light (25 photons), bleaching over a
    static background, large drift (up to 30 px), non-square, circular shifts, piecewise-rigid
    motion (the motion field's error), noisy circular shifts (800 photons, down to 64x64) and
    plain; and what microscopes make hard, through an sCMOS camera's noise: static blobs and
    hot pixels, dust and vignette, fixed-pattern noise (40 photons), 20x bleaching, rotation
    (a ramp to 1-2 degrees, or jitter), a shutter closed on half the frames. Prints per kind
    the median and worst RMS error (px) of the default and of scikit-image, the oracle's floor,
    how many stacks the default wins, ties or loses, the Cramer-Rao bound and the frames more
    than 0.5 px off (how many of them flagged); every stack's row; the targets. Exits 1 if a
    method failed. `--kinds volumes`: 12 volumes cut from a drifting 3-D scene (anisotropic
    voxels, drift in z) through the same camera, align_volumes against scikit-image's 3-D call
    (voxels).
    """
    from ..bench import accuracy_bench

    kinds = [k.strip() for k in only.split(",") if k.strip()] if only else None
    status = accuracy_bench(quick=quick, seeds=seeds, kinds=kinds, json_path=json_path,
                            force=force, echo=click.echo, gpu=gpu)
    if status:
        raise click.exceptions.Exit(status)
