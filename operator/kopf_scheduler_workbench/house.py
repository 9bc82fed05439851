"""The house drawn from the code's imports: rooms, floors, arrows, and any arrow back up or circle.

A room is a direct child of ``kopf_scheduler`` (a subpackage or a module) or of
``kopf_scheduler_workbench``; an arrow is "some module of room A imports some module of room B".
Floors come from the arrows alone (a room's floor is one above the highest room it imports), so
the drawing cannot flatter the code: a circle has no floors and is reported as such, and an arrow
is "back up" when it runs against the order the ``The house`` and ``Engine layers`` contracts of
``pyproject.toml`` declare. ``docs/design.md`` holds the drawing this prints;
``tests/unit/test_house.py`` keeps the two the same and asks for no circle and no arrow back up.

    python -m kopf_scheduler_workbench.house            # the drawing
    python -m kopf_scheduler_workbench.house --arrows   # and every arrow

Imports under ``if TYPE_CHECKING:`` are annotations and are left out, as lint-imports leaves them out;
``--type-checking`` counts them too.
"""

from __future__ import annotations

import argparse
import sys
import tomllib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import grimp

__all__ = ["House", "draw", "survey"]

PACKAGES = ("kopf_scheduler", "kopf_scheduler_workbench")
_PYPROJECT = Path(__file__).resolve().parents[2] / "pyproject.toml"
_LAYER_CONTRACTS = ("The house", "Engine layers")
_LAZY = frozenset({"kopf_scheduler.cli", "kopf_scheduler.__main__"})


@dataclass(frozen=True)
class House:
    rooms: tuple[str, ...]
    arrows: Mapping[str, frozenset[str]]  # room -> the rooms it imports
    floors: Mapping[str, int]  # room -> floor (0: imports no other room; a circle's rooms share one)
    circles: tuple[tuple[str, ...], ...]
    back_up: tuple[tuple[str, str], ...]  # (importer, imported) against the declared layers

    @property
    def arrow_count(self) -> int:
        return sum(len(v) for v in self.arrows.values())


def _room(module: str) -> str:
    parts = module.split(".")
    return ".".join(parts[:2]) if len(parts) > 1 else parts[0]


def _declared_rank(pyproject: Path) -> dict[str, tuple[int, int]]:
    """Room -> (contract, layer from the bottom) from the layers contracts; a lower rank is lower."""
    contracts = tomllib.loads(pyproject.read_text())["tool"]["importlinter"]["contracts"]
    rank: dict[str, tuple[int, int]] = {}
    for c_index, contract in enumerate(c for c in contracts if c["name"].startswith(_LAYER_CONTRACTS)):
        layers = contract["layers"]
        for height, layer in enumerate(reversed(layers)):
            for name in layer.replace("|", ":").split(":"):
                name = name.strip().strip("()")
                if name:
                    rank.setdefault(name, (-c_index, height))
    return rank


def _rank_of(room: str, rank: Mapping[str, tuple[int, int]]) -> tuple[int, int] | None:
    parts = room.split(".")
    for i in range(len(parts), 0, -1):
        found = rank.get(".".join(parts[:i]))
        if found is not None:
            return found
    return None


def _strongly_connected(arrows: Mapping[str, frozenset[str]]) -> list[list[str]]:
    """Tarjan's components (iterative), largest first; singletons only where a room imports itself."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    on_stack: set[str] = set()
    stack: list[str] = []
    out: list[list[str]] = []
    counter = 0
    for root in sorted(arrows):
        if root in index:
            continue
        work: list[tuple[str, list[str]]] = [(root, sorted(arrows[root]))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            node, todo = work[-1]
            if todo:
                nxt = todo.pop()
                if nxt not in index:
                    index[nxt] = low[nxt] = counter
                    counter += 1
                    stack.append(nxt)
                    on_stack.add(nxt)
                    work.append((nxt, sorted(arrows.get(nxt, ()))))
                elif nxt in on_stack:
                    low[node] = min(low[node], index[nxt])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    out.append(sorted(component))
    return sorted(out, key=len, reverse=True)


def survey(
    type_checking: bool = False, pyproject: Path = _PYPROJECT, packages: Sequence[str] = PACKAGES
) -> House:
    graph = grimp.build_graph(*packages, exclude_type_checking_imports=not type_checking, cache_dir=None)
    rooms = sorted({_room(m) for m in graph.modules if "." in m})
    arrows: dict[str, set[str]] = {room: set() for room in rooms}
    for module in graph.modules:
        if "." not in module:
            continue
        src = _room(module)
        for imported in graph.find_modules_directly_imported_by(module):
            dst = _room(imported)
            if dst != src and dst in arrows:
                arrows[src].add(dst)
    frozen = {room: frozenset(dsts) for room, dsts in arrows.items()}
    circles = tuple(tuple(c) for c in _strongly_connected(frozen))
    # Floors on the condensation: the rooms of a circle share one floor (and are reported).
    group = {room: room for room in rooms}
    for circle in circles:
        for room in circle:
            group[room] = circle[0]
    below: dict[str, set[str]] = {}
    for room in rooms:
        below.setdefault(group[room], set()).update(group[d] for d in frozen[room] if group[d] != group[room])
    group_floor: dict[str, int] = {}

    def floor(g: str) -> int:
        if g not in group_floor:
            group_floor[g] = 1 + max((floor(d) for d in below[g]), default=-1)
        return group_floor[g]

    floors = {room: floor(group[room]) for room in rooms}
    rank = _declared_rank(pyproject)
    back_up = []
    for src in rooms:
        for dst in sorted(frozen[src]):
            a, b = _rank_of(src, rank), _rank_of(dst, rank)
            if a is not None and b is not None and a[0] == b[0] and a[1] < b[1]:
                back_up.append((src, dst))
    return House(tuple(rooms), frozen, floors, circles, tuple(back_up))


def _short(room: str) -> str:
    return room.replace("kopf_scheduler_workbench.", "workbench.").replace("kopf_scheduler.", "")


def draw(house: House, with_arrows: bool = False) -> str:
    lines = []
    top = max(house.floors.values(), default=-1)
    circled = {r for c in house.circles for r in c}
    # The command line imports each command's module by name when it is chosen (cli.py), which no
    # import graph shows: it stands above every floor.
    lines.append("command line: " + ", ".join(_short(r) for r in house.rooms if r in _LAZY))
    for level in range(top, -1, -1):
        here = sorted(
            _short(r) + ("*" if r in circled else "")
            for r, f in house.floors.items()
            if f == level and r not in _LAZY
        )
        lines.append(f"floor {level:>2}: {', '.join(here)}")
    for circle in house.circles:
        lines.append(f"circle (*): {' <-> '.join(_short(r) for r in circle)}")
    floors = len(set(house.floors.values()))
    lines.append(
        f"{len(house.rooms)} rooms, {floors} floors, {house.arrow_count} arrows, "
        f"{len(house.back_up)} running back up, {len(house.circles)} circles"
    )
    for src, dst in house.back_up:
        lines.append(f"back up: {_short(src)} -> {_short(dst)}")
    if with_arrows:
        for room in house.rooms:
            if house.arrows[room]:
                lines.append(f"{_short(room)} -> {', '.join(sorted(_short(d) for d in house.arrows[room]))}")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m kopf_scheduler_workbench.house", description=__doc__)
    parser.add_argument("--arrows", action="store_true", help="list every arrow too")
    parser.add_argument("--type-checking", action="store_true", help="count `if TYPE_CHECKING:` imports")
    args = parser.parse_args(argv)
    house = survey(type_checking=args.type_checking)
    print(draw(house, with_arrows=args.arrows))
    return 1 if house.circles or house.back_up else 0


if __name__ == "__main__":
    sys.exit(main())
