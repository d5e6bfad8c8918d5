"""The cycle assembles, analyses and writes one chunk of namespaces at a time: a chunk's statuses are
written before the next chunk is assembled, and a chunk that cannot be assembled loses only itself."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from itertools import groupby

from tests.unit.fake_source import FakeSource, plain_window
from tests.unit.operator.test_cycle_scaling import ListingKube
from tests.unit.operator.test_cycle_windows import NOW, cluster, memo_for, source_over

from gpu_rightsizer.adapters.source import EVERYWHERE, ExtraOwners, Scope, WindowRead, scoped
from gpu_rightsizer.model.observation import WorkloadWindow
from gpu_rightsizer.recommender import cycle


@dataclass
class ChunkedSource(FakeSource):
    """A FakeSource that hands its windows over one namespace at a time, noting for each chunk how
    many statuses had been written when it was assembled."""

    kube: ListingKube | None = None
    written_before: list[int] = field(default_factory=list)
    broken: str | None = None

    def read_window_chunks(
        self,
        window_seconds: float,
        at: datetime,
        *,
        scope: Scope = EVERYWHERE,
        owners: ExtraOwners | None = None,
    ) -> WindowRead:
        start = at - timedelta(seconds=window_seconds)
        windows = sorted(
            (plain_window(ref, start, at) for ref in self.workloads()), key=lambda w: w.workload.namespace
        )

        def chunks() -> Iterator[list[WorkloadWindow]]:
            for namespace, group in groupby(windows, key=lambda w: w.workload.namespace):
                assert self.kube is not None
                self.written_before.append(len(self.kube.status_patches))
                if namespace == self.broken:
                    raise ValueError("a garbage answer")
                yield scoped(list(group), scope)

        return WindowRead(windows=[], chunks=chunks())


def chunked(kube: ListingKube, broken: str | None = None) -> ChunkedSource:
    return ChunkedSource(source_over(kube).workloads, kube=kube, broken=broken)


def test_each_chunk_is_written_before_the_next_is_assembled() -> None:
    kube = ListingKube(cluster())
    source = chunked(kube)
    assert cycle.run_cycle(memo_for(kube, source=source), now=NOW) == 4
    # team-a (2 workloads), team-b (1), team-c (1): the statuses of each were in before the next chunk
    assert source.written_before == [0, 2, 3]
    assert len(kube.status_patches) == 4


def test_a_chunk_that_cannot_be_assembled_loses_only_itself_and_those_after() -> None:
    kube = ListingKube(cluster())
    source = chunked(kube, broken="team-b")
    assert cycle.run_cycle(memo_for(kube, source=source), now=NOW) == 2
    assert sorted(key for key, _ in kube.status_patches) == ["team-a/Deployment/one", "team-a/Deployment/two"]
    assert kube.deleted == []
