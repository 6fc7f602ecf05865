# webfs — the two commands are `make demo` and `make test`; both install what they need.
# Root on Debian: apt packages are installed when missing; everything Python goes in .venv.

PYTHON    ?= python3
VENV      := .venv
BIN       := $(VENV)/bin
APT_PKGS  := fuse3 libfuse3-dev pkg-config attr rsync bindfs mergerfs gzip findutils dash man-db groff-base
STAMP     := $(VENV)/.installed
PREFIX    ?= /usr/local
MANDIR    ?= $(PREFIX)/share/man

.PHONY: all deps apt test test-long demo bench bench-full install uninstall clean distclean

all: deps

# Install only the Debian packages that are missing, so a ready machine pays nothing.
apt:
	@missing=$$(for p in $(APT_PKGS); do dpkg-query -W -f='$${Status}\n' $$p 2>/dev/null | grep -q 'install ok installed' || echo $$p; done); \
	if [ -n "$$missing" ]; then \
	  echo "installing Debian packages:" $$missing; \
	  if [ "$$(id -u)" = 0 ]; then SUDO=; else SUDO=sudo; fi; \
	  $$SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq $$missing >/dev/null; \
	fi
	@$(PYTHON) -m venv --help >/dev/null 2>&1 || { DEBIAN_FRONTEND=noninteractive apt-get install -y -qq python3-venv python3-dev >/dev/null; }

$(STAMP): setup.cfg pyproject.toml
	$(MAKE) apt
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --disable-pip-version-check -e '.[test,bench]'
	touch $@

deps: apt $(STAMP)

# The test suite: unit, property and real-mount tests (about 10 minutes at most on 2 cores).
test: deps
	$(BIN)/pytest -q -ra tests

# Long soaks and big corpora, kept out of `make test`.
test-long: deps
	WEBFS_LONG_TESTS=1 $(BIN)/pytest -q -ra tests

# A 4-disk archive under ./demo, filled with a small sample crawl.
demo: deps
	PATH="$(CURDIR)/$(BIN):$$PATH" sh tools/demo.sh demo
	PATH="$(CURDIR)/$(BIN):$$PATH" sh tools/demo-warc.sh demo-warc

# Every section of tools/bench on two 30 MB crawls, a small-page corpus and a
# 20,000-file ingest: about 15-20 minutes on 2 cores (bench-results/results.md).
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
