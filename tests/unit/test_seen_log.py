"""SQLite's dedupe log and its in-memory index (service/state/seen_log.py): exact on all 128 bits,
caught up with other writers of the same file, reloaded after a purge, and never holding a
key whose transaction (or savepoint) rolled back."""
import numpy as np
import pytest

from ldpfleet.service.state import seen_log
from ldpfleet.service.state.store import Store


def keys_of(rng, n):
    return rng.integers(0, 256, (n, 16), dtype=np.uint8)


@pytest.fixture
def state(tmp_path):
    url = "sqlite:///" + str(tmp_path / "s.db")
    with Store(url) as store:
        with store.batch():
            store.conn.execute(
                "INSERT INTO campaigns (name, campaign_id, config_payload, config_body,"
                " signing_key_ref, state, phase, created_at) VALUES"
                " ('c', 1, x'00', '{}', '', 'open', 1, 0)")
    return url


def claim(store, keys, seqs, name="c", phase=1):
    with store.batch():
        return store.claim_key_array(name, phase, keys, np.asarray(seqs, np.int64))


def test_unique_keys_matches_numpy_unique_on_128_bits():
    rng = np.random.default_rng(1)
    keys = keys_of(rng, 500)
    keys[100:150] = keys[0:50]  # repeats
    keys[200, 8:] ^= 1  # shares its first 64 bits with row 199's copy below
    keys[201] = keys[200]
    keys[201, 8:] = keys[199, 8:]
    keys[201, :8] = keys[200, :8]
    uniq, first, inverse = seen_log.unique_keys(keys)
    ref, ref_first, ref_inv = np.unique(keys.view(np.dtype((np.void, 16))).ravel(),
                                        return_index=True, return_inverse=True)
    assert sorted(map(bytes, uniq)) == sorted(bytes(r) for r in ref)
    assert sorted(first.tolist()) == sorted(ref_first.tolist())
    assert np.array_equal(uniq[inverse], keys)


def test_unique_keys_without_shared_high_words_keeps_each_keys_earliest_row():
    rng = np.random.default_rng(9)
    keys = keys_of(rng, 300)
    keys[rng.permutation(300)[:120]] = keys[rng.integers(0, 300, 120)]  # repeats, any order
    uniq, first, inverse = seen_log.unique_keys(keys)
    ref, ref_first = np.unique(keys.view(np.dtype((np.void, 16))).ravel(), return_index=True)
    assert sorted(map(bytes, uniq)) == sorted(bytes(r) for r in ref)
    assert sorted(first.tolist()) == sorted(ref_first.tolist())  # numpy's first = earliest
    assert np.array_equal(uniq[inverse], keys)


def test_claims_are_exact_when_keys_share_their_first_64_bits(state):
    rng = np.random.default_rng(2)
    a = keys_of(rng, 4)
    b = a.copy()
    b[:, 8:] ^= 0xFF  # same high word, other low word
    with Store(state) as store:
        new, prior = claim(store, a, [1, 2, 3, 4])
        assert new.all() and (prior == -1).all()
        new, prior = claim(store, np.concatenate([b, a[:2]]), [5, 6, 7, 8, 9, 9])
        assert new.tolist() == [True] * 4 + [False, False]
        assert prior.tolist() == [-1] * 4 + [1, 2]
        assert store.seen_count("c", 1) == 8
        assert store.seen_index.tables[("c", 1)].size == 8  # one slot per key, both words kept
        new, prior = claim(store, np.concatenate([a, b]), [0] * 8)
        assert not new.any() and prior.tolist() == [1, 2, 3, 4, 5, 6, 7, 8]


def test_another_writer_of_the_file_is_seen(state):
    rng = np.random.default_rng(3)
    keys = keys_of(rng, 50)
    with Store(state) as first, Store(state) as second:
        claim(first, keys[:30], range(30))
        claim(second, keys[20:40], range(100, 120))  # 20..29 were claimed by `first`
        new, prior = claim(first, keys[35:50], range(200, 215))
        assert new.tolist() == [False] * 5 + [True] * 10
        assert prior[:5].tolist() == list(range(115, 120))
        assert first.seen_count("c") == 50


def test_a_rolled_back_claim_leaves_no_trace(state):
    rng = np.random.default_rng(4)
    keys = keys_of(rng, 10)
    with Store(state) as store:
        with pytest.raises(RuntimeError):
            with store.batch():
                store.claim_key_array("c", 1, keys, np.arange(10))
                raise RuntimeError("the sketch write failed")
        assert store.seen_count("c") == 0
        mark = None
        with store.batch():
            mark = store.savepoint_mark()
            store.conn.execute("SAVEPOINT g")
            store.claim_key_array("c", 1, keys[:5], np.arange(5))
            store.conn.execute("ROLLBACK TO SAVEPOINT g")
            store.savepoint_rolled_back(mark)
            store.conn.execute("RELEASE SAVEPOINT g")
            store.claim_key_array("c", 1, keys[5:], np.arange(5, 10))
        new, _prior = claim(store, keys, np.arange(10))
        assert new.tolist() == [True] * 5 + [False] * 5
    with Store(state) as fresh:  # and a restarted process agrees
        new, prior = claim(fresh, keys, np.arange(10))
        assert not new.any() and sorted(prior.tolist()) == list(range(10))


def test_a_purge_elsewhere_makes_the_index_reload(state):
    rng = np.random.default_rng(5)
    keys = keys_of(rng, 8)
    with Store(state) as serve, Store(state) as admin:
        claim(serve, keys, range(8))
        with admin.batch():  # what `campaign purge` / remove_campaign do to the log
            admin.conn.execute("DELETE FROM seen_log WHERE campaign='c'")
            seen_log.bump_epoch(admin.conn)
        new, _prior = claim(serve, keys[:3], range(3))
        assert new.all()


def test_the_table_grows_and_finds_every_key(state):
    """64 batches of 100 keys: the table doubles past 70 % load (1024 -> 16384 slots) and
    still finds every key with its nonce, and misses keys it never saw."""
    rng = np.random.default_rng(6)
    all_keys = keys_of(rng, 64 * 100)
    with Store(state) as store:
        for i in range(64):
            claim(store, all_keys[i * 100:(i + 1) * 100], np.arange(i * 100, (i + 1) * 100))
        table = store.seen_index.tables[("c", 1)]
        assert table.size == 6400 and table.capacity == 16384
        assert table.size <= table.MAX_LOAD * table.capacity
        new, prior = claim(store, all_keys[::7], np.zeros(all_keys[::7].shape[0]))
        assert not new.any() and prior.tolist() == list(range(0, 6400, 7))
        new, prior = claim(store, keys_of(rng, 50), np.arange(50))
        assert new.all() and (prior == -1).all()


def test_two_groups_then_a_rollback_then_another_writer(state):
    """A transaction claims for two (campaign, phase) groups and rolls back; another process
    then commits: the first process's index holds neither its own uncommitted keys nor misses
    the other's (the index syncs once per transaction, before its own rows exist)."""
    rng = np.random.default_rng(7)
    mine, theirs = keys_of(rng, 5), keys_of(rng, 5)
    with Store(state) as a, Store(state) as b:
        with pytest.raises(RuntimeError):
            with a.batch():
                a.claim_key_array("c", 1, mine, np.arange(5))
                a.claim_key_array("c", 2, mine, np.arange(5))
                raise RuntimeError("COMMIT failed")
        claim(b, theirs, range(10, 15))
        new, prior = claim(a, np.concatenate([mine, theirs]), range(20, 30))
        assert new.tolist() == [True] * 5 + [False] * 5
        assert prior[5:].tolist() == list(range(10, 15))
        assert a.seen_count("c") == 10


def test_a_multi_group_commit_indexes_each_key_once(state):
    rng = np.random.default_rng(8)
    keys = keys_of(rng, 6)
    with Store(state) as store:
        with store.batch():
            store.claim_key_array("c", 1, keys, np.arange(6))
            store.claim_key_array("c", 2, keys, np.arange(6))
        claim(store, keys_of(rng, 1), [0])  # a later transaction syncs again
        for phase in (1, 2):
            assert store.seen_index.tables[("c", phase)].size == (6 if phase == 2 else 7)
