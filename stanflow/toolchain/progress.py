"""Progress display for the toolchain install, on stderr.

On a terminal the build phase is one status line, redrawn every second with
the elapsed time and the file make is currently producing. Elsewhere (CI logs,
pipes) each produced file is printed on its own line with the elapsed time.
stdout is never used, so ``stanflow toolchain path`` prints only the path.
"""

from __future__ import annotations

import re
import shutil
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TextIO

_OUTPUT = re.compile(r"\s-o\s*(\S+)")


def format_elapsed(seconds: float) -> str:
    """Format a duration as ``1m05s`` (or ``42s`` under a minute)."""
    whole = int(seconds)
    return f"{whole // 60}m{whole % 60:02d}s" if whole >= 60 else f"{whole}s"


def output_of(line: str) -> str | None:
    """Return the ``-o`` target of a compiler/linker command line, if any."""
    match = _OUTPUT.search(line)
    return match.group(1) if match else None


class BuildProgress:
    """Messages and a build status display for one install.

    Parameters
    ----------
    enabled : bool
        If False, nothing is written.
    stream : text stream, optional
        Where to write; defaults to ``sys.stderr``.
    """

    def __init__(self, enabled: bool = True, stream: TextIO | None = None) -> None:
        self.enabled = enabled
        self.stream = stream if stream is not None else sys.stderr
        self._interactive = enabled and self.stream.isatty()
        self._start = time.monotonic()
        self._current = "starting make"
        self._write_lock = threading.Lock()

    def note(self, message: str) -> None:
        """Write one ``[stanflow]`` message line."""
        if self.enabled:
            with self._write_lock:
                print(f"[stanflow] {message}", file=self.stream, flush=True)

    @contextmanager
    def building(self) -> Iterator[None]:
        """Show the build status while the block runs make."""
        self._start = time.monotonic()
        stop = threading.Event()
        ticker = threading.Thread(target=self._tick, args=(stop,), daemon=True)
        if self._interactive:
            ticker.start()
        try:
            yield
        finally:
            if self._interactive:
                stop.set()
                ticker.join()
                with self._write_lock:
                    self.stream.write("\r\x1b[K")
        self.note(f"make ran for {format_elapsed(self.elapsed())}")

    def elapsed(self) -> float:
        """Seconds since the build phase started."""
        return time.monotonic() - self._start

    def make_line(self, line: str) -> None:
        """Take one line of make's output into account."""
        target = output_of(line)
        if target is None:
            return
        self._current = target
        if self.enabled and not self._interactive:
            self.note(f"  {format_elapsed(self.elapsed()):>6}  building {target}")

    def _tick(self, stop: threading.Event) -> None:
        while not stop.wait(1.0):
            width = shutil.get_terminal_size().columns - 1
            status = (
                f"[stanflow] building toolchain "
                f"{format_elapsed(self.elapsed()):>6}  {self._current}"
            )
            with self._write_lock:
                self.stream.write("\r" + status[:width] + "\x1b[K")
                self.stream.flush()
