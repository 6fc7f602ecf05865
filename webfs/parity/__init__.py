"""Declustered parity: blocks grouped into stripes, one XOR parity file per
stripe, kept current as blocks come and go, and blocks read back from their
stripe when their own disk cannot give them.

The package owns the parity file format (``WEBFS-PARITY 1``, webfs-format(5)),
the ``stripes`` table, and the ``Parity`` protection the store uses. Its rooms:

- ``format``: the parity file's header and members, XOR, the files under parity/
- ``layout``: which stripe a new block joins; the ``stripes`` table and its counters
- ``intents``: ``meta/parity-intent``, the stripes a crash may have left ahead
- ``writebehind``: parity of open stripes kept in memory for a moment
- ``stripeio``: reading members and parity files, writing parity, reconstruction
- ``reconcile``: making a parity file agree with the catalog; recovery at open
- ``status``: what ``webfs status`` says of parity
- ``parity``: ``Parity``, the ``Protection`` that puts them together

Scrub and disk rebuild build on it.
"""
from .format import REBUILD_MARKER, Key, Member, ParityHeader, parity_files, xor_payloads
from .intents import INTENT_FILE, IntentLog
from .layout import Stripe, add_stripes, size_class
from .parity import Parity
from .stripeio import Gate
from .writebehind import WRITE_BEHIND

__all__ = ["Parity", "ParityHeader", "Member", "IntentLog", "Stripe", "Key", "Gate", "xor_payloads",
           "size_class", "parity_files", "REBUILD_MARKER", "INTENT_FILE", "WRITE_BEHIND",
           "add_stripes"]
