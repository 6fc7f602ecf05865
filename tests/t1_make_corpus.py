"""tools/make-corpus: reproducible, realistic web crawls for the benchmark."""

import collections
import hashlib
import json
import os
import subprocess
import sys
import zlib

import pytest

TOOL = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                    "tools", "make-corpus")
RARE = b"zyzzogeton"
PAGE_EXT = (".html", ".htm")


def run(*args, check=True):
    p = subprocess.run([sys.executable, TOOL] + [str(a) for a in args],
                       capture_output=True, text=True, timeout=120)
    if check and p.returncode != 0:
        raise AssertionError("make-corpus %s failed (%d):\n%s%s"
                             % (args, p.returncode, p.stdout, p.stderr))
    return p


def read_tree(root):
    """{relative path: (bytes, mtime)} of every file under root."""
    out = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for f in filenames:
            p = os.path.join(dirpath, f)
            with open(p, "rb") as fh:
                out[os.path.relpath(p, root)] = (fh.read(), int(os.stat(p).st_mtime))
    return out


def crawl(tree, name):
    pre = name + os.sep
    return {k[len(pre):]: v[0] for k, v in tree.items() if k.startswith(pre)}


def is_page(path):
    return path.endswith(PAGE_EXT)


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    """About 800 pages per crawl, two crawls, 5 % change rate."""
    out = tmp_path_factory.mktemp("corpus") / "out"
    p = run("--seed", 7, "--pages", 800, "--crawls", 2, "--change-rate", 0.05, "-v", out)
    return out, read_tree(out), p.stdout


def test_help():
    p = run("--help")
    for opt in ("--seed", "--pages", "--size", "--crawls", "--change-rate",
                "--dup-rate", "--images-per-page", "--base", "--force"):
        assert opt in p.stdout


def test_layout_and_summary(corpus):
    out, tree, stdout = corpus
    assert sorted(os.listdir(out)) == ["corpus.json", "crawl-001", "crawl-002"]
    info = json.loads((out / "corpus.json").read_text())
    files = [k for k in tree if k.startswith("crawl-")]
    assert info["files"] == len(files)
    assert info["bytes"] == sum(len(tree[k][0]) for k in files)
    # one summary line with files, bytes and distinct documents
    line = stdout.splitlines()[0]
    assert "%d files" % len(files) in line and "distinct documents" in line
    c1 = crawl(tree, "crawl-001")
    hosts = {k.split(os.sep)[0] for k in c1}
    assert len(hosts) >= 5 and all(h.startswith("www.example-") for h in hosts)
    assert max(k.count(os.sep) for k in c1) >= 3          # several directory levels
    assert sum(is_page(k) for k in c1) == 800


def test_reproducible_same_seed(tmp_path, corpus):
    a, b = tmp_path / "a", tmp_path / "b"
    run("--seed", 3, "--size", "2M", "--crawls", 2, a)
    run("--seed", 3, "--size", "2M", "--crawls", 2, b)
    ta, tb = read_tree(a), read_tree(b)
    assert ta == tb                                      # contents and mtimes
    c = tmp_path / "c"
    run("--seed", 4, "--size", "2M", "--crawls", 2, c)
    tc = read_tree(c)
    assert set(ta) != set(tc)
    common = set(ta) & set(tc)
    assert all(ta[k][0] != tc[k][0] for k in common if k.startswith("crawl-"))


def test_page_and_image_sizes(corpus):
    _, tree, _ = corpus
    c1 = crawl(tree, "crawl-001")
    pages = [v for k, v in c1.items() if is_page(k)]
    images = [v for k, v in c1.items() if not is_page(k)]
    mean_page = sum(map(len, pages)) / len(pages)
    mean_image = sum(map(len, images)) / len(images)
    assert 10 * 1024 <= mean_page <= 14.5 * 1024, mean_page
    assert 26 * 1024 <= mean_image <= 40 * 1024, mean_image
    # log-normal: a long right tail, median well below the mean
    median = sorted(map(len, pages))[len(pages) // 2]
    assert median < 0.85 * mean_page
    assert 0.65 <= len(images) / len(pages) <= 0.9


def test_pages_compress_like_html_images_do_not(corpus):
    _, tree, _ = corpus
    c1 = crawl(tree, "crawl-001")
    pages = [v for k, v in c1.items() if is_page(k)][:300]
    ratio = sum(map(len, pages)) / sum(len(zlib.compress(p, 6)) for p in pages)
    assert 3.0 <= ratio <= 5.0, ratio
    for k, v in list(c1.items())[:200]:
        if is_page(k):
            assert v.lstrip().startswith(b"<!DOCTYPE")
            continue
        ext = k.rsplit(".", 1)[1]
        magic = {"jpg": b"\xff\xd8\xff", "png": b"\x89PNG\r\n\x1a\n", "gif": b"GIF89a"}[ext]
        assert v.startswith(magic), k
        if len(v) > 4096:
            assert len(zlib.compress(v, 6)) > 0.98 * len(v)


def dup_fraction(files):
    distinct = len(set(hashlib.sha1(v).digest() for v in files.values()))
    return (len(files) - distinct) / len(files)


def test_duplicates_default_rate(corpus):
    _, tree, _ = corpus
    for name in ("crawl-001", "crawl-002"):
        assert 0.2 <= dup_fraction(crawl(tree, name)) <= 0.3


@pytest.mark.parametrize("rate", [0.0, 0.5])
def test_duplicates_configurable(tmp_path, rate):
    run("--seed", 2, "--pages", 300, "--crawls", 1, "--dup-rate", rate, tmp_path / "o")
    frac = dup_fraction(crawl(read_tree(tmp_path / "o"), "crawl-001"))
    if rate == 0:
        assert frac == 0
    else:
        assert abs(frac - rate) <= 0.07, frac


def test_change_rate(corpus):
    _, tree, _ = corpus
    c1, c2 = crawl(tree, "crawl-001"), crawl(tree, "crawl-002")
    assert set(c1) == set(c2)                            # same site set
    changed = [k for k in c1 if c1[k] != c2[k]]
    assert all(is_page(k) for k in changed)              # images do not change
    frac = len(changed) / sum(is_page(k) for k in c1)
    assert 0.03 <= frac <= 0.07, frac


def test_no_changes(tmp_path):
    run("--seed", 5, "--size", "1M", "--crawls", 3, "--change-rate", 0, tmp_path / "o")
    t = read_tree(tmp_path / "o")
    assert crawl(t, "crawl-001") == crawl(t, "crawl-002") == crawl(t, "crawl-003")


@pytest.mark.parametrize("size", ["1M", "6M"])
def test_size_respected(tmp_path, size):
    run("--seed", 11, "--size", size, "--crawls", 2, tmp_path / "o")
    want = int(size[:-1]) * 1024 * 1024
    t = read_tree(tmp_path / "o")
    for name in ("crawl-001", "crawl-002"):
        got = sum(map(len, crawl(t, name).values()))
        assert abs(got - want) <= 0.1 * want, (name, got, want)


def test_rare_word_exactly_three_per_crawl(corpus):
    _, tree, stdout = corpus
    per_crawl = collections.Counter()
    for k, (data, _) in tree.items():
        if k.startswith("crawl-") and RARE in data:
            per_crawl[k.split(os.sep)[0]] += 1
            assert is_page(k)
    assert per_crawl == {"crawl-001": 3, "crawl-002": 3}
    assert "zyzzogeton" in stdout                        # --verbose says where


def test_refuses_non_empty_out(tmp_path):
    out = tmp_path / "o"
    out.mkdir()
    (out / "keep.txt").write_text("mine")
    p = run("--size", "1M", out, check=False)
    assert p.returncode != 0 and "not empty" in p.stderr
    assert os.listdir(out) == ["keep.txt"]
    run("--size", "1M", "--crawls", 1, "--force", out)
    assert (out / "crawl-001").is_dir() and (out / "keep.txt").read_text() == "mine"


def test_empty_out_dir_is_fine(tmp_path):
    out = tmp_path / "o"
    out.mkdir()
    run("--size", "500K", "--crawls", 1, out)
    assert (out / "crawl-001").is_dir()


def test_base_pages(tmp_path):
    base = tmp_path / "base"
    (base / "sub").mkdir(parents=True)
    bodies = []
    for i in range(5):
        body = ("<html><head><title>Doc %d</title></head><body>%s</body></html>\n"
                % (i, "<p>real documentation text %d</p>\n" % i * (200 + 50 * i))).encode()
        bodies.append(body)
        (base / "sub" / ("doc%d.html" % i)).write_bytes(body)
    (base / "notes.txt").write_text("not a page")
    run("--seed", 1, "--pages", 60, "--crawls", 2, "--base", base, tmp_path / "o")
    t = read_tree(tmp_path / "o")
    c1 = crawl(t, "crawl-001")
    pages = [v for k, v in c1.items() if is_page(k)]
    assert len(pages) == 60
    assert all(any(p.startswith(b) for b in bodies) for p in pages)
    assert {b for b in bodies if any(p.startswith(b) for p in pages)} == set(bodies)
    assert sum(RARE in p for p in pages) == 3
    assert 0.1 <= dup_fraction(c1) <= 0.4


def test_small_pages_median_about_6k(tmp_path):
    """--small-pages: the bench's small-page corpus, median page about 6 KB."""
    out = tmp_path / "small"
    run("--pages", 600, "--crawls", 1, "--small-pages", out)
    sizes = sorted(os.path.getsize(os.path.join(d, f))
                   for d, _, fs in os.walk(out / "crawl-001") for f in fs if is_page(f))
    median = sizes[len(sizes) // 2]
    assert 5000 <= median <= 7200, median
    info = json.loads((out / "corpus.json").read_text())
    assert info["options"]["small_pages"] is True
    assert info["options"]["images_per_page"] == 0.1
