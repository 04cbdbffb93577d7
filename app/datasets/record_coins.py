"""Each record's coin: a keyed pseudo-random function of its id, in [0, 1).

Two versions, one per dataset (``Dataset.coin_scheme``), so a dataset's parts never change:

* ``blake2b-v1`` (datasets registered before migration 0013): keyed BLAKE2b (RFC 7693) of the
  id's UTF-8 text, 8 bytes, one Python call per record: a large share of a big upload's time.
* ``aes-v2`` (every dataset since): the length-prepended CBC-MAC of the id's UTF-8 bytes with
  AES-256 (FIPS 197) under a key derived from the dataset's secret. The first block holds the
  id's byte length, the id's bytes follow, zero-padded to whole blocks; because every message
  starts with its own length, the messages form a prefix-free set, on which CBC-MAC is a
  pseudo-random function (Bellare, Kilian and Rogaway, "The security of the cipher block
  chaining message authentication code", JCSS 2000; Petrank and Rackoff 2000), up to about
  q^2 m^2 / 2^128 for q ids of m blocks (below 2^-75 at the 2,000,000-row cap, for ids of up to
  128 characters of any script). Every id's chain advances together, one AES-ECB call over all ids
  per block position, so a million ids cost a few AES calls instead of a million hash calls
  (``bench/ingest.py``). ECB is right here: each call encrypts independent chain states, not a
  message.

Either way, a record's coin depends only on its id and the secret: removing a patient moves no
other patient between parts (tests/datasets/test_identity.py).

Written here, not taken from a library: ``cryptography`` gives AES and hashlib BLAKE2b, and
``cryptography``'s CMAC (the standardised CBC-MAC) takes one message per call: what is ours is
running every id's chain at once over an Arrow column, which no maintained package offers.
"""

import hashlib
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from cryptography.hazmat.primitives.ciphers import Cipher, algorithms, modes

BLAKE2B_V1, AES_V2 = "blake2b-v1", "aes-v2"
SCHEMES = (BLAKE2B_V1, AES_V2)
CURRENT_SCHEME = AES_V2
BLOCK = 16
CHUNK = 1 << 16


def to_unit(words: np.ndarray) -> np.ndarray:
    """64-bit words to uniform numbers in [0, 1) (their top 53 bits)."""
    return (words >> np.uint64(11)).astype(np.float64) / float(1 << 53)


def _blake2b_words(texts: Iterable[bytes], key: bytes, person: bytes = b"") -> np.ndarray:
    """Keyed BLAKE2b of each text, first 8 bytes as a little-endian word.

    The keyed state is set up once and copied per text (the key block is compressed once).
    """
    keyed = hashlib.blake2b(key=key, digest_size=8, person=person)

    def digest(text: bytes) -> bytes:
        h = keyed.copy()
        h.update(text)
        return h.digest()

    return np.frombuffer(b"".join(map(digest, texts)), dtype="<u8")


def id_strings(record_ids: Iterable[int | str] | pa.Array | pa.ChunkedArray) -> pa.StringArray:
    """Record ids as one Arrow string array: an integer id is its decimal text, as ``str``."""
    if isinstance(record_ids, pa.ChunkedArray):
        record_ids = record_ids.combine_chunks()
    if isinstance(record_ids, range) and record_ids.step == 1:
        record_ids = pa.array(np.arange(record_ids.start, record_ids.stop, dtype=np.int64))
    elif not isinstance(record_ids, pa.Array):
        record_ids = pa.array([str(i) for i in record_ids], pa.string())
    return pc.cast(record_ids, pa.string())


def blake2b_v1(ids: pa.StringArray, secret: bytes) -> np.ndarray:
    """The v1 words: keyed BLAKE2b of each id's text under the secret itself."""
    return _blake2b_words((s.encode() for s in ids.to_pylist()), secret)


def _derived(secret: bytes, purpose: bytes) -> bytes:
    return hashlib.blake2b(purpose, key=secret, digest_size=32).digest()


@dataclass(frozen=True)
class IdBlocks:
    """Ids laid out for the chains: each id's UTF-8 bytes zero-padded to whole 16-byte blocks,
    each block as two little-endian 64-bit words (``words``, shape (m, n, 2): block position
    first, so each position is one contiguous array; m the most blocks of any id), with each
    id's byte length and block count, and the lengths' distinct values (``sizes``; each id's
    index among them, ``which``). Laid out once per batch of an upload for both of its keyed
    digests (the dataset's coins, the organisation's patient key) or the unkeyed one; ``ids``
    stays for the v1 scheme, which hashes the text."""

    ids: pa.StringArray
    words: np.ndarray
    lengths: np.ndarray
    counts: np.ndarray
    sizes: np.ndarray
    which: np.ndarray

    def __len__(self) -> int:
        return len(self.lengths)

    @classmethod
    def of(cls, ids: pa.StringArray) -> "IdBlocks":
        """One gather of unaligned 64-bit loads per half block, from a view of Arrow's data
        buffer at every byte offset, the bytes past each id's end masked off: no copy per id
        or per id length (each numpy call runs over all ids, never over a short inner axis)."""
        n = len(ids)
        offsets = np.frombuffer(ids.buffers()[1], dtype=np.int32)[ids.offset:ids.offset + n + 1]
        lengths = np.diff(offsets).astype(np.int64)
        counts = (lengths + BLOCK - 1) // BLOCK
        m = max(int(counts.max()) if n else 0, 1)
        first, last = (int(offsets[0]), int(offsets[-1])) if n else (0, 0)
        padded = np.zeros(last - first + BLOCK * m, np.uint8)
        if last > first:
            padded[:last - first] = np.frombuffer(ids.buffers()[2], np.uint8)[first:last]
        loads = np.ndarray((len(padded) - 7,), dtype="<u8", buffer=padded, strides=(1,))
        starts = offsets[:-1] - first
        words = np.empty((m, n, 2), "<u8")
        for half in range(2 * m):
            word = np.take(loads, starts + 8 * half)
            word &= _KEEP[np.clip(lengths - 8 * half, 0, 8)]
            words[half // 2, :, half % 2] = word
        present = np.bincount(lengths) if n else np.zeros(1, np.int64)
        sizes = np.flatnonzero(present)
        position = np.zeros(len(present), np.int64)
        position[sizes] = np.arange(len(sizes))
        return cls(ids, words, lengths, counts, sizes, position[lengths])


_KEEP = np.array([(1 << (8 * r)) - 1 for r in range(8)] + [(1 << 64) - 1], dtype="<u8")
"""The mask of a little-endian word's first r bytes (r = 0..8)."""
_PAIR = np.dtype((np.void, 16))
"""Two words as one item: a gather of 16-byte rows as one call over items."""


def _cbc_mac_words(ids: IdBlocks, encrypt: Callable[[bytes], bytes]) -> np.ndarray:
    """Length-prepended CBC-MAC of each id under ``encrypt`` (AES-ECB), first 8 bytes.

    The chain starts from the encryption of a block holding the id's byte length, then takes
    the id's blocks in turn; every id's chain advances together, one ECB call per block
    position (ids with fewer blocks stop earlier).
    """
    firsts = np.zeros((len(ids.sizes), 2), dtype="<u8")
    firsts[:, 0] = ids.sizes
    starts = np.frombuffer(encrypt(firsts.tobytes()), dtype=_PAIR)
    state = np.take(starts, ids.which).view("<u8").reshape(-1, 2)
    for j, block in enumerate(ids.words):
        rows = ids.counts > j
        if rows.all():
            state = np.frombuffer(encrypt((state ^ block).tobytes()),
                                  dtype="<u8").reshape(-1, 2)
        elif rows.any():
            mixed = state[rows] ^ block[rows]
            state = state.copy()
            state[rows] = np.frombuffer(encrypt(mixed.tobytes()), dtype="<u8").reshape(-1, 2)
    return np.ascontiguousarray(state[:, 0])


def _laid_out(ids: pa.StringArray | IdBlocks) -> Iterator[IdBlocks]:
    """``ids`` in chunks of ``CHUNK`` ids (already laid out: as they are), so the
    temporaries stay a few MiB at any table size."""
    if isinstance(ids, IdBlocks):
        yield ids
        return
    for start in range(0, len(ids), CHUNK):
        yield IdBlocks.of(ids.slice(start, CHUNK))


def _chunk_by_chunk(ids: pa.StringArray | IdBlocks,
                    digest: Callable[[IdBlocks], np.ndarray]) -> np.ndarray:
    """``digest`` of each chunk of ``_laid_out(ids)``, one word per id, in order."""
    words = np.empty(len(ids), dtype=np.uint64)
    at = 0
    for chunk in _laid_out(ids):
        words[at:at + len(chunk)] = digest(chunk)
        at += len(chunk)
    return words


def aes_v2(ids: pa.StringArray | IdBlocks, secret: bytes) -> np.ndarray:
    """The v2 words: length-prepended CBC-MAC with AES-256 of each id."""
    encryptor = Cipher(algorithms.AES(_derived(secret, b"coin-cbc-mac-v2")),
                       modes.ECB()).encryptor()
    words = _chunk_by_chunk(ids, lambda chunk: _cbc_mac_words(chunk, encryptor.update))
    encryptor.finalize()
    return words


def mix64(z: np.ndarray) -> np.ndarray:
    """MurmurHash3's 64-bit finaliser, in place (vectorised; uint64 arithmetic wraps); also
    the row hashes' mixer (``app.datasets.intake.table_store``)."""
    z ^= z >> np.uint64(33)
    z *= np.uint64(0xFF51AFD7ED558CCD)
    z ^= z >> np.uint64(33)
    z *= np.uint64(0xC4CEB9FE1A85EC53)
    z ^= z >> np.uint64(33)
    return z


def id_digests(ids: pa.StringArray | IdBlocks) -> np.ndarray:
    """An unkeyed 64-bit digest of each id, to find duplicates without sorting strings.

    Equal ids have equal digests; unequal ids collide only by accident (the digest mixes the
    length and every block), so a caller confirms equal digests by comparing the ids
    themselves. Sorting 64-bit words is several times faster than sorting a million strings
    in Arrow.
    """
    return _chunk_by_chunk(ids, _unkeyed_words)


def _unkeyed_words(ids: IdBlocks) -> np.ndarray:
    """``id_digests`` of laid-out ids: the length, then each half block, mixed in."""
    digest = mix64(ids.lengths.astype(np.uint64) ^ np.uint64(0x9E3779B97F4A7C15))
    for j, block in enumerate(ids.words):
        rows = ids.counts > j
        halves = block[rows]
        digest[rows] = mix64(mix64(digest[rows] ^ halves[:, 0]) ^ halves[:, 1])
    return digest


def keyed_words(record_ids: Iterable[int | str] | pa.Array | pa.ChunkedArray | IdBlocks,
                secret: str, *, scheme: str) -> np.ndarray:
    """Each record's 64-bit keyed word under the dataset's ``scheme`` and hex ``secret``: its
    coin's source (``to_unit``), and, being equal for equal ids, a digest to find duplicates.
    ``IdBlocks``: ids already laid out (an upload's batch, for each of its digests).

    Raises:
        ValueError: an unknown scheme, or a missing id.
    """
    if scheme not in SCHEMES:
        raise ValueError(f"unknown coin scheme {scheme!r}; expected one of {SCHEMES}")
    laid = record_ids if isinstance(record_ids, IdBlocks) else None
    ids, key = id_strings(record_ids) if laid is None else laid.ids, bytes.fromhex(secret)
    if ids.null_count:
        raise ValueError("record ids cannot be missing")
    if scheme == BLAKE2B_V1:
        return blake2b_v1(ids, key)
    return aes_v2(ids if laid is None else laid, key)


def coins(record_ids: Iterable[int | str] | pa.Array | pa.ChunkedArray, secret: str, *,
          scheme: str) -> np.ndarray:
    """Each record's coin in [0, 1) under the dataset's ``scheme`` and hex ``secret``.

    Raises:
        ValueError: an unknown scheme, or a missing id.
    """
    return to_unit(keyed_words(record_ids, secret, scheme=scheme))
