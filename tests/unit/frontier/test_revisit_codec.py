"""The packed validators give the server back exactly the texts it sent, or nothing."""

from __future__ import annotations

import pytest

from crawlfleet.frontier import LagHistogram, Validators
from crawlfleet.frontier.revisits import MAX_ETAG_BYTES, pack_validators, unpack_validators
from tests.support.revisit_mix import tracked_urls

MODIFIED = "Wed, 21 Oct 2015 07:28:00 GMT"


@pytest.mark.parametrize(
    ("etag", "packed_size"),
    [
        ('"5f7d8a2c-3e8"', 1 + 3 + 6),  # nginx: two hex groups
        ('"3e8-5b1e6c7a9f280"', 1 + 3 + 8),  # Apache
        ('"d41d8cd98f00b204e9800998ecf8427e"', 1 + 2 + 16),  # an MD5
        ('W/"1d4f-aBcDeFgHiJkLmNoPqRsTuVwXyZ0"', 1 + 3 + 2 + 20),  # a framework's weak ETag
        ('W/"a-b-c"', 1 + 4 + 2),
        ('"Xyz"', 1 + 5),  # not hex: its text
        ('"1-AB+/"', 1 + 3 + 1 + 3),
        ("unquoted", 1 + 8),
    ],
)
def test_an_etag_packs_small_and_comes_back_the_same(etag: str, packed_size: int) -> None:
    packed = pack_validators(Validators(etag=etag))
    assert len(packed) == packed_size
    assert unpack_validators(packed) == Validators(etag=etag)


def test_beside_an_etag_neither_last_modified_nor_digest_is_kept() -> None:
    """If-None-Match outranks If-Modified-Since (RFC 9110 §13.1.3), and an equal ETag on a
    200 says as much as an equal digest."""
    full = Validators(etag='"abc"', last_modified=MODIFIED, digest="0123456789abcdef")
    assert unpack_validators(pack_validators(full)) == Validators(etag='"abc"')


def test_without_an_etag_the_date_and_digest_are_kept_exactly() -> None:
    for validators in (
        Validators(last_modified=MODIFIED, digest="0123456789abcdef"),  # 1 + 8 + 4 bytes
        Validators(last_modified="Wed, 21 Oct 2015 07:28:00 +0000", digest="short"),  # as text
        Validators(last_modified="yesterday"),
        Validators(digest="ab" * 20, captured_at=1_764_662_400),  # a whole SHA-1: 1 + 20
        Validators(),
    ):
        assert unpack_validators(pack_validators(validators)) == validators
    assert len(pack_validators(Validators(last_modified=MODIFIED, digest="0" * 16))) == 13
    assert len(pack_validators(Validators(digest="0" * 40))) == 22


def test_the_capture_time_is_kept_beside_any_validator() -> None:
    for validators in (
        Validators(etag='W/"1d4f-aBcDeFgHiJkLmNoPqRsTuVwXyZ0"', captured_at=1_764_662_400),
        Validators(etag='"Xyz"', captured_at=0),
        Validators(digest="0123456789abcdef", captured_at=2**32 - 1),
    ):
        assert unpack_validators(pack_validators(validators)) == validators


def test_a_value_too_long_to_keep_is_dropped_not_hashed() -> None:
    """A hash could not be sent back: the URL is then asked without it."""
    etag = '"' + "Q" * MAX_ETAG_BYTES + '"'
    assert unpack_validators(pack_validators(Validators(etag=etag, digest="a" * 16))) == (
        Validators(digest="a" * 16)
    )
    assert unpack_validators(pack_validators(Validators(last_modified="x" * 100))) == (Validators())


def test_a_realistic_mix_round_trips() -> None:
    for _, validators in tracked_urls(2000, hosts=20):
        captured = validators.captured_at
        expected = (
            Validators(etag=validators.etag, captured_at=captured)
            if validators.etag
            else Validators(validators.etag, validators.last_modified, validators.digest, captured)
        )
        assert unpack_validators(pack_validators(validators)) == expected


def test_lag_quantiles_are_bucket_bounds() -> None:
    assert LagHistogram().quantile(0.5) is None
    lags = LagHistogram((3, 0, 1) + (0,) * 10 + (1,))  # 3 ≤ 1 s, 1 ≤ 15 s, 1 past a day
    assert (lags.quantile(0.5), lags.quantile(0.8), lags.quantile(1.0)) == (1.0, 15.0, 86400.0)
