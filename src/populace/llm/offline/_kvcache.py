"""The simulated engine's KV cache: one pool of blocks for running sequences and cached
prefixes, kept the way vLLM V1's block pool keeps it (``vllm/v1/core/block_pool.py``).

It counts blocks; it holds no tensors. A block is in one of three states:

* **held**: by one or more running sequences. A full prompt block is named by its chained
  hash and *shared*: a second sequence with the same prefix takes a reference to it rather
  than a copy. Other blocks (a prompt's last partial block, generated tokens) are private.
* **free and cached**: no running sequence holds it any more, but its hash still finds it, so
  a later prompt with that prefix skips computing it.
* **free and empty**.

Free blocks wait in one queue, least recently freed first. A sequence that needs a block
takes a never-used one if any is left, else the head of the queue: if that block was cached,
its prefix is evicted. So only blocks that no running sequence holds are ever evicted, in
least-recently-used order. A finished sequence frees its blocks last first, as vLLM does, so
that a prompt's tail is evicted before its head.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence


class _Run:
    """A key of the free queue for a run of uncached blocks freed together."""

    __slots__ = ()


class BlockPool:
    """``capacity`` blocks shared by running sequences and the prefix cache (module docs).

    >>> pool = BlockPool(4)
    >>> pool.take(3)
    >>> pool.register(11)  # one of the three holds a full prompt block of hash 11
    True
    >>> pool.release([11], 2); pool.free, pool.cached  # all free, 11 still found
    (4, 1)
    """

    __slots__ = ("_free", "_fresh", "_n_free", "_refs", "capacity", "evicted")

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self.evicted = 0  # cached blocks reused for something else
        self._fresh = capacity  # never used yet: handed out before the queue
        self._n_free = capacity
        # Least recently freed first: a cached block's hash -> 1, a _Run -> its block count.
        self._free: OrderedDict[int | _Run, int] = OrderedDict()
        self._refs: dict[int, int] = {}  # cached block hash -> running sequences holding it

    @property
    def free(self) -> int:
        """Blocks no running sequence holds (cached ones included: they can be evicted)."""
        return self._n_free

    @property
    def cached(self) -> int:
        """Blocks that a prompt's prefix can find, held or free."""
        return len(self._refs)

    def hits(self, hashes: Sequence[int], most: int) -> int:
        """How many of the first ``most`` blocks are cached, counting from the first."""
        found = 0
        refs = self._refs
        for h in hashes[:most]:
            if h not in refs:
                break
            found += 1
        return found

    def idle(self, hashes: Sequence[int]) -> int:
        """How many of these cached blocks no running sequence holds: taking a reference to
        them removes them from the free blocks."""
        refs = self._refs
        return sum(1 for h in hashes if refs[h] == 0)

    def share(self, hashes: Sequence[int]) -> None:
        """Take a reference to each of these cached blocks."""
        refs, free = self._refs, self._free
        for h in hashes:
            if refs[h] == 0:
                del free[h]
                self._n_free -= 1
            refs[h] += 1

    def take(self, n: int) -> None:
        """Allocate ``n`` private blocks: never-used ones first, then the least recently
        freed, evicting a cached prefix when that block held one."""
        if n > self._n_free:
            raise RuntimeError(f"{n} blocks asked, {self._n_free} free")  # a bug of ours
        self._n_free -= n
        fresh = min(n, self._fresh)
        self._fresh -= fresh
        n -= fresh
        free = self._free
        while n:
            key, count = free.popitem(last=False)
            if isinstance(key, _Run):
                if count > n:
                    free[key] = count - n
                    free.move_to_end(key, last=False)
                    return
                n -= count
            else:
                del self._refs[key]
                self.evicted += 1
                n -= 1

    def register(self, h: int) -> bool:
        """Name a just-computed private block by its hash, so that later prompts find it;
        False (it stays private) when a block of that hash is cached already."""
        if h in self._refs:
            return False
        self._refs[h] = 1
        return True

    def release(self, hashes: Sequence[int], private: int) -> None:
        """A sequence lets go of its shared blocks ``hashes`` (in prompt order) and its
        ``private`` blocks: the private ones (its tail) go to the queue first, then the
        shared ones last to first; a shared block still held by another sequence stays."""
        if private:
            self._free[_Run()] = private
            self._n_free += private
        refs, free = self._refs, self._free
        for h in reversed(hashes):
            refs[h] -= 1
            if refs[h] == 0:
                free[h] = 1
                self._n_free += 1
