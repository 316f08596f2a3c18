"""Finished pieces of a long run, one JSON file each: what a rerun reads back.

Guarantee: a piece is computed once per configuration. :meth:`Pieces.get`
reads a stored piece back when it was written with the same configuration,
and refuses one written with another (:class:`ConfigurationError`, naming the
file and the fields that differ): a piece can cost a quarter of an hour, so it
is never dropped or overwritten silently. Every file is written atomically, so
a file found is a complete piece.

The workflow runner (:mod:`stanflow.workflows`) counts the pieces of the
stores a run opened (:func:`opened_stores`) to say what an interrupted run
kept.
"""

from __future__ import annotations

import contextlib
import json
import shutil
import sys
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

from stanflow.atomic import write_json

_local = threading.local()
"""Per thread, the open :func:`opened_stores` blocks (``blocks``: innermost last)."""

RESERVED = ("config", "seconds")
"""Keys of a record that are the store's: a computed piece may not return them."""


class Stopped(RuntimeError):
    """Raised by :meth:`Pieces.get` once the run is stopping."""


class ConfigurationError(ValueError):
    """A stored piece was written with another configuration than the run's."""


class Pieces:
    """Finished pieces, one JSON file each under ``folder``.

    A piece may also keep a partial state in :meth:`scratch` while it runs.
    One file per piece, so that threads write their pieces concurrently. Once
    :attr:`stop` is set, no new piece starts.

    Parameters
    ----------
    folder : pathlib.Path
        Where the pieces live (created at the first piece). A piece ``"a/b"``
        is the file ``folder/a/b.json``.
    """

    def __init__(self, folder: Path) -> None:
        self.folder = Path(folder)
        self.stop = threading.Event()
        self._abandoned = threading.Event()
        for block in getattr(_local, "blocks", []):
            block[self.folder] = self

    def get(self, name: str, config: Mapping[str, Any], compute: Callable[[], Mapping]) -> dict:
        """The piece ``name``: read back, or computed (its wall ``seconds`` added) and written.

        Raises
        ------
        ConfigurationError
            If the stored piece was written with another ``config``; the
            message names the file and every field that differs.
        Stopped
            If the piece is not stored and :attr:`stop` is set, or if the run
            abandoned it while it was computed (:meth:`abandon`).
        ValueError
            If ``compute`` returns one of the store's keys (:data:`RESERVED`).
        """
        path = self.path(name)
        config = json.loads(json.dumps(config))
        record = self._stored(name, config)
        if record is not None:
            shutil.rmtree(self.scratch(name), ignore_errors=True)  # a crash's leftover
            return record
        if self.stop.is_set():
            raise Stopped(f"not started: {name}")
        start = time.perf_counter()
        computed = dict(compute())
        taken = [key for key in RESERVED if key in computed]
        if taken:
            raise ValueError(f"piece {name!r}: the keys {taken} are the store's; rename them")
        if self._abandoned.is_set():
            raise Stopped(f"abandoned: {name}")
        # seconds: of the run that finished the piece (a resumed piece's earlier runs not counted)
        record = {"config": config} | computed | {"seconds": time.perf_counter() - start}
        path.parent.mkdir(parents=True, exist_ok=True)
        write_json(path, record)
        shutil.rmtree(self.scratch(name), ignore_errors=True)
        print(f"done in {record['seconds']:.0f} s: {path}", file=sys.stderr, flush=True)
        return json.loads(path.read_text())

    def check(self, name: str, config: Mapping[str, Any]) -> None:
        """Raise :class:`ConfigurationError` if the piece ``name`` is stored with another ``config``."""
        self._stored(name, json.loads(json.dumps(config)))

    def abandon(self) -> None:
        """Keep nothing more: pieces being computed now are not written when they end."""
        self.stop.set()
        self._abandoned.set()

    def _stored(self, name: str, config: Any) -> dict | None:
        """The stored record of ``name``, if any, checked against ``config``."""
        path = self.path(name)
        if not path.is_file():
            return None
        record = json.loads(path.read_text())
        stored = record.get("config")
        if stored != config:
            raise ConfigurationError(
                f"{path} was computed with another configuration "
                f"({differences(stored, config)}): choose another --out or remove the file"
            )
        return record

    def path(self, name: str) -> Path:
        """The file of the piece ``name``."""
        return self.folder / f"{name}.json"

    def finished(self) -> int:
        """How many pieces the folder holds now (each file is complete: written atomically)."""
        files = self.folder.rglob("*.json")
        return sum(
            not any(part.endswith(".partial") for part in f.relative_to(self.folder).parent.parts)
            for f in files
        )

    def scratch(self, name: str) -> Path:
        """The folder where the piece ``name`` may keep its partial state (not made here).

        For a piece that checkpoints itself; :meth:`get` removes it once the
        piece is written or read back.
        """
        return self.folder / f"{name}.partial"


@contextlib.contextmanager
def opened_stores() -> Iterator[dict[Path, Pieces]]:
    """The :class:`Pieces` stores this thread opens inside the block (nested blocks too), by folder."""
    stores: dict[Path, Pieces] = {}
    blocks = _local.__dict__.setdefault("blocks", [])
    blocks.append(stores)
    try:
        yield stores
    finally:
        blocks[:] = [block for block in blocks if block is not stores]


def differences(stored: Any, new: Mapping[str, Any]) -> str:
    """The fields where ``stored`` and ``new`` differ, e.g. ``"B: 60 stored, 200 now"``."""
    if not isinstance(stored, Mapping):
        return f"stored {stored!r}, now {dict(new)!r}"
    before, after = _flat(stored), _flat(new)
    fields = sorted(set(before) | set(after))
    missing = object()
    parts = [
        f"{field}: {_shown(before.get(field, missing), missing)} stored, "
        f"{_shown(after.get(field, missing), missing)} now"
        for field in fields
        if before.get(field, missing) != after.get(field, missing)
    ]
    return "; ".join(parts)


def _flat(value: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    """``{"a": {"b": 1}}`` as ``{"a.b": 1}``."""
    flat: dict[str, Any] = {}
    for key, item in value.items():
        name = f"{prefix}{key}"
        if isinstance(item, Mapping) and item:
            flat |= _flat(item, f"{name}.")
        else:
            flat[name] = item
    return flat


def _shown(value: Any, missing: object) -> str:
    """A field's value for a message; ``absent`` for a field one side lacks."""
    return "absent" if value is missing else repr(value)
