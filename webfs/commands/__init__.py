"""The commands that look after an archive: check it (``fsck``), read and
mend it (``scrub``), rebuild a dead disk (``rebuild_disk``) or a lost
catalog (``rebuild_catalog``), change its disks (``rebalance``) and move
hot groups (``cooling``). They build on the core modules (store, catalog,
parity, volume); nothing in the core imports them except to run them."""
