"""Name -> object registries, so that methods, datasets and evaluation suites are chosen by name."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Generic, TypeVar

from probcl.errors import UnknownNameError

T = TypeVar("T")


class Registry(Generic[T]):
    """A named collection of objects with helpful errors for unknown names.

    >>> METHODS = Registry("method")
    >>> @METHODS.register("simclr")
    ... class SimCLR: ...
    """

    def __init__(self, kind: str) -> None:
        self.kind = kind
        self._items: dict[str, T] = {}

    def register(self, name: str) -> Callable[[T], T]:
        def decorator(obj: T) -> T:
            if name in self._items:
                raise ValueError(f"{self.kind} {name!r} is registered twice")
            self._items[name] = obj
            return obj

        return decorator

    def unregister(self, name: str) -> None:
        """Remove ``name`` (for plug-ins and tests that register temporarily)."""
        self.get(name)
        del self._items[name]

    def get(self, name: str) -> T:
        if name not in self._items:
            raise UnknownNameError(f"unknown {self.kind} {name!r}; valid choices: {', '.join(sorted(self._items))}")
        return self._items[name]

    def names(self) -> list[str]:
        return sorted(self._items)

    def __contains__(self, name: str) -> bool:
        return name in self._items

    def __iter__(self) -> Iterator[str]:
        return iter(self.names())
