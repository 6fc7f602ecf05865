"""Payload codecs and the choice of one per document.

A codec turns a document into a block payload and back. Each codec is one
small module in this package with ``encode(document, level)`` and
``decode(payload)``; adding one (zstd, say) is a new module plus its line in
``CODECS``. ``encode`` here picks identity for content that is already
compressed (by its magic bytes) or that the default codec would shrink by
less than 5 %.
"""
from __future__ import annotations

from typing import Callable, NamedTuple

from . import gzip, identity
from ..errors import UnknownCodec


class Codec(NamedTuple):
    name: str
    encode: Callable[[bytes, int], bytes]   # (document, level) -> payload
    decode: Callable[[bytes], bytes]        # payload -> document


CODECS: dict[str, Codec] = {c.name: c for c in (
    Codec("gzip", gzip.encode, gzip.decode),
    Codec("identity", identity.encode, identity.decode),
)}

# Saving less than this fraction is not worth the decompression on every read.
MIN_SAVING = 0.05

# Magic bytes of formats that are already compressed: (offset, bytes).
_COMPRESSED_MAGIC = [
    (0, b"\x1f\x8b"),            # gzip
    (0, b"PK\x03\x04"),          # zip, docx, jar, epub
    (0, b"\x89PNG\r\n\x1a\n"),   # png
    (0, b"\xff\xd8\xff"),        # jpeg
    (0, b"GIF87a"), (0, b"GIF89a"),
    (8, b"WEBP"),                # RIFF....WEBP
    (0, b"wOF2"), (0, b"wOFF"),  # woff2, woff
    (4, b"ftyp"),                # mp4, mov, heic
    (0, b"%PDF-"),               # pdf (streams are deflated)
    (0, b"BZh"), (0, b"\xfd7zXZ\x00"), (0, b"\x28\xb5\x2f\xfd"),  # bzip2 xz zstd
    (0, b"7z\xbc\xaf\x27\x1c"), (0, b"Rar!\x1a\x07"),
    (0, b"OggS"), (0, b"ID3"), (0, b"fLaC"), (0, b"\x1a\x45\xdf\xa3"),  # ogg mp3 flac webm
    (0, b"\x00\x00\x01\x00"),   # ico (often png inside)
]


def get(name: str) -> Codec:
    try:
        return CODECS[name]
    except KeyError:
        raise UnknownCodec(f"unknown codec {name!r} (known: {', '.join(sorted(CODECS))})")


def looks_compressed(data: bytes) -> bool:
    return any(data[off:off + len(magic)] == magic for off, magic in _COMPRESSED_MAGIC)


def encode(data: bytes, default: str, level: int) -> tuple[str, bytes]:
    """The codec chosen for a document and its payload."""
    if default != "identity" and data and not looks_compressed(data):
        payload = get(default).encode(data, level)
        if len(payload) <= len(data) * (1 - MIN_SAVING):
            return default, payload
    return "identity", data
