"""The gzip codec (RFC 1952, written with zlib-ng), so `gunzip` reads payloads."""
from zlib_ng import gzip_ng, zlib_ng

from ..errors import CorruptBlock


def encode(data: bytes, level: int) -> bytes:
    # mtime=0 keeps the payload a function of the document alone.
    return gzip_ng.compress(data, compresslevel=level, mtime=0)


def decode(payload: bytes) -> bytes:
    try:
        return gzip_ng.decompress(payload)
    except (OSError, EOFError, ValueError, zlib_ng.error) as exc:
        raise CorruptBlock(f"gzip payload does not decompress: {exc}") from None
