"""A document on its way to the store (``webfs.store``), with what a thread
that holds no lock of the store may compute for it ahead: ``Piece``."""
from __future__ import annotations

from typing import NamedTuple, Optional

from .signature import SignatureFn, content_digest


class Piece(NamedTuple):
    """A document on its way to the store, with what may be computed ahead of
    ``store`` by a thread that holds no lock of the store: its signature, its
    encoding (``encode``), the id of a block with the very same bytes
    (``twins``) and its content digest."""
    data: bytes
    sig: Optional[str] = None
    encoded: Optional[tuple[str, bytes]] = None
    same: Optional[int] = None
    sha256: Optional[bytes] = None

    def signed(self, signature_fn: SignatureFn) -> "Piece":
        """The piece with its signature and digest (computed where missing)."""
        if self.sig is not None and self.sha256 is not None:
            return self
        return self._replace(sig=self.sig or signature_fn(self.data),
                             sha256=self.sha256 or content_digest(self.data))


__all__ = ["Piece"]
