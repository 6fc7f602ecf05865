"""webfs: a userspace filesystem for web archives.

Every distinct document is stored once, as a block file at a path computed
from its signature (Webstore), spread over several disks with declustered
parity and disk-cooling migration; mounted, the archive is an ordinary
directory tree. See webfs-internals(7) (its code map says which module owns what)
and webfs-format(5).
"""
__version__ = "0.1.0"
FORMAT_VERSION = 1
