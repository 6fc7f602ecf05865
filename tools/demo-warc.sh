#!/bin/sh
# A web archive collection in webfs: pywb's sample crawls imported as page
# trees, then ls, grep, getfattr, versions, url and an export back to WARC.
# Usage: sh tools/demo-warc.sh DIR   (DIR is made; webfs and pywb installed)
set -eu
top=${1:-demo-warc}
here=$(pwd)
samples=$(python3 -c 'import os, pywb; print(os.path.join(os.path.dirname(os.path.dirname(pywb.__file__)), "sample_archive", "warcs"))' 2>/dev/null || true)
[ -d "$samples" ] || samples="$(dirname "$(dirname "$(command -v webfs)")")/sample_archive/warcs"
[ -d "$samples" ] || { echo "pywb's sample_archive/warcs not found (pip install pywb)" >&2; exit 1; }
rm -rf "$top"
mkdir -p "$top/mnt"
webfs mkfs "$top/disk0" "$top/disk1" "$top/disk2" >/dev/null 2>&1
mnt="$top/mnt"
webfs mount "$top/disk0" "$mnt"
trap 'webfs umount "$mnt" 2>/dev/null || true' EXIT

echo "== webfs import-warc --collection iana iana.warc.gz $mnt   (pywb's sample crawl)"
webfs import-warc --collection iana "$samples/iana.warc.gz" "$mnt"
echo "== the same site again, later (dupes.warc.gz): unchanged pages are stored once"
webfs import-warc --collection dupes "$samples/dupes.warc.gz" "$mnt" || true
echo "== ls $mnt/iana/http/www.iana.org/"
ls "$mnt/iana/http/www.iana.org/" | head -n 12
echo "== grep -rl 'Internet Assigned Numbers' $mnt/iana | head -n 3"
grep -rl 'Internet Assigned Numbers' "$mnt/iana" | head -n 3
page="$mnt/iana/http/www.iana.org/@20140126200624"
echo "== getfattr -d $page"
getfattr --absolute-names -d "$page" | head -n 12 || true
echo "== webfs versions http://www.iana.org/_css/2013.1/screen.css $mnt"
webfs versions http://www.iana.org/_css/2013.1/screen.css "$mnt"
echo "== webfs url --at 2014 http://www.iana.org/ $mnt"
webfs url --at 2014 http://www.iana.org/ "$mnt"
echo "== what webfs keeps of each source file: $mnt/iana/@warc/"
ls -l "$mnt/iana/@warc/"
head -n 4 "$mnt/iana/@warc/iana.warc.gz.index"
echo "== webfs export-warc $mnt/iana $top/iana-export.warc.gz"
webfs export-warc "$mnt/iana" "$top/iana-export.warc.gz"
ls -l "$samples/iana.warc.gz" "$top/iana-export.warc.gz"
echo "== webfs status"
webfs status "$mnt" | head -n 8
webfs umount "$mnt"
trap - EXIT
echo "== done: mount it again with  webfs mount $top/disk0 $top/mnt  (cd $here first)"
