"""``xcorr filter``: filter every frame of a stack (one kernel, a bank, or a channel mix)."""

from __future__ import annotations

import contextlib
import math
import threading
import time
from pathlib import Path

import click

from .. import backend
from ..errors import InputError
from ._align import note_late_signal
from ._input import input_options, input_path
from ._main import DeviceCommand
from ._options import (BANK, KERNEL, MIX, MODES, default_out, note_device, print_notes,
                       progress_bar, readable_frames_of, scale_out, scale_out_command,
                       stack_command, where)

__all__ = ["filter_cmd", "output_run"]


@click.command(name="filter", cls=DeviceCommand)
@click.argument("path", type=click.Path(path_type=Path))
@click.option("--kernel", "spec", type=KERNEL, default=None,
              help="The filter to apply to every frame (one of --kernel, --bank, --mix); "
                   "it correlates, as scipy.ndimage.correlate (a FILE.npy is not flipped).")
@click.option("--bank", type=BANK, default=None,
              help="A bank of filters over all channels of each frame (im2win or, for 3x3 "
                   "filters, Winograd kernel): writes one channel per filter; a dog or gabor "
                   "sigma at most 5 (the filters are at most 31x31).")
@click.option("--mix", type=MIX, default=None,
              help="Mix the channels of each frame (a 1x1 convolution: the pointwise, "
                   "tensor-core or im2win kernel, whichever measures faster): luma, or (F, C) "
                   "weights.")
@click.option("--mode", type=click.Choice(MODES),
              default="reflect", show_default=True, help="Boundary mode (scipy.ndimage's names).")
@click.option("--cval", type=float, default=0.0, show_default=True,
              help="Value outside the image for --mode constant.")
@click.option("--out", "out_path", type=click.Path(path_type=Path), default=None,
              help="Output TIFF (float32, ImageJ-compatible) [default: STEM_filtered.tif in "
                   "the current folder].")
@scale_out_command
@stack_command
@input_options
def filter_cmd(path, spec, bank, mix, mode, cval, out_path, gpus, workers, scheduler, channel,
               device, chunk_frames, readable_frames, force, quiet, dataset, z, axes):
    """Filter every frame of PATH and write a float32 stack.

    On a GPU the column/row-reuse kernels filter each chunk of frames in one launch (separable
    filters in two 1-D passes); on the CPU, scipy.ndimage.  The stack is streamed chunk by
    chunk, so it may be larger than the GPU's or the host's memory.  --bank and --mix read
    every channel of each frame and write an ImageJ hyperstack of the result's channels.
    """
    from ..filters import check_radius, parse_kernel_spec
    from ..io import open_stack, time_order
    from ..streaming import DEFAULT_CHUNK

    chunk_frames = chunk_frames or DEFAULT_CHUNK
    path = input_path(path, dataset, z, axes)  # FILE:/DATASET?z=K&axes=A: every reader opens it
    out_path = default_out(path, "_filtered.tif") if out_path is None else out_path

    given = [o for o, v in (("--kernel", spec), ("--bank", bank), ("--mix", mix)) if v]
    if len(given) != 1:
        raise InputError("give exactly one of --kernel, --bank and --mix"
                         + (f" (got {' and '.join(given)})" if given else ""))
    if bank or mix:
        if channel is not None:
            raise InputError("--bank and --mix use every channel; drop --channel")
        ctx = click.get_current_context()
        named = [f"--{p}" for p in ("mode", "cval")
                 if ctx.get_parameter_source(p) is not click.core.ParameterSource.DEFAULT]
        if named:  # (it was silently ignored)
            said = " and ".join(named)
            why = ("a --bank pads every frame with zeros, as a convolution layer does" if bank
                   else "a --mix weighs each pixel's channels, no neighbours")
            raise InputError(f"{said} {'applies' if len(named) == 1 else 'apply'} to --kernel "
                             f"only: {why}; drop {said}")
        with readable_frames_of(path, readable_frames, workers, scheduler):
            return _filter_channels(path, bank, mix, out_path, device, chunk_frames, force,
                                    quiet, (gpus, workers, scheduler))
    if cval != 0.0 and mode != "constant":  # (the value outside the frame of no mode)
        raise InputError(f"--cval applies to --mode constant, not {mode} (which fills past the "
                         "edge from the frame itself); add --mode constant, or drop --cval")
    fn = parse_kernel_spec(spec)

    def filtered(_, chunk):
        # raw dtype to the GPU: the kernels read uint8/uint16/float16 as they are
        return backend.to_numpy(interruptible(fn, chunk, mode, cval)).astype("float32",
                                                                             copy=False)

    def plan(src):
        check_radius(getattr(fn, "radius", 0), src.frame_shape, f"--kernel {spec}")
        def chunks(dev, client, gpu_ids, chunk):
            if client is not None:
                from ..distributed import filter as dask_filter, iter_blocks

                return iter_blocks(dask_filter(path, spec, mode=mode, cval=cval,
                                               channel=channel, device=device), client)
            return _kernel_chunks(path, channel, src, dev, gpu_ids, chunk, filtered)
        return 1, chunks

    def describe(src, _, ran_on, seconds):
        return (f"xcorr filter: {src.n_frames} frames of {src.frame_shape[0]}x"
                f"{src.frame_shape[1]} with {spec} ({mode}) on {ran_on} in {seconds:.2f} s; "
                f"wrote {out_path}")

    with readable_frames_of(path, readable_frames, workers, scheduler):
        _stream_to_tiff(lambda: time_order(open_stack(path, channel=channel)), plan, describe,
                        path, out_path, device, force, quiet, (gpus, workers, scheduler),
                        chunk_frames, channel)


def _stream_to_tiff(open_src, plan, describe, path, out_path, device, force, quiet, scale,
                    chunk_frames, channel=None):
    """What both filter commands do: open the input (``open_src()``), take the output
    (:func:`output_run`), start the GPUs or the cluster (``scale``: ``--gpus``, ``--workers``,
    ``--scheduler``), stream the filtered chunks into a float32 TIFF, commit it, and say what
    was done (``describe(src, n_out, where, seconds)``).  ``plan(src)`` gives the number of output
    channels and ``chunks(dev, client, gpu_ids, chunk)``, the ``(start, filtered chunk)`` pairs
    of chunks of at most ``chunk`` frames (``chunk_frames``, fewer where the host holds fewer:
    :func:`host_chunk`)."""
    dev = note_device(device, quiet)
    with open_src() as opened:
        if scale[1] or scale[2]:  # (--workers, --scheduler: before a cluster starts)
            _in_stored_order(opened, path)
        _stream_opened(opened, plan, describe, path, out_path, (device, dev), force, quiet,
                       scale, chunk_frames, channel)


def _stream_opened(opened, plan, describe, path, out_path, devices, force, quiet, scale,
                   chunk_frames, channel):
    """:func:`_stream_to_tiff`'s work once the input is open (``opened``; ``devices``: the
    device asked for and the one noted)."""
    from ..io import BackgroundWrites, TiffStackWriter, calibration, imagej_calibration

    device, dev = devices
    with output_run(path, out_path, force) as run, \
            scale_out(*scale, device) as (client, gpu_ids):
        src = opened
        if src.dtype.kind == "f" and src.dtype.itemsize == 8:  # (1e300 as float32: inf)
            src = _InFloat32(opened, Path(str(path)).name)
            src.read(0, 1)  # (the first frame's range said before anything is filtered)
        n_out, chunks = plan(src)
        chunk = chunk_frames if client is not None else host_chunk(src, n_out, chunk_frames)
        print_notes(src, quiet)
        t0 = time.perf_counter()
        filtered = chunks(dev, client, gpu_ids, chunk)
        said = calibration(path)  # (the pixel size, frame interval, Z step: not the channels')
        # (a T x Z stack read plane by plane: written back as its volumes, T and Z apart)
        volumes = getattr(src, "volumes", None)
        slices = volumes.planes if volumes is not None else 1
        names = said.get("channel_names") or []
        one = [names[channel]] if channel is not None and 0 <= channel < len(names) else None
        kept = imagej_calibration({**{k: said[k] for k in ("pixel_size", "frame_interval")
                                      + (("z_step",) if slices > 1 else ()) if k in said},
                                   **({"channel_names": one} if one else {})},
                                  n_frames=src.n_frames)
        with progress_bar(src.n_frames, "filtering", quiet) as bar, \
                TiffStackWriter(out_path, src.frame_shape, "float32",
                                n_frames=src.n_frames * n_out, channels=n_out, slices=slices,
                                **kept) as w, \
                BackgroundWrites(w) as background:  # the next chunk filtered meanwhile
            for _, out in filtered:
                background.write(backend.to_numpy(out).reshape(-1, *src.frame_shape))
                bar.update(len(out))
        run.commit()
        if not quiet:
            click.echo(describe(src, n_out, where(dev, client, gpu_ids),
                                time.perf_counter() - t0))
    note_late_signal(run)


#: bytes per input pixel of a frame while it is filtered on the host: the pixels as read (up
#: to 8), their float32 copy and SciPy's float64 work, besides 4 per output channel's pixel
FILTER_BYTES_PER_PIXEL = 24


def host_chunk(src, n_out, chunk_frames) -> int:
    """Frames per chunk that half the host's available memory holds, at most
    ``chunk_frames``; :class:`InputError` naming the frame and the figures where not even one
    frame fits (refused before a frame is read)."""
    from ..streaming import READ_AHEAD, host_free_bytes, human

    pixels = math.prod(src.frame_shape) * getattr(src, "n_channels", 1)
    need = pixels * FILTER_BYTES_PER_PIXEL + math.prod(src.frame_shape) * 4 * n_out
    need += pixels * src.dtype.itemsize * READ_AHEAD  # (the chunks read ahead)
    free = host_free_bytes()
    if free is None:
        return chunk_frames
    if need > free:
        h, w = src.frame_shape
        raise InputError(f"frames of {h}x{w} do not fit in memory: filtering one needs about "
                         f"{human(need)}, and {human(free)} is available; crop or bin them, or "
                         "use a machine with more memory")
    return max(1, min(chunk_frames, free // 2 // need))


def interruptible(fn, chunk, *args):
    """``fn(chunk, *args)``; for a NumPy chunk in a thread of its own, waited for a tenth of a
    second at a time: SciPy releases the GIL while it filters, so a stop signal (Ctrl-C,
    SIGTERM) lands in the main thread at once instead of after a long filter; the abandoned
    thread ends with the process.  A CuPy chunk stays on this thread's stream."""
    if backend.is_cupy_array(chunk):
        return fn(chunk, *args)
    box = []

    def run():
        try:
            box.append((True, fn(chunk, *args)))
        except BaseException as exc:  # noqa: BLE001 - raised again in the caller's thread
            box.append((False, exc))

    worker = threading.Thread(target=run, name="xcorr-filter", daemon=True)
    worker.start()
    while worker.is_alive():
        worker.join(0.1)
    ok, value = box[0]
    if not ok:
        raise value
    return value


class _InFloat32:
    """A float64 source whose every chunk read is checked to lie in float32's range (the
    filtered stack is float32: frame 2 at 1e300 was written as Inf, exit 0); the rest of the
    source as it is, but no ``stored`` file: a GPU's reads from it would pass the check by."""

    stored = None

    def __init__(self, src, name):
        self._src, self._name = src, name

    def __getattr__(self, attr):
        return getattr(self._src, attr)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return self._src.__exit__(*exc)

    @staticmethod
    def like(src, opener):
        """``opener`` (of a source another reader opens: ``--gpus``' workers) giving sources
        checked as ``src`` is."""
        if not isinstance(src, _InFloat32):
            return opener
        return lambda: _InFloat32(opener(), src._name)

    def read(self, start, stop, out=None):
        from ..alignment.rigid import check_filtered_range

        frames = self._src.read(start, stop, out)
        check_filtered_range(frames, self._name, start)
        return frames


def output_run(path, out_path, force):
    """The output file's :class:`~xcorr_app.io._outputs.OutputRun`: apart from the input, locked
    by ``.NAME.lock`` beside it, and written only when the whole stack is done."""
    from ..io import OutputRun, TIFF_SUFFIXES, split_source

    # (the writer writes an ImageJ TIFF whatever the name: a .ome.tif would hold no OME-XML,
    # and readers that trust the name would misread it)
    ome = out_path.name.lower().endswith((".ome.tif", ".ome.tiff"))
    if out_path.suffix.lower() not in TIFF_SUFFIXES or ome:
        raise InputError(f"xcorr filter writes an ImageJ TIFF stack: give --out a .tif or "
                         f".tiff name, not {out_path.name}"
                         + (" (the stack holds no OME-XML)" if ome else ""))
    return OutputRun([out_path], [split_source(path)[0]], force,
                     lock=out_path.with_name(f".{out_path.name}.lock"))


def _in_stored_order(src, path):
    """InputError where a Dask cluster would filter ``src``'s planes in the file's order: a
    T x Z stack stored Z then T is filtered in this process, read in time order."""
    from ..io import z_first

    volumes = getattr(src, "volumes", None)
    if volumes is not None and z_first(volumes.axes):
        raise InputError(f"{path} stores its volumes' planes Z then T (axes {volumes.axes}): "
                         "xcorr filter reads them in time order in this process; leave out "
                         "--workers and --scheduler")


def _kernel_chunks(path, channel, src, dev, gpu_ids, chunk_frames, filtered):
    """``(start, filtered chunk)`` of every chunk of ``src``: on ``--gpus`` or on ``dev``."""
    from ..io import open_stack, time_order
    from ..streaming import map_chunks

    if gpu_ids is not None:
        return map_chunks(_InFloat32.like(src, lambda: time_order(open_stack(path,
                                                                           channel=channel))),
                          chunk_frames, filtered, gpus=gpu_ids)
    return map_chunks(lambda: contextlib.nullcontext(src), chunk_frames, filtered,
                      xp=backend.xp_for(dev))


def _filter_channels(path, bank, mix, out_path, device, chunk_frames, force, quiet, scale):
    """``xcorr filter --bank/--mix``: (n, C, H, W) chunks through conv2d or pointwise, on this
    GPU, several (``--gpus``) or a Dask cluster."""
    from ..filters import channel_filter
    from ..io import ChannelStack, time_order

    def plan(src):
        n_out, fn = channel_filter(bank, mix, src.n_channels, src.frame_shape)

        def chunks(dev, client, gpu_ids, chunk):
            if client is not None:
                from ..distributed import filter_channels, iter_blocks

                return iter_blocks(filter_channels(path, bank=bank, mix=mix, device=device),
                                   client)
            return _channel_chunks(path, src, dev, gpu_ids, chunk, fn)
        return n_out, chunks

    def describe(src, n_out, ran_on, seconds):
        return (f"xcorr filter: {src.n_frames} frames of {src.n_channels} channel(s) -> "
                f"{n_out} channel(s) with {bank or mix} on {ran_on} in {seconds:.2f} s; "
                f"wrote {out_path}")

    _stream_to_tiff(lambda: time_order(ChannelStack(path)), plan, describe, path, out_path,
                    device, force,
                    quiet, scale, chunk_frames)


def _channel_chunks(path, src, dev, gpu_ids, chunk_frames, fn):
    """``(start, fn(chunk))`` of every ``(n, C, H, W)`` chunk of ``src``: on ``--gpus`` or on
    ``dev``."""
    from ..io import ChannelStack, time_order
    from ..streaming import map_chunks

    if gpu_ids is not None:
        return map_chunks(_InFloat32.like(src, lambda: time_order(ChannelStack(path))),
                          chunk_frames,
                          lambda _, f: fn(f.astype("float32")), gpus=gpu_ids)
    xp = backend.xp_for(dev)
    return map_chunks(lambda: contextlib.nullcontext(src), chunk_frames,
                      lambda _, f: interruptible(fn, f.astype(xp.float32)), xp=xp)
