#!/bin/sh
# make demo: a 4-disk archive under ./demo, a sample crawl copied in through
# the mount, and a look at what webfs made of it. Run from the repository root.
set -eu
top=${1:-demo}
here=$(pwd)
mnt="$top/mnt"
if mountpoint -q "$mnt" 2>/dev/null; then webfs umount "$mnt"; fi
rm -rf "$top"
mkdir -p "$mnt"

echo "== webfs mkfs: 4 disks under $top/, parity groups of 4"
webfs mkfs --label demo "$top/disk0" "$top/disk1" "$top/disk2" "$top/disk3"

echo "== a sample crawl (tools/make-corpus): two crawls of the same sites"
python3 tools/make-corpus --seed 1 --pages 400 --crawls 2 "$top/crawls"

echo "== webfs mount $top/disk0 $mnt"
webfs mount "$top/disk0" "$mnt"
trap 'webfs umount "$mnt" 2>/dev/null || true' EXIT

echo "== cp -r the first crawl, rsync -a the second (mostly duplicates)"
cp -r "$top/crawls/crawl-001" "$mnt/"
rsync -a "$top/crawls/crawl-002/" "$mnt/crawl-002/"

echo "== ls $mnt; ls of one site"
ls "$mnt"
site=$(ls "$mnt/crawl-001" | head -n 1)
ls -l "$mnt/crawl-001/$site" | head -n 6

echo "== grep -rl zyzzogeton (a rare word)"
(cd "$mnt" && grep -rl zyzzogeton .)

echo "== diff -r against the source"
diff -r "$top/crawls/crawl-001" "$mnt/crawl-001" && diff -r "$top/crawls/crawl-002" "$mnt/crawl-002" && echo "identical"

echo "== du -sh --apparent-size (what users see) vs du -sh of the disks (what is stored)"
du -sh --apparent-size "$mnt"
du -shc "$top"/disk? | tail -n 1

page=$(cd "$mnt" && find crawl-001 -name '*.html' -print -quit)
echo "== the blocks of $page (virtual xattrs)"
for attr in signature disk refs codec; do
    printf '%-22s %s\n' "user.webfs.$attr" "$(getfattr --absolute-names --only-values -n user.webfs.$attr "$mnt/$page")"
done

echo "== webfs status"
webfs status "$mnt"

sig=$(getfattr --absolute-names --only-values -n user.webfs.signature "$mnt/$page")
disk=$(getfattr --absolute-names --only-values -n user.webfs.disk "$mnt/$page")
block="$top/disk$disk/blocks/$(echo "$sig" | cut -c1-2)/$(echo "$sig" | cut -c3-4)/$(echo "$sig" | cut -c5-)"
echo "== unmount; the block on disk is an ASCII header, then gzip"
webfs umount "$mnt"
trap - EXIT
head -c 512 "$block" | head -n 8
echo "== without webfs: dd if=BLOCK bs=512 skip=1 | gunzip | head -c 300"
dd if="$block" bs=512 skip=1 2>/dev/null | gunzip | head -c 300; echo
echo "== webfs fsck"
webfs fsck "$top/disk0"

echo "== without webfs at all: tools/webfs-recover (sh, coreutils, find, gzip) rebuilds the tree"
sh tools/webfs-recover "$top"/disk0 "$top"/disk1 "$top"/disk2 "$top"/disk3 "$top/recovered" 2>&1 | tail -n 2
diff -r "$top/crawls/crawl-001" "$top/recovered/crawl-001" && echo "recovered crawl-001 is identical"

echo "== a disk dies: disk2 goes away; the mount reads its blocks through parity"
mkdir -p "$top/graveyard"                   # not beside the others, where webfs would find it
mv "$top/disk2" "$top/graveyard/disk2"
webfs mount "$top/disk0" "$mnt"
trap 'webfs umount "$mnt" 2>/dev/null || true' EXIT
diff -r "$top/crawls/crawl-002" "$mnt/crawl-002" && echo "crawl-002 reads back identical with disk 2 gone"
webfs status "$mnt" | grep -E "missing|LOST|protected" || true
echo "== webfs rebuild --disk 2 --to $top/disk2, online"
webfs rebuild --disk 2 --to "$top/disk2" "$mnt" | tail -n 3
webfs umount "$mnt"
trap - EXIT
webfs fsck "$top/disk0"
echo "== done: mount it again with  webfs mount $top/disk0 $mnt  (cd $here first)"
