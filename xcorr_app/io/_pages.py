"""The chain of a TIFF file's pages (IFDs) read from the file itself: whether every page's
entries and pixels lie in the file (:func:`whole_pages`), and whether every page of the stack
has the size of its first page (:func:`check_page_sizes`: tifffile reads every page of a series
with its first page's size, so it would read past the end of a smaller page).

Examples
--------
>>> import tifffile
>>> with tifffile.TiffFile("sample_data/cell_drift.tif") as tif:
...     whole_pages(tif), page_size(tif, tif.pages.first.offset)
((12, None), (120, 160, 1, 16))
"""

from __future__ import annotations

import struct
from pathlib import Path

from ..errors import InputError

_DATA_TAGS = ((273, 279), (324, 325))  # (strip offsets, strip byte counts), the same of tiles
_DATA_CODES = frozenset(code for pair in _DATA_TAGS for code in pair)
_INT_FORMATS = {3: "H", 4: "I", 13: "I", 16: "Q", 18: "Q"}  # SHORT, LONG, IFD, LONG8, IFD8


def _tag_values(fh, tiff, entry, size):
    """The integers of one IFD entry ``(code, type, count, value)`` (``None`` where they lie
    beyond the file's ``size``)."""
    _, dtype, count, value = entry
    fmt = _INT_FORMATS.get(dtype)
    if fmt is None:
        return ()
    nbytes = count * struct.calcsize(fmt)
    if nbytes <= tiff.offsetsize:
        raw = value[:nbytes]
    else:
        where = struct.unpack(tiff.offsetformat, value)[0]
        if where + nbytes > size:
            return None
        fh.seek(where)
        raw = fh.read(nbytes)
    return struct.unpack(f"{tiff.byteorder}{count}{fmt}", raw) if len(raw) == nbytes else None


def _page_end(fh, tiff, table, size):
    """The end of one page's pixel data (``None`` where its tables lie beyond the file)."""
    entries = {e[0]: e for e in struct.iter_unpack(tiff.tagheaderformat,
                                                   table[:-tiff.offsetsize])
               if e[0] in _DATA_CODES}
    end = 0
    for offsets_tag, counts_tag in _DATA_TAGS:
        if offsets_tag in entries and counts_tag in entries:
            offsets = _tag_values(fh, tiff, entries[offsets_tag], size)
            counts = _tag_values(fh, tiff, entries[counts_tag], size)
            if offsets is None or counts is None:
                return None
            if len(offsets) == len(counts):  # an empty strip or tile points anywhere
                end = max(end, max((o + c for o, c in zip(offsets, counts) if c), default=0))
    return end


def whole_pages(tif) -> tuple[int, str | None]:
    """Walk the chain of pages (IFDs) of an open :class:`tifffile.TiffFile`: the number of
    pages whose entries and pixel data lie wholly in the file, and why the chain breaks there
    (``None`` when it ends as a TIFF file ends).  tifffile itself logs a broken chain and reads
    what it found; xcorr refuses such a file.

    Examples
    --------
    >>> import tifffile
    >>> with tifffile.TiffFile("sample_data/cell_drift.tif") as tif:
    ...     whole_pages(tif)
    (12, None)
    """
    fh, tiff = tif.filehandle, tif.tiff
    if tiff.version not in (42, 43) or tiff.is_ndpi:
        return 0, None  # formats this walk does not know: trust tifffile
    size = fh.size
    fh.seek(4 if tiff.version == 42 else 8)
    offset = struct.unpack(tiff.offsetformat, fh.read(tiff.offsetsize))[0]
    pages, seen = 0, set()
    while offset:
        if offset in seen:
            return pages, f"page {pages + 1} points back to an earlier page"
        if offset + tiff.tagnosize > size:
            return pages, f"the entries of page {pages + 1} lie beyond the end of the file"
        seen.add(offset)
        fh.seek(offset)
        n_tags = struct.unpack(tiff.tagnoformat, fh.read(tiff.tagnosize))[0]
        table = fh.read(n_tags * tiff.tagsize + tiff.offsetsize)
        if len(table) < n_tags * tiff.tagsize + tiff.offsetsize:
            return pages, f"the file ends inside the entries of page {pages + 1}"
        end = _page_end(fh, tiff, table, size)
        if end is None or end > size:
            return pages, f"the file ends inside the pixels of page {pages + 1}"
        pages += 1
        offset = struct.unpack(tiff.offsetformat, table[-tiff.offsetsize:])[0]
    return pages, None


#: the tags of a page's size: ImageLength, ImageWidth, SamplesPerPixel, BitsPerSample
SIZE_TAGS = (257, 256, 277, 258)
#: files whose pages this process found of one size, by (path, size, modification time)
_SIZED: set = set()


def page_size(tif, offset: int) -> tuple:
    """``(rows, columns, samples, bits)`` of the page whose entries lie at ``offset`` in the
    open :class:`tifffile.TiffFile` ``tif``, from its own entries (a missing tag: ``None``;
    several bits per sample: a tuple of them); ``None`` for a format this does not read."""
    fh, tiff = tif.filehandle, tif.tiff
    if tiff.version not in (42, 43) or tiff.is_ndpi:
        return None
    size = fh.size
    with fh.lock:
        fh.seek(offset)
        raw = fh.read(tiff.tagnosize)
        if len(raw) < tiff.tagnosize:
            return None
        n_tags = struct.unpack(tiff.tagnoformat, raw)[0]
        table = fh.read(n_tags * tiff.tagsize)
        entries = {e[0]: e for e in struct.iter_unpack(tiff.tagheaderformat,
                                                       table[:len(table) - len(table)
                                                             % tiff.tagsize])
                   if e[0] in SIZE_TAGS}
        values = {code: _tag_values(fh, tiff, entry, size) for code, entry in entries.items()}
    return tuple(None if not values.get(code) else values[code][0] if len(values[code]) == 1
                 else tuple(values[code]) for code in SIZE_TAGS)


def _describe(size) -> str:
    rows, cols, samples, bits = size
    return f"{rows}x{cols} pixels, {samples or 1} sample(s) of {bits or 1} bits"


def check_page_sizes(tif, pages, path: Path) -> None:
    """InputError naming the first page of ``pages`` (a series of ``tif``, or its pages)
    whose own size (:func:`page_size`) differs from the first one's: frames must share one
    shape, and tifffile would read such a page with the first page's size (past the end of a
    smaller page).  Done once per file version in this process (a run reopens its input)."""
    st = Path(path).stat()
    key = (str(Path(path).resolve()), st.st_size, st.st_mtime_ns)
    if key in _SIZED or not len(pages):
        return
    first = page_size(tif, pages[0].offset)
    if first is None:
        return
    for k in range(1, len(pages)):
        page = pages[k]
        size = page_size(tif, page.offset)
        if size != first:
            index = getattr(page, "index", k)
            index = index[-1] if isinstance(index, tuple) else index
            shape = (f"{size[0]}x{size[1]} pixels" if size[:2] != first[:2]
                     else _describe(size))
            want = (f"{first[0]}x{first[1]}" if size[:2] != first[:2] else _describe(first))
            raise InputError(f"page {index} (counted from 0) of {path} is {shape}, but its "
                             f"first page is {want}; every frame of a stack must have one "
                             "shape: save the pages of another shape to a file of their own")
    _SIZED.add(key)
