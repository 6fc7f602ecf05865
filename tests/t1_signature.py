from hypothesis import given, strategies as st
import pytest

from webfs import signature as s


def test_signature_is_xxh3_128_hex():
    # Reference value of xxh3-128 for b"abc" (xxhash documentation / test vectors).
    assert s.signature(b"abc") == "06b05ab6733a618578af5f94892f3950"
    h = s.new_hasher()
    h.update(b"a"); h.update(b"bc")
    assert h.hexdigest() == s.signature(b"abc")


@pytest.mark.parametrize("depth,expect", [
    (2, "0f/1e2d3c4b5a69788796a5b4c3d2e1f0"),
    (3, "0f/1e/2d3c4b5a69788796a5b4c3d2e1f0"),
    (4, "0f/1e/2d/3c4b5a69788796a5b4c3d2e1f0"),
])
def test_location_follows_sig2location(depth, expect):
    sig = "0f1e2d3c4b5a69788796a5b4c3d2e1f0"
    assert s.location(sig, depth) == expect
    assert s.location(sig, depth, 2) == expect + "~2"
    assert s.group_dir(s.group_of(sig, depth)) == expect.rsplit("/", 1)[0]


@given(st.binary(min_size=16, max_size=16), st.integers(2, 4), st.integers(0, 99))
def test_location_round_trip(raw, depth, overflow):
    sig = raw.hex()
    assert s.parse_location(s.location(sig, depth, overflow)) == (sig, overflow)


def test_parse_location_rejects_strangers():
    assert s.parse_location("0f/1e/x.tmp") is None
    assert s.parse_location("0f/1e/2d3c4b5a69788796a5b4c3d2e1f0~x") is None
    assert s.parse_location("0f1/e/2d3c4b5a69788796a5b4c3d2e1f0") is None


def test_depth_is_checked():
    with pytest.raises(ValueError):
        s.check_depth(5)


def test_contentkey_parse_and_format():
    k = s.ContentKey.parse("0F1E2D3C4B5A69788796A5B4C3D2E1F0~3@2")
    assert k == s.ContentKey("0f1e2d3c4b5a69788796a5b4c3d2e1f0", 3, 2)
    assert str(k) == "0f1e2d3c4b5a69788796a5b4c3d2e1f0~3@2"
    assert s.ContentKey.parse("xxh128:" + "a" * 32) == s.ContentKey("a" * 32, 0, None)
    for bad in ("", "abc", "a" * 31, "a" * 32 + "~", "a" * 32 + "@x"):
        with pytest.raises(ValueError):
            s.ContentKey.parse(bad)
