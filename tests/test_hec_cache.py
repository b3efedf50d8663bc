"""HEC semantics (DistGNN-MB §3.2) against a small sequential reference."""

from __future__ import annotations

import pytest
import torch

from gnnflow.strategies.hec.cache import EmbeddingCache


class ReferenceHEC:
    """The cache written the obvious way: one row at a time, dict of tag -> (emb, stored_at, order)."""

    def __init__(self, capacity: int, life_span: int) -> None:
        self.cs, self.ls = capacity, life_span
        self.lines: dict[int, tuple[torch.Tensor, int, int]] = {}
        self.now = 0
        self.counter = 0

    def advance(self, now: int) -> None:
        self.now = now
        for t in [t for t, (_, s, _) in self.lines.items() if now - s > self.ls]:
            del self.lines[t]

    def store(self, tags, emb) -> None:
        for t, e in zip(tags.tolist(), emb, strict=True):
            order = self.counter
            self.counter += 1
            if self.cs == 0:
                continue
            if t not in self.lines and len(self.lines) >= self.cs:
                oldest = min(self.lines, key=lambda k: self.lines[k][2])
                del self.lines[oldest]
            self.lines[t] = (e.clone(), self.now, order)

    def search(self, tags) -> list[bool]:
        return [t in self.lines and self.now - self.lines[t][1] <= self.ls for t in tags.tolist()]

    def resident(self):
        tags = sorted(self.lines)
        return tags, [self.lines[t][1] for t in tags], [self.lines[t][0] for t in tags]


def _same(cache: EmbeddingCache, ref: ReferenceHEC) -> None:
    tags, stored_at, emb = cache.resident()
    rt, rs, re = ref.resident()
    assert tags.tolist() == rt
    assert stored_at.tolist() == rs
    if rt:
        assert torch.equal(emb, torch.stack(re))


def _row(tags, value: float, dim: int = 3) -> torch.Tensor:
    t = torch.as_tensor(tags, dtype=torch.float32)
    return (t[:, None] + value).expand(-1, dim).contiguous()


def test_tag_lookup_hits_and_misses():
    c = EmbeddingCache(capacity=4, life_span=2, dim=3, tag_universe=100)
    c.store(torch.tensor([7, 42]), _row([7, 42], 0.5))
    lines = c.search(torch.tensor([42, 3, 7, 99, 7]))
    assert (lines >= 0).tolist() == [True, False, True, False, True]
    assert torch.equal(c.load(lines[lines >= 0]), _row([42, 7, 7], 0.5))
    hit, emb = c.lookup(torch.tensor([3, 7]))
    assert hit.tolist() == [False, True] and torch.equal(emb, _row([7], 0.5))
    assert c.stats.searched == 7 and c.stats.hits == 4


def test_expiry_after_life_span():
    c = EmbeddingCache(capacity=4, life_span=2, dim=3, tag_universe=10)
    c.advance(5)
    c.store(torch.tensor([1]), _row([1], 0.0))
    for now, alive in [(5, True), (6, True), (7, True), (8, False), (9, False)]:
        c.advance(now)
        assert bool(c.search(torch.tensor([1]))[0] >= 0) is alive, now
    assert c.stats.purged == 1 and len(c) == 0


def test_expired_line_is_a_miss_even_before_purge():
    c = EmbeddingCache(capacity=2, life_span=0, dim=1, tag_universe=10)
    c.store(torch.tensor([3]), torch.ones(1, 1))
    c.now = 1  # clock moved without purge
    assert c.search(torch.tensor([3])).tolist() == [-1]


def test_store_of_existing_tag_refreshes_it():
    c = EmbeddingCache(capacity=2, life_span=2, dim=3, tag_universe=10)
    c.store(torch.tensor([1, 2]), _row([1, 2], 0.0))
    c.advance(2)
    c.store(torch.tensor([1]), _row([1], 9.0))  # refresh: new data, new age, youngest line
    c.advance(3)  # tag 2 (stored at 0) has age 3 > ls: purged; tag 1 (stored at 2) lives
    assert c.search(torch.tensor([1, 2])).tolist()[1] == -1
    hit, emb = c.lookup(torch.tensor([1]))
    assert hit.item() and torch.equal(emb, _row([1], 9.0))
    assert c.stats.refreshed == 1
    # refreshed line is the youngest: with the cache full, OCF evicts the other one
    c2 = EmbeddingCache(capacity=2, life_span=10, dim=3, tag_universe=10)
    c2.store(torch.tensor([1, 2]), _row([1, 2], 0.0))
    c2.store(torch.tensor([1]), _row([1], 1.0))
    c2.store(torch.tensor([3]), _row([3], 2.0))
    assert c2.resident()[0].tolist() == [1, 3]


def test_ocf_replacement_when_full():
    c = EmbeddingCache(capacity=3, life_span=100, dim=2, tag_universe=50)
    for now, tag in enumerate([10, 11, 12]):
        c.advance(now)
        c.store(torch.tensor([tag]), _row([tag], 0.0, 2))
    c.advance(3)
    c.store(torch.tensor([13, 14]), _row([13, 14], 0.0, 2))  # evicts 10 then 11 (oldest first)
    assert c.resident()[0].tolist() == [12, 13, 14]
    assert c.stats.evicted == 2
    # more new tags in one call than lines: the last cs rows survive
    c.store(torch.tensor([20, 21, 22, 23]), _row([20, 21, 22, 23], 0.0, 2))
    assert c.resident()[0].tolist() == [21, 22, 23]
    assert c.stats.dropped == 1


def test_expired_lines_are_replaced_before_live_ones():
    c = EmbeddingCache(capacity=2, life_span=1, dim=1, tag_universe=10)
    c.store(torch.tensor([1]), torch.zeros(1, 1))
    c.now = 1
    c.store(torch.tensor([2]), torch.zeros(1, 1))
    c.now = 2  # tag 1 expired (age 2), tag 2 live (age 1); no purge called
    c.store(torch.tensor([3]), torch.zeros(1, 1))
    assert c.resident()[0].tolist() == [2, 3]
    assert c.stats.purged == 1 and c.stats.evicted == 0


def test_duplicate_tags_in_one_store_keep_last_row():
    c = EmbeddingCache(capacity=4, life_span=2, dim=1, tag_universe=10)
    c.store(torch.tensor([5, 6, 5]), torch.tensor([[1.0], [2.0], [3.0]]))
    _, _, emb = c.resident()
    assert emb.flatten().tolist() == [3.0, 2.0]


def test_zero_capacity_always_misses():
    c = EmbeddingCache(capacity=0, life_span=2, dim=2, tag_universe=10)
    c.store(torch.tensor([1, 2]), torch.ones(2, 2))
    assert c.search(torch.tensor([1, 2])).tolist() == [-1, -1]
    assert c.stats.hit_rate == 0.0


def test_sorted_tag_universe_and_out_of_universe_store():
    halo = torch.tensor([3, 17, 256, 1_000_000_007])
    c = EmbeddingCache(capacity=2, life_span=1, dim=1, tag_universe=halo)
    c.store(torch.tensor([1_000_000_007, 17]), torch.tensor([[1.0], [2.0]]))
    assert (c.search(torch.tensor([17, 18, 1_000_000_007, 3])) >= 0).tolist() == [True, False, True, False]
    with pytest.raises(ValueError, match="outside"):
        c.store(torch.tensor([4]), torch.ones(1, 1))
    with pytest.raises(ValueError, match="sorted"):
        EmbeddingCache(2, 1, 1, torch.tensor([5, 3]))


def test_embeddings_are_stored_detached():
    c = EmbeddingCache(capacity=2, life_span=1, dim=2, tag_universe=4)
    x = torch.ones(1, 2, requires_grad=True)
    c.store(torch.tensor([0]), x * 2)
    _, emb = c.lookup(torch.tensor([0]))
    assert not emb.requires_grad


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("capacity,life_span", [(1, 0), (4, 1), (8, 2), (16, 3), (40, 2)])
def test_random_operation_sequences_match_reference(seed, capacity, life_span):
    g = torch.Generator().manual_seed(seed)
    universe = torch.unique(torch.randint(0, 500, (30,), generator=g))
    c = EmbeddingCache(capacity, life_span, dim=2, tag_universe=universe)
    ref = ReferenceHEC(capacity, life_span)
    for now in range(25):
        c.advance(now)
        ref.advance(now)
        _same(c, ref)
        for _ in range(int(torch.randint(0, 3, (1,), generator=g))):
            n = int(torch.randint(0, 12, (1,), generator=g))
            tags = universe[torch.randint(0, universe.numel(), (n,), generator=g)]
            emb = torch.randn(n, 2, generator=g)
            c.store(tags, emb)
            ref.store(tags, emb)
            _same(c, ref)
        probe = torch.randint(0, 500, (20,), generator=g)
        assert (c.search(probe) >= 0).tolist() == ref.search(probe)


def _random_ops(cache: EmbeddingCache, universe: torch.Tensor, g: torch.Generator, steps: range,
               most: int = 12) -> list:
    """Advance/store (up to ``most`` rows)/search ``cache`` for ``steps``; the searches' lines and rows."""
    seen = []
    for now in steps:
        cache.advance(now)
        n = int(torch.randint(0, most, (1,), generator=g))
        cache.store(universe[torch.randint(0, universe.numel(), (n,), generator=g)], torch.randn(n, 3, generator=g))
        lines = cache.search(universe)
        seen.append((lines.clone(), cache.load(lines[lines >= 0]).clone()))
    return seen


def test_state_dict_round_trip_continues_exactly(tmp_path):
    """A cache restored from its (weights_only) state dict behaves as the original from then on:
    the same hits, the same line numbers (so later stores fill the same free lines), the same rows,
    the same OCF evictions once larger stores fill it."""
    g = torch.Generator().manual_seed(0)
    universe = torch.unique(torch.randint(0, 500, (40,), generator=g))
    cache = EmbeddingCache(24, 4, dim=3, tag_universe=universe)
    _random_ops(cache, universe, g, range(13))
    lines = cache.state_dict()["lines"]
    assert 0 < lines.numel() < int(lines.max()) + 1  # free lines between occupied ones
    torch.save(cache.state_dict(), tmp_path / "hec.pt")
    restored = EmbeddingCache(24, 4, dim=3, tag_universe=universe)
    restored.load_state_dict(torch.load(tmp_path / "hec.pt", weights_only=True))
    g1, g2 = torch.Generator().manual_seed(1), torch.Generator().manual_seed(1)
    for (la, ra), (lb, rb) in zip(_random_ops(cache, universe, g1, range(13, 30), most=30),
                                  _random_ops(restored, universe, g2, range(13, 30), most=30), strict=True):
        assert torch.equal(la, lb) and torch.equal(ra, rb)
    assert cache.stats.evicted > 0


def test_state_dict_of_another_capacity_is_refused():
    from gnnflow.errors import ConfigError

    state = EmbeddingCache(10, 2, dim=3, tag_universe=50).state_dict()
    with pytest.raises(ConfigError, match="capacity 10 != this run's 12"):
        EmbeddingCache(12, 2, dim=3, tag_universe=50).load_state_dict(state)
