"""The choices an archive is made with (``webfs mkfs``) and a store is run
with: the signature tree's depth, the compression level, the dedup modes.

Only constants, so that the command line can offer them as options without
loading the archive (``webfs search`` starts in a fraction of the time).
webfs.archive, webfs.signature and webfs.store use them from here.
"""

MIN_DEPTH, MAX_DEPTH, DEFAULT_DEPTH = 2, 4, 3      # directory levels of the signature tree + 1
STORE_MODES = ("force-new", "regular", "compare")
DEFAULT_LEVEL = 3          # zlib-ng gzip level: see webfs-internals(7), "Compression level"
