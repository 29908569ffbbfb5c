"""Whether an image or a sound is structurally what its type says, beyond its first bytes.

Magic bytes say how a file starts; an attacker controls the rest. Each admissible type is
walked here from its signature to its last byte, in time linear in its size and without
decoding a pixel or a sample:

- **PNG**: chunks of declared length with their CRC-32, ``IHDR`` first (13 bytes, a valid
  colour type and depth), at least one ``IDAT``, and ``IEND`` the last bytes of the file;
- **JPEG**: marker segments from ``SOI`` to a frame header (``SOFn``) and a scan, entropy-coded
  data, then ``EOI`` the last bytes;
- **GIF**: the logical screen, colour tables, extension and image blocks of sub-blocks, each
  image inside the screen, and the trailer ``;`` the last byte;
- **WebP**: a RIFF whose size is the file's, one ``VP8``/``VP8L``/``VP8X`` image whose
  dimensions are read from its header, chunks tiling the file;
- **WAV**: a RIFF whose size is the file's, a ``fmt`` chunk of a sane format, a ``data``
  chunk, chunks tiling the file;
- **MP3**: an optional ID3v2 tag, then MPEG audio frames, each header valid and its computed
  length landing on the next header or the end (an ID3v1 tag may close the file).

So data after an image's end marker (an HTML or script tail), a header declaring enormous
dimensions in a few bytes (a decompression bomb: at most :data:`MAX_PIXELS` pixels and
:data:`MAX_SIDE` a side), a GIF signature followed by anything, and a truncated file are each
refused with the reason.
"""

from __future__ import annotations

import struct
import zlib
from collections.abc import Callable

__all__ = ["MAX_PIXELS", "MAX_SIDE", "structure_problem"]

MAX_SIDE = 16384
"""The widest or tallest image admitted, in pixels."""
MAX_PIXELS = 40_000_000
"""The most pixels an image may declare (a decoder allocates for them before reading any)."""


class _Bad(Exception):
    """The data does not parse as its type: the reason."""


def structure_problem(mime: str, data: bytes) -> str | None:
    """Why *data* is not a well-formed file of the (normalised) type *mime*, or ``None``."""
    check = _CHECKS.get(mime)
    if check is None:
        return f"no structural check for {mime}"
    try:
        check(data)
    except _Bad as exc:
        return str(exc)
    except (struct.error, IndexError):
        return "truncated"
    return None


def _dimensions(width: int, height: int) -> None:
    if width <= 0 or height <= 0:
        raise _Bad("an image without pixels")
    if width > MAX_SIDE or height > MAX_SIDE or width * height > MAX_PIXELS:
        raise _Bad(f"declares {width}×{height} pixels, over the limit "
                   f"({MAX_SIDE} a side, {MAX_PIXELS} in all)")


def _png(data: bytes) -> None:
    at, seen_data, first = 8, False, True
    while True:
        if at + 12 > len(data):
            raise _Bad("truncated: no IEND chunk")
        length, kind = struct.unpack_from(">I4s", data, at)
        end = at + 8 + length
        if end + 4 > len(data):
            raise _Bad(f"truncated {kind!r} chunk")
        body = data[at + 8:end]
        if struct.unpack_from(">I", data, end)[0] != zlib.crc32(kind + body) & 0xFFFFFFFF:
            raise _Bad(f"bad CRC in the {kind!r} chunk")
        if first:
            if kind != b"IHDR" or length != 13:
                raise _Bad("the first chunk is not a 13-byte IHDR")
            width, height, depth, colour = struct.unpack_from(">IIBB", body)
            if (colour, depth) not in _PNG_DEPTHS:
                raise _Bad(f"colour type {colour} with depth {depth}")
            _dimensions(width, height)
            first = False
        elif kind == b"IDAT":
            seen_data = True
        elif kind == b"IEND":
            if not seen_data:
                raise _Bad("no IDAT chunk")
            if end + 4 != len(data):
                raise _Bad(f"{len(data) - end - 4} bytes after IEND")
            return
        at = end + 4


_PNG_DEPTHS = frozenset({(0, 1), (0, 2), (0, 4), (0, 8), (0, 16), (2, 8), (2, 16), (3, 1),
                         (3, 2), (3, 4), (3, 8), (4, 8), (4, 16), (6, 8), (6, 16)})
_SOF = frozenset({0xC0, 0xC1, 0xC2, 0xC3, 0xC5, 0xC6, 0xC7, 0xC9, 0xCA, 0xCB, 0xCD, 0xCE, 0xCF})


def _jpeg(data: bytes) -> None:
    if data[:2] != b"\xff\xd8":
        raise _Bad("no SOI marker")
    at, framed = 2, False
    while True:
        if data[at] != 0xFF:
            raise _Bad(f"no marker at byte {at}")
        while data[at + 1] == 0xFF:  # fill bytes
            at += 1
        marker = data[at + 1]
        if marker == 0xD9:
            raise _Bad("EOI before any scan")
        if 0xD0 <= marker <= 0xD7 or marker == 0x01:
            at += 2
            continue
        length = struct.unpack_from(">H", data, at + 2)[0]
        if length < 2 or at + 2 + length > len(data):
            raise _Bad(f"a segment of length {length} at byte {at}")
        if marker in _SOF:
            height, width = struct.unpack_from(">HH", data, at + 5)
            _dimensions(width, height)
            framed = True
        at += 2 + length
        if marker == 0xDA:
            if not framed:
                raise _Bad("a scan before the frame header")
            _jpeg_entropy(data, at)
            return


def _jpeg_entropy(data: bytes, at: int) -> None:
    """From the first scan's data to the end: stuffed bytes, restarts and further segments
    (progressive JPEGs have several scans) until EOI, which must be the last two bytes."""
    while True:
        found = data.find(b"\xff", at)
        if found < 0 or found + 1 >= len(data):
            raise _Bad("truncated: no EOI marker")
        marker = data[found + 1]
        if marker == 0x00 or 0xD0 <= marker <= 0xD7 or marker == 0xFF:
            at = found + (1 if marker == 0xFF else 2)
            continue
        if marker == 0xD9:
            if found + 2 != len(data):
                raise _Bad(f"{len(data) - found - 2} bytes after EOI")
            return
        length = struct.unpack_from(">H", data, found + 2)[0]
        if length < 2 or found + 2 + length > len(data):
            raise _Bad(f"a segment of length {length} at byte {found}")
        at = found + 2 + length


def _gif(data: bytes) -> None:
    if data[:6] not in (b"GIF87a", b"GIF89a"):
        raise _Bad("no GIF signature")
    width, height, flags = struct.unpack_from("<HHB", data, 6)
    _dimensions(width, height)
    at = 13 + (3 << ((flags & 7) + 1) if flags & 0x80 else 0)
    images = 0
    while True:
        block = data[at]
        if block == 0x3B:
            if not images:
                raise _Bad("no image")
            if at + 1 != len(data):
                raise _Bad(f"{len(data) - at - 1} bytes after the trailer")
            return
        if block == 0x21:
            at = _sub_blocks(data, at + 2)
        elif block == 0x2C:
            left, top, w, h, flags = struct.unpack_from("<HHHHB", data, at + 1)
            if w == 0 or h == 0 or left + w > width or top + h > height:
                raise _Bad("an image outside the logical screen")
            at += 10 + (3 << ((flags & 7) + 1) if flags & 0x80 else 0)
            if not 2 <= data[at] <= 12:
                raise _Bad("a bad LZW code size")
            at = _sub_blocks(data, at + 1)
            images += 1
        else:
            raise _Bad(f"an unknown block 0x{block:02x} at byte {at}")


def _sub_blocks(data: bytes, at: int) -> int:
    while (size := data[at]) != 0:
        at += 1 + size
    return at + 1


def _riff_chunks(data: bytes, form: bytes) -> dict[bytes, bytes]:
    """The chunks of a RIFF file of *form*, which must tile it exactly (first of each id)."""
    if data[:4] != b"RIFF" or data[8:12] != form:
        raise _Bad(f"not a RIFF {form.decode()} file")
    size = struct.unpack_from("<I", data, 4)[0]
    if size + 8 != len(data):
        raise _Bad(f"the RIFF size says {size + 8} bytes, the file has {len(data)}")
    chunks: dict[bytes, bytes] = {}
    at = 12
    while at < len(data):
        kind, length = struct.unpack_from("<4sI", data, at)
        end = at + 8 + length
        if end > len(data):
            raise _Bad(f"a truncated {kind!r} chunk")
        chunks.setdefault(kind, data[at + 8:end])
        at = end + (length & 1)  # chunks are padded to even lengths
    if at != len(data):
        raise _Bad("the chunks do not end with the file")
    return chunks


def _webp(data: bytes) -> None:
    chunks = _riff_chunks(data, b"WEBP")
    if b"VP8X" in chunks:
        body = chunks[b"VP8X"]
        width = 1 + int.from_bytes(body[4:7], "little")
        height = 1 + int.from_bytes(body[7:10], "little")
        if b"VP8 " not in chunks and b"VP8L" not in chunks and b"ANMF" not in chunks:
            raise _Bad("no image data")
    elif b"VP8L" in chunks:
        body = chunks[b"VP8L"]
        if body[0] != 0x2F:
            raise _Bad("a bad VP8L signature")
        bits = int.from_bytes(body[1:5], "little")
        width, height = (bits & 0x3FFF) + 1, ((bits >> 14) & 0x3FFF) + 1
    elif b"VP8 " in chunks:
        body = chunks[b"VP8 "]
        if body[3:6] != b"\x9d\x01\x2a":
            raise _Bad("a bad VP8 start code")
        width, height = (v & 0x3FFF for v in struct.unpack_from("<HH", body, 6))
    else:
        raise _Bad("no VP8, VP8L or VP8X chunk")
    _dimensions(width, height)


def _wav(data: bytes) -> None:
    chunks = _riff_chunks(data, b"WAVE")
    fmt = chunks.get(b"fmt ")
    if fmt is None or len(fmt) < 16:
        raise _Bad("no format chunk")
    tag, channels, rate, _byte_rate, align, bits = struct.unpack_from("<HHIIHH", fmt)
    if tag not in (1, 3, 6, 7, 0xFFFE) or not 1 <= channels <= 32 or \
            not 1000 <= rate <= 768_000 or align == 0 or bits == 0:
        raise _Bad(f"an unusable format (tag {tag}, {channels} channels, {rate} Hz)")
    if b"data" not in chunks:
        raise _Bad("no data chunk")


_MP3_KBPS = {  # (version bit, layer bits) → bitrates by index
    (1, 1): (0, 32, 40, 48, 56, 64, 80, 96, 112, 128, 160, 192, 224, 256, 320),  # MPEG-1 L3
    (1, 2): (0, 32, 48, 56, 64, 80, 96, 112, 128, 160, 192, 224, 256, 320, 384),  # MPEG-1 L2
    (1, 3): (0, 32, 64, 96, 128, 160, 192, 224, 256, 288, 320, 352, 384, 416, 448),  # L1
    (0, 1): (0, 8, 16, 24, 32, 40, 48, 56, 64, 80, 96, 112, 128, 144, 160),  # MPEG-2 L3
    (0, 2): (0, 8, 16, 24, 32, 40, 48, 56, 64, 80, 96, 112, 128, 144, 160),
    (0, 3): (0, 32, 48, 56, 64, 80, 96, 112, 128, 144, 160, 176, 192, 224, 256),
}
_MP3_RATES = {3: (44100, 48000, 32000), 2: (22050, 24000, 16000), 0: (11025, 12000, 8000)}


def _mp3(data: bytes) -> None:
    at = 0
    if data[:3] == b"ID3":
        size = data[6:10]
        if any(b & 0x80 for b in size):
            raise _Bad("a bad ID3 tag size")
        at = 10 + sum(b << (7 * (3 - i)) for i, b in enumerate(size))
        at += 10 if data[5] & 0x10 else 0  # a footer
    end = len(data) - 128 if data[-128:-125] == b"TAG" else len(data)
    frames = 0
    while at < end:
        at += _mp3_frame(data, at)
        frames += 1
    if at != end or frames == 0:
        raise _Bad("the audio frames do not end with the file" if frames else "no frame")


def _mp3_frame(data: bytes, at: int) -> int:
    """The length of the MPEG audio frame whose header is at *at*."""
    header = struct.unpack_from(">I", data, at)[0]
    version, layer = (header >> 19) & 3, (header >> 17) & 3
    bitrate, rate, padding = (header >> 12) & 15, (header >> 10) & 3, (header >> 9) & 1
    if header >> 21 != 0x7FF or version == 1 or layer == 0 or bitrate in (0, 15) or rate == 3:
        raise _Bad(f"no valid frame header at byte {at}")
    kbps = _MP3_KBPS[(1 if version == 3 else 0, layer)][bitrate]
    hz = _MP3_RATES[version][rate]
    if layer == 3:  # layer I
        return int((12 * kbps * 1000 // hz + padding) * 4)
    per = 144 if version == 3 or layer == 2 else 72
    return int(per * kbps * 1000 // hz + padding)


_CHECKS: dict[str, Callable[[bytes], None]] = {
    "image/png": _png, "image/jpeg": _jpeg, "image/gif": _gif, "image/webp": _webp,
    "audio/wav": _wav, "audio/mpeg": _mp3}
