"""The commands that look after an archive, built on the core modules
(store, catalog, parity, volume): check it (``fsck``), read and mend it
(``scrub``), rebuild a dead disk (``rebuild_disk``) or a lost catalog
(``rebuild_catalog``), change its disks (``rebalance``) and move hot groups
off a busy disk (``cooling``). ``moves`` is the one way a block changes
disk; ``report`` holds what the checking commands share. The core runs
them (the daemon's background cooling, ``webfs.admincommands``) but builds on
none of them."""
