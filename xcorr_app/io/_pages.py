"""The chain of a TIFF file's pages (IFDs) read from the file itself: whether every page's
entries and pixels lie in the file (:func:`whole_pages`), and whether every page of the stack
has the size of its first page (:func:`check_page_sizes`: tifffile reads every page of a series
with its first page's size, so it would read past the end of a smaller page).

The walk reads each page's entries with one ``os.pread`` of a block (the values a writer puts
after them, such as strip offsets, come with it) and keeps what it found per file version, the
size of every page included: a run opens its input several times, and a stack of thousands of
pages is walked once.

Examples
--------
>>> import tifffile
>>> with tifffile.TiffFile("sample_data/cell_drift.tif") as tif:
...     whole_pages(tif), page_size(tif, tif.pages.first.offset)
((12, None), (120, 160, 1, 16))
"""

from __future__ import annotations

import collections
import functools
import os
import struct
import threading
from pathlib import Path

import numpy as np

from ..errors import InputError

_DATA_TAGS = ((273, 279), (324, 325))  # (strip offsets, strip byte counts), the same of tiles
_DATA_CODES = frozenset(code for pair in _DATA_TAGS for code in pair)
_INT_FORMATS = {3: "H", 4: "I", 13: "I", 16: "Q", 18: "Q"}  # SHORT, LONG, IFD, LONG8, IFD8
_BLOCK = 4096  # bytes a read: a page's entries and the values written after them, usually
_MANY = 32  # strips or tiles of a page: more are added up by NumPy


@functools.lru_cache(maxsize=256)
def _struct(fmt: str) -> struct.Struct:
    return struct.Struct(fmt)


class _Bytes:
    """A file's bytes read by block: ``at(where, n)`` -> ``(buffer, position)`` holding the
    ``n`` bytes at ``where`` (fewer at the end of the file), from the block last read where it
    holds them, else from one ``os.pread`` (no seek, no lock); a handle without a descriptor of
    its own file (a stream, a file embedded in another) is read by seek and read."""

    def __init__(self, fh):
        self._fh, self._fd = fh, None
        self._start, self._data = 0, b""
        try:
            fd = fh.fileno()
            if hasattr(os, "pread") and os.fstat(fd).st_size == fh.size:
                self._fd = fd  # (an embedded file's size differs from its container's)
        except (OSError, AttributeError, ValueError):
            pass

    def at(self, where: int, n: int):
        pos = where - self._start
        if 0 <= pos and pos + n <= len(self._data):
            return self._data, pos
        if self._fd is not None:
            self._data = os.pread(self._fd, max(n, _BLOCK), where)
        else:
            self._fh.seek(where)
            self._data = self._fh.read(n)
        self._start = where
        return self._data, 0


def _tag_values(fh, tiff, entry, size, read=None, many=False):
    """The integers of one IFD entry ``(code, type, count, value)`` (``None`` where they lie
    beyond the file's ``size``); ``read``: a :class:`_Bytes` of ``fh``, or None; ``many``:
    more than :data:`_MANY` of them as a NumPy array."""
    _, dtype, count, value = entry
    fmt = _INT_FORMATS.get(dtype)
    if fmt is None:
        return ()
    nbytes = count * struct.calcsize(fmt)
    if nbytes <= tiff.offsetsize:
        raw, pos = value, 0
    else:
        where = _struct(tiff.offsetformat).unpack(value)[0]
        if where + nbytes > size:
            return None
        if read is None:
            fh.seek(where)
            raw, pos = fh.read(nbytes), 0
        else:
            raw, pos = read.at(where, nbytes)
    if len(raw) - pos < nbytes:
        return None
    if many and count > _MANY:
        return np.frombuffer(raw, f"{tiff.byteorder}{fmt}", count, pos)
    return _struct(f"{tiff.byteorder}{count}{fmt}").unpack_from(raw, pos)


def _last_byte(starts, counts) -> int:
    """The end of the last strip (or tile) of a page that is not empty (0: none is); many
    of them: NumPy arrays (:func:`_tag_values`), added where their sums cannot overflow."""
    if isinstance(starts, np.ndarray) or isinstance(counts, np.ndarray):
        o, c = np.asarray(starts, np.uint64), np.asarray(counts, np.uint64)
        if not o.size or (o.max() < 2 ** 63 and c.max() < 2 ** 63):
            ends = (o + c)[c != 0]
            return int(ends.max()) if ends.size else 0
        starts, counts = o.tolist(), c.tolist()
    return max((o + c for o, c in zip(starts, counts) if c), default=0)


def _size_of(values) -> tuple:
    """:func:`page_size`'s tuple of the values of :data:`SIZE_TAGS` (code -> integers)."""
    return tuple(None if not values.get(code) else values[code][0] if len(values[code]) == 1
                 else tuple(values[code]) for code in SIZE_TAGS)


class _Walk:
    """What the walk of one file's chain of pages found: ``pages`` whole ones, ``why`` it
    broke (``None``: it ended as a TIFF file ends), each page's entries' ``offsets`` and
    :func:`page_size` ``sizes``."""

    def __init__(self, pages, why, offsets, sizes):
        self.pages, self.why, self.offsets, self.sizes = pages, why, offsets, sizes

    def one_size(self):
        """The size of every page, where all have one (else None)."""
        first = self.sizes[0] if self.sizes else None
        return first if all(s == first for s in self.sizes) else None


#: walks of the files last walked, by file version: a run reopens its input (a reader per GPU,
#: the pipeline's reopen, the page sizes' check) and walks it once
_WALKED: collections.OrderedDict = collections.OrderedDict()
_WALKED_KEEP = 8
_WALKED_LOCK = threading.Lock()


def _version(fh):
    """A key of the file version ``fh`` reads (``None``: not a file of its own)."""
    try:
        fd = fh.fileno()
        st = os.fstat(fd)
    except (OSError, AttributeError, ValueError):
        return None
    if st.st_size != fh.size:
        return None
    return (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)


def _walk(tif) -> _Walk:
    fh, tiff = tif.filehandle, tif.tiff
    key = _version(fh)
    if key is not None:
        key = key + (tiff.version, tiff.byteorder)
        with _WALKED_LOCK:
            if key in _WALKED:
                _WALKED.move_to_end(key)
                return _WALKED[key]
    walk = _walk_chain(fh, tiff)
    if key is not None:
        with _WALKED_LOCK:
            _WALKED[key] = walk
            while len(_WALKED) > _WALKED_KEEP:
                _WALKED.popitem(last=False)
    return walk


def _walk_chain(fh, tiff) -> _Walk:
    """Follow the chain of pages from the header (see :func:`whole_pages`)."""
    offsets, sizes = [], []
    if tiff.version not in (42, 43) or tiff.is_ndpi:
        return _Walk(0, None, offsets, sizes)  # formats this walk does not know: trust tifffile
    size, read = fh.size, _Bytes(fh)
    order, tagsize, offsetsize, nosize = (tiff.byteorder, tiff.tagsize, tiff.offsetsize,
                                          tiff.tagnosize)
    tagno, next_offset = _struct(tiff.tagnoformat), _struct(tiff.offsetformat)
    entry = _struct(tiff.tagheaderformat)
    one = {dtype: _struct(order + fmt) for dtype, fmt in _INT_FORMATS.items()
           if struct.calcsize(fmt) <= offsetsize}  # (one value of these types lies in the entry)
    raw, pos = read.at(4 if tiff.version == 42 else 8, offsetsize)
    offset = next_offset.unpack(raw[pos:pos + offsetsize])[0]
    pages, seen = 0, set()
    codes_of = data_at = size_at = None  # (the previous page's codes and their places)
    size_entries = page_sz = None  # (the previous page's size entries and size)
    memo = {}  # (entries of strips or tiles -> their values, for the next pages)
    while offset:
        if offset in seen:
            return _Walk(pages, f"page {pages + 1} points back to an earlier page", offsets,
                         sizes)
        if offset + nosize > size:
            return _Walk(pages, f"the entries of page {pages + 1} lie beyond the end of the "
                         "file", offsets, sizes)
        seen.add(offset)
        raw, pos = read.at(offset, nosize)
        n_tags = tagno.unpack(raw[pos:pos + nosize])[0]
        need = n_tags * tagsize + offsetsize
        pos += nosize
        if len(raw) - pos < need:
            if offset + nosize + need <= size:  # (a damaged count: no read of its size)
                raw, pos = read.at(offset + nosize, need)
            if len(raw) - pos < need:
                return _Walk(pages, f"the file ends inside the entries of page {pages + 1}",
                             offsets, sizes)
        codes = _struct(order + ("H" + "x" * (tagsize - 2)) * n_tags).unpack_from(raw, pos)
        if codes != codes_of:  # (pages of one writer share their tags: placed once)
            codes_of, data_at, size_at = codes, *_places(codes, tagsize)
        end = 0
        for i, j in data_at:
            eo = entry.unpack_from(raw, pos + i)
            ec = entry.unpack_from(raw, pos + j)
            if eo[2] == ec[2] == 1 and eo[1] in one and ec[1] in one:  # one strip or tile
                count = one[ec[1]].unpack_from(ec[3])[0]
                if count:
                    end = max(end, one[eo[1]].unpack_from(eo[3])[0] + count)
                continue
            if eo in memo:  # (entries the previous page had: a run's shared byte counts)
                starts = memo[eo]
            else:
                starts = memo[eo] = _tag_values(fh, tiff, eo, size, read, many=True)
            counts = memo[ec] if ec in memo else memo.setdefault(
                ec, _tag_values(fh, tiff, ec, size, read, many=True))
            if len(memo) > 8:
                memo = {eo: starts, ec: counts}
            if starts is None or counts is None:
                end = None
                break
            if len(starts) == len(counts):  # an empty strip or tile points anywhere
                end = max(end, _last_byte(starts, counts))
        if end is None or end > size:
            return _Walk(pages, f"the file ends inside the pixels of page {pages + 1}",
                         offsets, sizes)
        these = [raw[pos + a:pos + b] for a, b in size_at[1]]
        if these != size_entries:  # (the same entries: the same values, read once)
            size_entries = these
            page_sz = _size_of({code: _tag_values(fh, tiff, entry.unpack_from(raw, pos + i),
                                                  size, read) for code, i in size_at[0]})
        pages += 1
        offsets.append(offset)
        sizes.append(page_sz)
        offset = next_offset.unpack_from(raw, pos + n_tags * tagsize)[0]
    return _Walk(pages, None, offsets, sizes)


def _places(codes, tagsize):
    """Where a page's entries of pixel data and of size lie (byte offsets in its table, the last
    entry of a code counting, as a dict of them does): ``(offsets, counts)`` pairs, and the
    size tags' ``(code, offset)`` with the runs of bytes they span."""
    last = {code: i * tagsize for i, code in enumerate(codes)}
    data = tuple((last[a], last[b]) for a, b in _DATA_TAGS if a in last and b in last)
    where = sorted(last[code] for code in SIZE_TAGS if code in last)
    runs = []
    for at in where:
        if runs and runs[-1][1] == at:
            runs[-1][1] = at + tagsize
        else:
            runs.append([at, at + tagsize])
    return data, ([(code, last[code]) for code in SIZE_TAGS if code in last], runs)


def whole_pages(tif) -> tuple[int, str | None]:
    """Walk the chain of pages (IFDs) of an open :class:`tifffile.TiffFile`: the number of
    pages whose entries and pixel data lie wholly in the file, and why the chain breaks there
    (``None`` when it ends as a TIFF file ends).  tifffile itself logs a broken chain and reads
    what it found; xcorr refuses such a file.  Walked once per file version in this process.

    Examples
    --------
    >>> import tifffile
    >>> with tifffile.TiffFile("sample_data/cell_drift.tif") as tif:
    ...     whole_pages(tif)
    (12, None)
    """
    walk = _walk(tif)
    return walk.pages, walk.why


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
    return _size_of(values)


def _describe(size) -> str:
    rows, cols, samples, bits = size
    return f"{rows}x{cols} pixels, {samples or 1} sample(s) of {bits or 1} bits"


def check_page_sizes(tif, pages, path: Path) -> None:
    """InputError naming the first page of ``pages`` (a series of ``tif``, or its pages)
    whose own size (:func:`page_size`) differs from the first one's: frames must share one
    shape, and tifffile would read such a page with the first page's size (past the end of a
    smaller page).  Done once per file version in this process (a run reopens its input); a
    file whose pages the walk (:func:`whole_pages`) found all of one size passes without
    asking tifffile for each page."""
    st = Path(path).stat()
    key = (str(Path(path).resolve()), st.st_size, st.st_mtime_ns)
    if key in _SIZED or not len(pages):
        return
    first = page_size(tif, pages[0].offset)
    if first is None:
        return
    walk = _walk(tif)
    if (walk.why is None and len(pages) <= walk.pages and walk.one_size() == first
            and not getattr(pages, "is_multifile", False)):
        _SIZED.add(key)  # (the pages are some of the file's: all of the first one's size)
        return
    sized = dict(zip(walk.offsets, walk.sizes))
    for k in range(1, len(pages)):
        page = pages[k]
        size = sized[page.offset] if page.offset in sized else page_size(tif, page.offset)
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
