# webfs — the two commands are `make demo` and `make test`; both install what they need.
# Root on Debian: apt packages are installed when missing; everything Python goes in .venv.
# `make help` lists the targets.

PYTHON    ?= python3
VENV      := .venv
BIN       := $(VENV)/bin
APT_PKGS  := fuse3 libfuse3-dev pkg-config attr rsync bindfs mergerfs gzip findutils dash man-db groff-base postgresql
STAMP     := $(VENV)/.installed
PREFIX    ?= /usr/local
MANDIR    ?= $(PREFIX)/share/man

.PHONY: all help deps apt test test-fast test-long demo bench bench-full install uninstall clean distclean

all: deps

help:
	@echo 'make demo        a 4-disk archive under ./demo, a sample crawl copied in, and the pywb sample crawls under ./demo-warc'
	@echo 'make test        the whole test suite, tiers t1-t5 (README, Tests, says how long)'
	@echo 'make test-fast   tiers t1-t3 only: no FUSE mount, fewer generated examples (webfs-internals(7), TESTS, says how long)'
	@echo 'make test-long   the soaks (pytest -m soak) with WEBFS_LONG_TESTS=1: longer runs, more operations'
	@echo 'make bench       tools/bench against a plain directory, bindfs, mergerfs, JuiceFS and tools/memfs'
	@echo 'make bench-full  the same on 10 GB crawls (hours)'
	@echo 'make install     man pages, webfs in $(PREFIX)/bin, mount.webfs and mount.fuse.webfs in /sbin'
	@echo 'make deps        Debian packages when missing, everything Python in .venv; pyfuse3 built with tools/pyfuse3/one-reader.patch (PYFUSE3=stock: the release as it is)'
	@echo 'make clean       demo, bench results and caches; make distclean also .venv'

# Install only the Debian packages that are missing, so a ready machine pays nothing.
apt:
	@missing=$$(for p in $(APT_PKGS); do dpkg-query -W -f='$${Status}\n' $$p 2>/dev/null | grep -q 'install ok installed' || echo $$p; done); \
	if [ -n "$$missing" ]; then \
	  echo "installing Debian packages:" $$missing; \
	  if [ "$$(id -u)" = 0 ]; then SUDO=; else SUDO=sudo; fi; \
	  $$SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq $$missing >/dev/null; \
	fi
	@$(PYTHON) -m venv --help >/dev/null 2>&1 || { DEBIAN_FRONTEND=noninteractive apt-get install -y -qq python3-venv python3-dev >/dev/null; }

# pyfuse3 is built from its release's source (as pip builds it anyway: PyPI
# has no wheel of it) with tools/pyfuse3/one-reader.patch, its request loop
# without a lock per request, before the rest, which then keeps it: the
# default, PYFUSE3=patched (interleaved A/B at load 1-17: cp -r, rsync -a, cold
# cat and grep -r faster, less daemon CPU; at load 15-28 cp -r slower:
# webfs-internals(7), PYFUSE3 FROM SOURCE). PYFUSE3=stock installs the release
# (3.5.0) as it is; PYFUSE3= (empty) leaves pyfuse3 to pip, as setup.cfg asks.
PYFUSE3       ?= patched
PYFUSE3_STAMP := $(if $(PYFUSE3),$(VENV)/.pyfuse3-$(PYFUSE3))

$(VENV)/.pyfuse3-%: tools/pyfuse3/build tools/pyfuse3/one-reader.patch tools/pyfuse3/build-constraints.txt
	$(MAKE) apt
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	tools/pyfuse3/build $(BIN)/pip $*
	rm -f $(VENV)/.pyfuse3-*
	touch $@

$(STAMP): setup.cfg pyproject.toml $(PYFUSE3_STAMP)
	$(MAKE) apt
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --disable-pip-version-check -e '.[test,bench,postgresql]'
	touch $@

# An editable install leaves the modules uncompiled, and where
# PYTHONDONTWRITEBYTECODE is set (CI, containers) every command compiled
# them again at start: compiled here, and again whenever a source is newer.
deps: apt $(STAMP)
	@$(BIN)/python -m compileall -q webfs backends

# The tests come in tiers, by file name (as S3QL's): t1_* pure units (no disks,
# no mounts), t2_* store, catalog, namespace and commands on temporary
# directories, t3_* Operations driven without a kernel, t4_* real FUSE mounts,
# t5_* faults, crashes, kill -9 and soaks.

# Three workers (pytest-xdist) on two cores, a test file to each in turn: the
# tests wait on daemons, servers and disks about half their time, so a third
# file fills the cores (webfs-internals(7), TEST SUITE TIME, AGAIN). The files
# share their fixtures and no two tests of one file run at once. PYTEST_ARGS adds
# options, e.g. PYTEST_ARGS='-n 0' for one process, or '-k store -x'. The 25
# slowest tests are listed at the end: where CI's time went, in its own log.
PYTEST := $(BIN)/pytest -q -ra -n 3 --dist loadfile --durations=25 $(PYTEST_ARGS)

# Every tier (README, Tests, has the times measured).
test: deps
	$(PYTEST) tests

# t1-t3: nothing mounted; generated (hypothesis) tests run a quarter of their
# examples (WEBFS_FAST_TESTS=1; make test runs them all). The tests, not the
# files, are spread over the two workers (worksteal: a worker out of work takes
# half of the other's), as one large file on a worker would set the time; their
# temporary directories are on /dev/shm, a tmpfs, where an fsync waits for no
# disk (the tiers that mount, and their crashes, keep the real disk); only a
# failed test's directory is kept there, as tmpfs is memory. Its time:
# webfs-internals(7), TESTS.
FAST_TMP := $(shell test -d /dev/shm -a -w /dev/shm && echo /dev/shm)
test-fast: deps
	$(if $(FAST_TMP),TMPDIR=$(FAST_TMP)) WEBFS_FAST_TESTS=1 \
	  $(BIN)/pytest -q -ra -n 2 --dist worksteal -o tmp_path_retention_policy=failed $(PYTEST_ARGS) tests/t[1-3]_*.py

# The soaks (marked soak) at their long settings: WEBFS_LONG_TESTS=1 makes them
# run minutes instead of seconds, do more operations and remounts, and enables
# the RSS soak over ~100,000 files (WEBFS_RSS_PAGES). Kept out of `make test`.
test-long: deps
	WEBFS_LONG_TESTS=1 $(PYTEST) -m soak tests

# A 4-disk archive under ./demo, filled with a small sample crawl.
demo: deps
	PATH="$(CURDIR)/$(BIN):$$PATH" sh tools/demo.sh demo
	PATH="$(CURDIR)/$(BIN):$$PATH" sh tools/demo-warc.sh demo-warc

# Every section of tools/bench on two 30 MB crawls, a small-page corpus and a
# 20,000-file ingest (bench-results/results.md).
bench: deps
	-@$(MAKE) -s apt APT_PKGS=rclone   # the s3 section compares rclone mount; skipped if it will not install
	PATH="$(CURDIR)/$(BIN):$$PATH" $(BIN)/python tools/bench --out bench-results

# The same on 10 GB crawls, a 1 GB small-page corpus and a 100,000-file ingest: hours.
bench-full: deps
	PATH="$(CURDIR)/$(BIN):$$PATH" $(BIN)/python tools/bench --full --out bench-results-full

install: deps
	install -d $(DESTDIR)$(MANDIR)/man1 $(DESTDIR)$(MANDIR)/man5 $(DESTDIR)$(MANDIR)/man8
	install -m 644 man/webfs.1 $(DESTDIR)$(MANDIR)/man1/
	install -m 644 man/webfs-format.5 $(DESTDIR)$(MANDIR)/man5/
	install -m 644 man/mount.webfs.8 $(DESTDIR)$(MANDIR)/man8/
	install -d $(DESTDIR)$(PREFIX)/bin $(DESTDIR)/sbin
	ln -sf $(CURDIR)/$(BIN)/webfs $(DESTDIR)$(PREFIX)/bin/webfs
	# mount -t webfs runs mount.webfs; mount -t fuse.webfs (and fstab) runs mount.fuse.webfs
	ln -sf $(CURDIR)/$(BIN)/mount.webfs $(DESTDIR)/sbin/mount.webfs
	ln -sf $(CURDIR)/$(BIN)/mount.webfs $(DESTDIR)/sbin/mount.fuse.webfs

uninstall:
	rm -f $(DESTDIR)$(MANDIR)/man1/webfs.1 $(DESTDIR)$(MANDIR)/man5/webfs-format.5 $(DESTDIR)$(MANDIR)/man8/mount.webfs.8
	rm -f $(DESTDIR)$(PREFIX)/bin/webfs $(DESTDIR)/sbin/mount.webfs $(DESTDIR)/sbin/mount.fuse.webfs

clean:
	rm -rf demo demo-warc bench-results .pytest_cache .hypothesis build *.egg-info
	find . -name __pycache__ -prune -exec rm -rf {} +

distclean: clean
	rm -rf $(VENV)
