"""Patient identity (keyed per-record coins) and data identity (one registration per source)."""

import hashlib
import re
from typing import Any

import numpy as np
import pyarrow as pa
import pytest
from cryptography.hazmat.primitives.ciphers import Cipher, algorithms, modes
from fastapi.testclient import TestClient

from app.datasets import record_coins
from app.datasets.patients import identity
from tests.api.scoring_helpers import problem

SOURCE = {"kind": "synthetic", "n_rows": 2000, "seed": 77}


@pytest.mark.parametrize("scheme", record_coins.SCHEMES)
def test_removing_one_record_moves_no_other_record(scheme: str) -> None:
    secret = identity.new_secret()
    ids = [f"mrn-{i}" if i % 3 else i for i in range(5000)]
    parts = identity.parts_of(ids, secret, scheme=scheme)
    for removed in (0, 1234, 4999):
        rest = [i for k, i in enumerate(ids) if k != removed]
        assert np.array_equal(identity.parts_of(rest, secret, scheme=scheme),
                              np.delete(parts, removed))


@pytest.mark.parametrize("scheme", record_coins.SCHEMES)
def test_parts_follow_the_public_fractions_and_the_secret(scheme: str) -> None:
    secret = identity.new_secret()
    parts = identity.parts_of(range(100_000), secret, scheme=scheme)
    shares = np.bincount(parts, minlength=3) / 100_000
    assert np.allclose(shares, [0.7, 0.15, 0.15], atol=0.01)
    other = identity.parts_of(range(100_000), identity.new_secret(), scheme=scheme)
    assert np.mean(parts != other) > 0.3  # another secret: another split
    assert np.array_equal(identity.parts_of(["a", "b"], secret, scheme=scheme),
                          identity.parts_of(["a", "b"], secret, scheme=scheme))


def _v1_reference(record_id: object, secret: str) -> float:
    """The coin as migration 0007 computed it (frozen there): one keyed BLAKE2b per id."""
    digest = hashlib.blake2b(str(record_id).encode(), key=bytes.fromhex(secret), digest_size=8)
    return (int.from_bytes(digest.digest(), "little") >> 11) / 2**53


def _v2_reference(record_id: str, secret: str) -> float:
    """The v2 coin of one id by another route: CBC encryption with a zero IV of the whole
    message (length block, then the zero-padded id), whose last block is the CBC-MAC."""
    key = hashlib.blake2b(b"coin-cbc-mac-v2", key=bytes.fromhex(secret), digest_size=32).digest()
    text = record_id.encode()
    message = len(text).to_bytes(8, "little") + bytes(8) + text + bytes(-len(text) % 16)
    chain = Cipher(algorithms.AES(key), modes.CBC(bytes(16))).encryptor().update(message)
    return (int.from_bytes(chain[-16:-8], "little") >> 11) / 2**53


def test_v1_coins_are_the_ones_existing_datasets_were_split_with() -> None:
    secret = identity.new_secret()
    ids: list[object] = [*range(300), "pt-7", "ü-ß", "x" * 40]
    expected = [_v1_reference(i, secret) for i in ids]
    assert identity.coins(ids, secret, scheme=record_coins.BLAKE2B_V1).tolist() == expected
    as_range = identity.coins(range(300), secret, scheme=record_coins.BLAKE2B_V1)
    assert as_range.tolist() == expected[:300]


def test_v2_coins_match_the_definition_for_every_id_shape() -> None:
    secret = identity.new_secret()
    ids = ["", "7", "pt-0001", "é-ü", "x" * 15, "y" * 16, "z" * 200, "日本語の患者番号です"]
    ids += [str(i) for i in range(1000)]
    got = identity.coins(ids, secret, scheme=record_coins.AES_V2)
    assert got.tolist() == [_v2_reference(i, secret) for i in ids]
    # An integer id is its decimal text, however the ids arrive (range, list, Arrow, chunks).
    numbers = identity.coins(range(1000), secret, scheme=record_coins.AES_V2)
    assert numbers.tolist() == got[-1000:].tolist()
    chunked = pa.chunked_array([pa.array(ids[:500]), pa.array(ids[500:])])
    assert identity.coins(chunked, secret, scheme=record_coins.AES_V2).tolist() == got.tolist()
    sliced = pa.array(ids).slice(3, 100)
    assert identity.coins(sliced, secret, scheme=record_coins.AES_V2).tolist() == \
        got[3:103].tolist()


def test_v2_coins_cross_chunks_and_fixed_width_ids_alike() -> None:
    secret = identity.new_secret()
    fixed = [f"mrn-{i:08d}" for i in range(record_coins.CHUNK + 10)]  # one width: the view
    varied = [*fixed[:-1], "a-much-longer-identifier"]  # another width in the last chunk
    a = identity.coins(fixed, secret, scheme=record_coins.AES_V2)
    b = identity.coins(varied, secret, scheme=record_coins.AES_V2)
    assert np.array_equal(a[:-1], b[:-1])
    assert [a[0], a[-1], b[-1]] == [_v2_reference(fixed[0], secret),
                                    _v2_reference(fixed[-1], secret),
                                    _v2_reference(varied[-1], secret)]


def test_an_unknown_scheme_or_a_missing_id_is_refused() -> None:
    secret = identity.new_secret()
    with pytest.raises(ValueError, match="unknown coin scheme"):
        identity.coins(["a"], secret, scheme="md5")
    with pytest.raises(ValueError, match="missing"):
        identity.coins(pa.array(["a", None]), secret, scheme=record_coins.AES_V2)


def _register(client: TestClient, **changes: Any) -> Any:
    body = {"name": "twin", "source": SOURCE, "privacy_budget": {"epsilon": 8, "delta": 1e-5}}
    return client.post("/v1/datasets", json={**body, **changes})


def test_a_source_registered_twice_is_refused_naming_the_first(client: TestClient) -> None:
    first = _register(client)
    assert first.status_code == 201, first.text
    second = _register(client, name="again")
    body = problem(second, 409, field="source")
    assert body["existing_dataset_id"] == first.json()["id"]
    assert f"dataset {first.json()['id']}" in body["detail"]


def test_a_public_twin_of_a_private_source_is_refused(client: TestClient) -> None:
    assert _register(client).status_code == 201
    twin = _register(client, public=True, privacy_budget=None)
    problem(twin, 409, field="source")


def test_delta_is_capped_at_a_tenth_of_one_over_n(client: TestClient) -> None:
    too_large = _register(client, privacy_budget={"epsilon": 8, "delta": 1 / (5 * 2000)})
    body = problem(too_large, 422, field="privacy_budget.delta")
    assert "1/(10 n_rows)" in body["detail"]
    assert _register(client, privacy_budget={"epsilon": 8, "delta": 1 / (10 * 2000)}
                     ).status_code == 201


def test_only_admins_and_data_stewards_see_the_seed(client: TestClient, client_as) -> None:
    created = _register(client)
    dataset_id = created.json()["id"]
    assert created.json()["source"]["seed"] == SOURCE["seed"]
    steward = client_as("data_steward").get(f"/v1/datasets/{dataset_id}").json()
    assert steward["source"]["seed"] == SOURCE["seed"]
    for role in ("data_scientist", "privacy_officer"):  # the seed regenerates every row
        caller = client_as(role)
        assert caller.get(f"/v1/datasets/{dataset_id}").json()["source"]["seed"] is None
        assert caller.get("/v1/datasets").json()["items"][0]["source"]["seed"] is None
    page = client_as("privacy_officer").get(f"/v1/datasets/{dataset_id}/privacy-report").text
    seed_as_a_number = rf'(?<![\d.]){SOURCE["seed"]}(?![\d.])'  # not digits of a figure
    assert re.search(seed_as_a_number, page.replace(f'"dataset_id":{dataset_id}', "")) is None


def test_the_record_secret_is_never_served(client: TestClient) -> None:
    created = _register(client).json()
    assert "secret" not in str(created).lower()
    parts = created["training_rows"] + created["calibration_rows"] + created["evaluation_rows"]
    assert parts == created["rows"] == SOURCE["n_rows"]


def test_a_tally_counts_the_parts_of_the_words_it_took_and_only_those() -> None:
    """Batch by batch it counts what the whole table's words give; a second pass over the
    same ids (a CSV read again as bytes) is counted afresh from the words, not added on."""
    secret = identity.new_secret()
    ids = pa.array([f"mrn-{i}" for i in range(7000)])
    tally = identity.PartTally(secret, identity.CURRENT_SCHEME)
    words = np.concatenate([tally(ids.slice(start, 1000)) for start in range(0, 7000, 1000)])
    expected = identity.part_counts(identity.parts_of(ids, secret, scheme=tally.scheme))
    assert np.array_equal(words, record_coins.keyed_words(ids, secret, scheme=tally.scheme))
    assert tally.counts_of(words) == expected
    assert sum(expected.values()) == 7000 and min(expected.values()) > 500
    tally(ids.slice(0, 2500))  # the first pass's batches, before the second read them all
    assert tally.counts_of(words) == expected
