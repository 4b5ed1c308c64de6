"""Disjoint sets over ``0 .. n - 1`` (union-find with path halving): which items end up joined, transitively. Used
by the corpus's near-duplicate groups."""

from __future__ import annotations


class DisjointSets:
    def __init__(self, n: int) -> None:
        self.parent = list(range(n))

    def find(self, i: int) -> int:
        """The root of ``i``'s set."""
        parent = self.parent
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i

    def union(self, i: int, j: int) -> None:
        """Join ``i``'s set into ``j``'s: ``j``'s root becomes the root of both."""
        self.parent[self.find(i)] = self.find(j)
