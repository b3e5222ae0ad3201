"""Data streams: infinite, resumable batch sources that objectives are paired with."""

from __future__ import annotations

from typing import Any, Iterator, Protocol, runtime_checkable


@runtime_checkable
class Stream(Protocol):
    """An endless source of batches whose position can be saved and restored exactly.

    ``next(stream)`` returns the next batch (cycling over epochs); ``state_dict()`` returns a
    JSON-serialisable position such that ``load_state_dict`` followed by ``next`` yields the
    same batch the original stream would have yielded next. ``shard(rank, world)`` restricts
    the stream to this rank's part of every global batch (for torchrun/DDP).
    """

    def __next__(self) -> Any: ...

    def __iter__(self) -> Iterator[Any]: ...

    def state_dict(self) -> dict[str, Any]: ...

    def load_state_dict(self, state: dict[str, Any]) -> None: ...

    def shard(self, rank: int, world: int) -> None: ...
