"""``xcorr align A.tif B.tif ...`` (or a quoted glob pattern): a session of recordings, each
aligned into its own folder ``OUT/STEM_xcorr``, summed up in ``OUT/sessions.csv``
(:func:`xcorr_app.align_sessions`; docs/cli.md, "Many recordings")."""

from __future__ import annotations

import contextlib
import json
from pathlib import Path

import click

from ._flags import as_flags
from ._input import input_path
from ._options import (note_device, planner_notes, progress_bar, readable_frames_of,
                       scale_out)
from ..errors import InputError

__all__ = ["align_session_cli"]


def align_session_cli(paths, dataset, z, axes, o, as_given):
    """Align every recording of ``paths`` (``o``: the parsed options of ``xcorr align``;
    ``as_given``: those passed to :class:`~xcorr_app.alignment.AlignOptions` as they are) with
    the same options; print the table on stderr (unless ``--quiet``; ``--json``: the rows on
    stdout) and exit 2 where a recording failed, after ``sessions.csv`` is written."""
    from ..alignment import SESSIONS_TABLE, Session, align_sessions, session_paths
    from ..io import strict_json

    if o.volumes:
        raise InputError("--volumes registers one recording of volumes: give one PATH")
    recordings = [input_path(p, dataset, z, axes)
                  for p in session_paths([str(p) for p in paths])]
    quiet = o.quiet or o.as_json
    keywords = {k: getattr(o, k) for k in as_given}
    keywords.update(verify=not o.no_verify, quality=not o.no_quality,
                    aligned=not o.no_aligned, format=o.out_format, resample=o.resample,
                    crop=o.crop, fill=o.fill, keep_dtype=o.keep_dtype, in_place=o.in_place,
                    channels=_channels(o.apply_to))
    if o.gpus is None:
        note_device(o.device, quiet)
    planner_notes(quiet)
    with contextlib.ExitStack() as stack:
        for p in recordings if o.readable_frames else ():  # (every open of these files)
            stack.enter_context(readable_frames_of(p, True, o.workers, o.scheduler))
        on_cluster = o.workers is not None or o.scheduler
        if on_cluster:  # (the session planned, so checked, before the cluster starts)
            from ..distributed import run_session

            session = Session.plan(recordings, o.out_dir, o.force, None, keywords,
                                   executor="dask")
            client = stack.enter_context(scale_out(None, o.workers, o.scheduler, o.device,
                                                   quiet=quiet))[0]
        with progress_bar(len(recordings), "recordings", quiet) as bar:
            bar.unit = "recording"
            rows = run_session(session, client, progress=bar.update) if on_cluster else \
                align_sessions(recordings, o.out_dir, force=o.force, progress=bar.update,
                               **keywords)
    table = Path(o.out_dir or ".") / SESSIONS_TABLE
    for r in rows:  # (a warning is said even with --quiet, as for one PATH)
        if r["status"] == "done" and r["reason"]:
            click.echo(as_flags(r["reason"]), err=True)
    if o.as_json:
        click.echo(json.dumps(strict_json(rows)))
    elif not quiet:
        _print_table(rows, table)
    failed = [r for r in rows if r["status"] == "failed"]
    if failed:
        first = failed[0]
        why = f"their reasons in {table}" if len(failed) > 1 else as_flags(first["reason"]) \
            if Path(first["path"]).name in first["reason"] \
            else f"{first['path']}: {as_flags(first['reason'])}"
        click.echo(f"error: {len(failed)} of {len(rows)} recordings failed: {why}", err=True)
        raise click.exceptions.Exit(2)


def _channels(apply_to):
    """``--apply-to``: ``"all"`` (every channel of each recording), channel numbers, or None;
    checked against each recording's channels where it is saved."""
    if apply_to is None:
        return None
    if apply_to.strip().lower() == "all":
        return "all"
    try:
        return [int(v) for v in apply_to.split(",")]
    except ValueError:
        raise InputError(f"--apply-to {apply_to}: give all or channel numbers such as 0,2") \
            from None


def _print_table(rows, table):
    """The session's rows, one line each, on stderr."""
    counts = {s: sum(r["status"] == s for r in rows) for s in ("done", "skipped", "failed")}
    click.echo(f"xcorr align: {len(rows)} recordings: " + ", ".join(
        f"{n} {s}" for s, n in counts.items() if n) + f"; summary in {table}", err=True)
    width = max(len(r["path"]) for r in rows)
    for r in rows:
        if r["status"] == "failed":
            what = as_flags(r["reason"])
        else:
            what = (f"{r['frames']} frames, median confidence {r['median_confidence']}, "
                    f"{r['low_confidence_frames']} low, {r['seconds']:.1f} s -> {r['folder']}")
        click.echo(f"  {r['status']:<8} {r['path']:<{width}}  {what}", err=True)
