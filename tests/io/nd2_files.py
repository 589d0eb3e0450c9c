"""Nikon ND2 files for the tests: no library writes ND2 (Nikon's SDK reads and writes it; the
``nd2`` package only reads), so :func:`write_nd2` lays one out as version 3.0 files are, after
the layout the ``nd2`` package reads (its ``_parse/_chunk_decode.py`` and ``_clx_lite.py``):
a signature chunk, the frames (``ImageDataSeq|N!``: an 8-byte time, then the pixels, channels
interleaved, 4096 bytes after the chunk's start), the metadata as CLX Lite variants
(``ImageAttributesLV!``, ``ImageMetadataLV!``: the loops, ``ImageMetadataSeqLV|0!``: the
channels and the pixel size) and the chunk map at the end.  The reader under test is the
``nd2`` package's own."""

import struct

import numpy as np

MAGIC = 0x0ABECEDA
FILE_SIGNATURE = b"ND2 FILE SIGNATURE CHUNK NAME01!"
MAP_SIGNATURE = b"ND2 CHUNK MAP SIGNATURE 0000001!"
FILEMAP_NAME = b"ND2 FILEMAP SIGNATURE NAME 0001!"
ALIGN = 4096
#: CLX Lite value types
BOOL, UINT32, DOUBLE, STRING, LEVEL = 1, 3, 6, 8, 11


def _name(name) -> bytes:
    return (name + "\0").encode("utf-16-le")


def _record(kind, name, payload) -> bytes:
    return struct.pack("BB", kind, len(name) + 1) + _name(name) + payload


def clx_lite(items) -> bytes:
    """The CLX Lite bytes of ``items``, ``(name, value)`` pairs: a dict or a list of pairs is a
    level, a bool, an int (uint32), a float (double) or a str a value."""
    out = b""
    for name, value in (items.items() if isinstance(items, dict) else items):
        if isinstance(value, (dict, list)):
            children = list(value.items() if isinstance(value, dict) else value)
            body = clx_lite(children)
            head = struct.pack("BB", LEVEL, len(name) + 1) + _name(name)
            length = len(head) + 12 + len(body)  # (from the record's start to its children's end)
            out += head + struct.pack("<IQ", len(children), length) + body
            out += b"\0" * 8 * len(children)  # (the offsets table the reader skips)
        elif isinstance(value, bool):
            out += _record(BOOL, name, struct.pack("B", value))
        elif isinstance(value, int):
            out += _record(UINT32, name, struct.pack("<I", value))
        elif isinstance(value, float):
            out += _record(DOUBLE, name, struct.pack("<d", value))
        else:
            out += _record(STRING, name, _name(value))
    return out


def _chunk(name: bytes, data: bytes, name_room=None) -> bytes:
    """A chunk: magic, the name's room, the data's length, the name (padded), the data; padded
    to the alignment."""
    room = name_room or len(name)
    c = struct.pack("<IIQ", MAGIC, room, len(data)) + name.ljust(room, b"\0") + data
    return c + b"\0" * (-len(c) % ALIGN)


def _loop(kind, count, params, inner=None):
    level = {"eType": kind, "uLoopPars": {"uiCount": count, **params}}
    if inner is not None:
        level["ppNextLevelEx"] = [("", inner)]
    return level


def _spectrum(nm):
    return {"uiCount": 1, "pPoint": {"Point0": {"dWavelength": nm, "dTValue": 1.0, "eType": 1}}}


def write_nd2(path, data, channel_names, pixel_um=0.5, z_step_um=None, period_ms=100.0,
              positions=None, components=1, stored=None):
    """Write ``data`` (T, C, Y, X), or (T, Z, C, Y, X) with ``z_step_um``, or (T, P, C, Y, X)
    with ``positions``, uint16 or float32, as an ND2 file of a time loop (and a z-stack or
    an XY-position loop inside it) with these channels; ``components``: C is the components
    of one channel (3: RGB); ``stored``: only the first frames are in the file, as when an
    acquisition is stopped early."""
    data = np.asarray(data)
    inner = z_step_um is not None or positions is not None
    t, z = data.shape[0], data.shape[1] if inner else 1
    c, h, w = data.shape[-3:]
    frames = data.reshape(t * z, c, h, w).transpose(0, 2, 3, 1)  # (frame, Y, X, C) interleaved
    frames = frames[:stored]
    bits = 8 * data.dtype.itemsize
    chunks = [(None, _chunk(FILE_SIGNATURE, b"Ver3.0".ljust(64, b"\0")))]
    for i, frame in enumerate(frames):
        time = struct.pack("<d", i * period_ms)
        chunks.append((f"ImageDataSeq|{i}!".encode(),
                       _chunk(f"ImageDataSeq|{i}!".encode(), time + frame.tobytes(), 4072)))
    attributes = {"SLxImageAttributes": {
        "uiWidth": w, "uiWidthBytes": w * c * data.dtype.itemsize, "uiHeight": h, "uiComp": c,
        "uiBpcInMemory": bits, "uiBpcSignificant": bits, "uiSequenceCount": len(frames),
        "eCompression": 2, "uiTileWidth": w, "uiTileHeight": h}}
    inner_loop = None
    if z_step_um is not None:
        inner_loop = _loop(4, z, {"dZStep": float(z_step_um), "dZLow": 0.0,
                                  "dZHigh": float(z_step_um * (z - 1)), "iType": 0})
    elif positions is not None:
        points = {f"a{k}": {"dPosX": 100.0 * k, "dPosY": 0.0, "dPosZ": 0.0} for k in range(z)}
        inner_loop = _loop(2, z, {"Points": points})
    experiment = {"SLxExperiment": _loop(1, t, {"dStart": 0.0, "dPeriod": period_ms,
                                                "dDuration": period_ms * t}, inner_loop)}
    planes = {f"a{k}": {"sDescription": name, "uiCompCount": components, "uiSampleIndex": k,
                        "uiColor": 0xFFFFFF, "pFluorescentProbe": {
                            "m_ExcitationSpectrum": _spectrum(488.0 + 100 * k),
                            "m_EmissionSpectrum": _spectrum(520.0 + 100 * k)}}
              for k, name in enumerate(channel_names)}
    metadata = {"SLxPictureMetadata": {"bCalibrated": True, "dCalibration": float(pixel_um),
                                       "sPicturePlanes": {"uiCount": len(planes),
                                                          "sPlaneNew": planes}}}
    for name, tree in ((b"ImageAttributesLV!", attributes), (b"ImageMetadataLV!", experiment),
                       (b"ImageMetadataSeqLV|0!", metadata)):
        chunks.append((name, _chunk(name, clx_lite(tree))))
    offset, entries = 0, b""
    for name, chunk in chunks:
        if name is not None:
            entries += name + struct.pack("<QQ", offset, len(chunk))
        offset += len(chunk)
    tail = MAP_SIGNATURE + struct.pack("<Q", offset)  # (also the file's last 40 bytes)
    with open(path, "wb") as f:
        for _, chunk in chunks:
            f.write(chunk)
        head = struct.pack("<IIQ", MAGIC, len(FILEMAP_NAME), len(entries) + len(tail))
        f.write(head + FILEMAP_NAME + entries + tail)
