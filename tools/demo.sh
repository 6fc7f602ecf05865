#!/bin/sh
# make demo: a 4-disk archive under ./demo, a small sample crawl stored in it,
# and a look at what webfs made of it. Run from the repository root.
set -eu
top=${1:-demo}
rm -rf "$top"
mkdir -p "$top"
echo "== webfs mkfs: 4 disks under $top/"
webfs mkfs --label demo "$top/disk0" "$top/disk1" "$top/disk2" "$top/disk3"

echo "== a sample crawl: pages, an image, and the same page under two names"
crawl="$top/sample-crawl"
mkdir -p "$crawl/example.org/news" "$crawl/example.net"
i=0
while [ $i -lt 12 ]; do
    { echo "<html><head><title>Story $i</title></head><body>"
      seq -f "<p>paragraph %g of story $i: the archive keeps every distinct page once.</p>" 1 80
      echo "</body></html>"; } > "$crawl/example.org/news/story-$i.html"
    i=$((i + 1))
done
cp "$crawl/example.org/news/story-3.html" "$crawl/example.net/mirror-of-story-3.html"
printf '\211PNG\r\n\032\n' > "$crawl/example.org/logo.png"
head -c 20000 /dev/urandom >> "$crawl/example.org/logo.png"

echo "== webfs put: one contentkey per document (note the duplicate)"
webfs put "$top/disk0" $(find "$crawl" -type f | sort) | tee "$top/keys.txt"

key=$(head -n 1 "$top/keys.txt" | cut -f1)
echo "== webfs get $key | head -n 3"
webfs get "$top/disk2" "$key" | head -n 3

sig=${key%@*}; disk=${key#*@}
block="$top/disk$disk/blocks/$(echo "$sig" | cut -c1-2)/$(echo "$sig" | cut -c3-4)/$(echo "$sig" | cut -c5-)"
echo "== the block on disk: an ASCII header, then gzip"
head -c 512 "$block" | head -n 8
echo "== without webfs: dd if=BLOCK bs=512 skip=1 | gunzip | head -n 3"
dd if="$block" bs=512 skip=1 2>/dev/null | gunzip | head -n 3

echo "== webfs status"
webfs status "$top/disk0"
echo "== webfs fsck"
webfs fsck "$top/disk0"
