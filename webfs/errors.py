"""The errors webfs raises, as types, and how an OSError is said to a user.

They are raised deep down and turned into an errno only at the FUSE edge
(`fs`) or into a message only at the CLI edge (`cli`), as S3QL does.
"""


def os_error_text(exc: OSError) -> str:
    """What the system refused, as coreutils say it: "PATH: what happened"."""
    what = exc.strerror or str(exc)
    return f"{exc.filename}: {what}" if exc.filename else what


class WebfsError(Exception):
    """Anything webfs reports to a user; the message says what and where."""


class ArchiveError(WebfsError):
    """The disks do not form a usable archive (missing, foreign, mislabelled)."""


class ConfigError(ArchiveError):
    """webfs.conf (or a value given to mkfs) is unreadable or out of range."""


class CatalogUnreadable(ArchiveError):
    """meta/catalog.db is not an SQLite database webfs can use."""


class ArchiveBusy(WebfsError):
    """Another process (a mount, a long admin command) holds the archive."""


class CorruptBlock(WebfsError):
    """A block file whose header or payload is not what it must be."""


class NoSuchBlock(WebfsError):
    """No block with that contentkey is in the archive."""


class CorruptParity(WebfsError):
    """A parity file whose header or length is not what it must be."""


class DataLost(WebfsError):
    """A block can be read neither from its disk nor from its stripe."""


class NoSpace(WebfsError):
    """No disk that may hold the block has room for it."""


class UnknownCodec(WebfsError):
    """A block names a codec this version does not know."""


class FsError(WebfsError):
    """A namespace operation that fails with a POSIX errno (ENOENT, ENOTEMPTY, ...)."""

    def __init__(self, errno: int, message: str = ""):
        import os
        super().__init__(message or os.strerror(errno))
        self.errno = errno


def errno_of(exc: BaseException) -> int:
    """The errno a caller is told for an error: its own, ENOSPC for a full disk, else EIO."""
    import errno
    if isinstance(exc, FsError):
        return exc.errno
    if isinstance(exc, NoSpace):
        return errno.ENOSPC
    if isinstance(exc, OSError) and exc.errno:
        return exc.errno
    return errno.EIO
