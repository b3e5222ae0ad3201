"""Length-bucketed batches of GDAN's CollatedStream (genfeat.data.gdan): every record once per epoch, batches
of similar length, exact resume, and the plain stream unchanged without buckets."""

import json

import pytest
import torch

from genfeat.data.gdan import CollatedStream
from genfeat.errors import ConfigError

LENGTHS = [(7 * i) % 23 + 1 for i in range(50)]          # 50 records, lengths 1..23 in a scrambled order


def _stream(bucket, seed=3, batch_size=4):
    return CollatedStream(list(range(50)), list, batch_size, seed=seed, length=LENGTHS.__getitem__, bucket=bucket)


def test_each_epoch_holds_every_record_but_a_short_remainder_and_batches_are_of_similar_length():
    stream = _stream(bucket=5)
    # pools of 20 records: 20 + 20 + 10 -> 5 + 5 + 2 full batches of 4 (2 records left over) per epoch
    epoch = [next(stream) for _ in range(12)]
    seen = [i for batch in epoch for i in batch]
    assert len(seen) == len(set(seen)) == 48 and all(len(b) == 4 for b in epoch)
    spread = sum(max(LENGTHS[i] for i in b) - min(LENGTHS[i] for i in b) for b in epoch) / len(epoch)
    plain = CollatedStream(list(range(50)), list, 4, seed=3)
    plain_spread = sum(max(LENGTHS[i] for i in b) - min(LENGTHS[i] for i in b) for b in (next(plain) for _ in range(12))) / 12
    assert spread < 0.5 * plain_spread, (spread, plain_spread)
    # pools come in the order of the plain stream's epoch permutation; the next epoch reshuffles
    second = [i for _ in range(12) for i in next(stream)]
    assert len(set(second)) == 48 and second != seen


@pytest.mark.parametrize("stop", [0, 3, 5, 11, 13])
def test_bucketed_stream_resumes_exactly(stop):
    stream = _stream(bucket=5)
    for _ in range(stop):
        next(stream)
    state = json.loads(json.dumps(stream.state_dict()))
    expected = [next(stream) for _ in range(15)]
    again = _stream(bucket=5)
    again.load_state_dict(state)
    assert [next(again) for _ in range(15)] == expected


def test_bucket_one_or_no_length_is_the_plain_stream_and_shards_split_each_batch():
    plain = [next(s) for s in [CollatedStream(list(range(50)), list, 4, seed=3)] for _ in range(20)]
    for stream in (_stream(bucket=1), CollatedStream(list(range(50)), list, 4, seed=3, bucket=5)):
        assert [next(stream) for _ in range(20)] == plain
    whole, halves = _stream(bucket=5), [_stream(bucket=5), _stream(bucket=5)]
    for rank, s in enumerate(halves):
        s.shard(rank, 2)
    for _ in range(6):
        assert next(halves[0]) + next(halves[1]) == next(whole)
    with pytest.raises(ConfigError, match="not divisible"):
        _stream(bucket=5).shard(0, 3)
    with pytest.raises(ValueError, match="bucket"):
        _stream(bucket=0)
