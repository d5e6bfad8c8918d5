"""Which recommender owns a workload when several share the cluster (`--shard`/`--total-shards`).

Why by namespace: each shard then reads its own slice from Prometheus with one namespace matcher on
the join that already limits every pod query to GPU pods, and lists, analyses and writes only the
recommendations of its namespaces. The hash is FNV-1a (64 bit), as kube-state-metrics shards with, so
every process (and a person with the docs) computes the same owner without talking to the others.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

_FNV_OFFSET = 0xCBF29CE484222325
_FNV_PRIME = 0x100000001B3
_MASK = (1 << 64) - 1


def fnv1a_64(text: str) -> int:
    """The 64-bit FNV-1a hash of `text`'s UTF-8 bytes (Go's hash/fnv New64a)."""
    value = _FNV_OFFSET
    for byte in text.encode():
        value = ((value ^ byte) * _FNV_PRIME) & _MASK
    return value


def shard_of_namespace(namespace: str, total_shards: int) -> int:
    """The shard that owns every workload of `namespace`."""
    return fnv1a_64(namespace) % total_shards if total_shards > 1 else 0


@dataclass(frozen=True)
class ShardSlice:
    """This process's share of the namespaces."""

    shard: int = 0
    total: int = 1

    @property
    def sharded(self) -> bool:
        return self.total > 1

    def owns(self, namespace: str) -> bool:
        return shard_of_namespace(namespace, self.total) == self.shard

    def owned(self, namespaces: Iterable[str]) -> tuple[str, ...]:
        """The namespaces among `namespaces` this shard owns, sorted and without repeats."""
        return tuple(sorted({namespace for namespace in namespaces if self.owns(namespace)}))

    @property
    def field_manager(self) -> str:
        """The field manager its status writes carry, so managedFields tell which shard wrote a status."""
        return f"gpu-rightsizer-shard-{self.shard}" if self.sharded else "gpu-rightsizer"

    def describe(self) -> str:
        return f"shard {self.shard} of {self.total}" if self.sharded else "unsharded"
