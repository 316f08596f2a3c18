"""The one inter-process file lock (stanflow.locks), with real processes and threads.

Independent truth: the kernel's ``flock`` as seen from another process (or
another thread's own file description): who gets the lock, when, and what the
busy side is told.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest

from stanflow.locks import file_lock

REPO = Path(__file__).resolve().parents[1]


class Busy(Exception):
    """Raised by ``refuse``: the lock was busy; the message is the holder's text."""


def refuse(holder: str) -> None:
    raise Busy(holder)


def other_process(script: str, *args: str) -> subprocess.Popen:
    """``script`` in another Python process, with ``stanflow.locks`` importable."""
    environment = {**os.environ, "PYTHONPATH": str(REPO)}
    return subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent(script), *args],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        text=True, env=environment,
    )


def tell(process: subprocess.Popen) -> None:
    """Tell a process running ``HOLD`` to release its lock."""
    process.stdin.write("\n")
    process.stdin.flush()


TRY_ONCE = """
    import sys
    from stanflow.locks import file_lock
    def refuse(holder):
        raise SystemExit(f"busy: {holder!r}")
    with file_lock(sys.argv[1], on_busy=refuse):
        print("locked")
"""

HOLD = """
    import sys
    from stanflow.locks import file_lock
    with file_lock(sys.argv[1], holder=lambda: "the other process\\n",
                   on_busy=lambda holder: print("waiting", flush=True)):
        print("locked", flush=True)
        sys.stdin.readline()  # hold until told
    print("released", flush=True)
"""


def test_a_busy_lock_is_refused_at_once_naming_its_holder(tmp_path):
    path = tmp_path / "x.lock"
    with file_lock(path, holder=lambda: "pid 1 on here\n"):
        assert path.read_text() == "pid 1 on here\n"
        started = time.monotonic()
        refused = other_process(TRY_ONCE, str(path))
        out, err = refused.communicate(timeout=60)
        assert time.monotonic() - started < 10
        assert (refused.returncode, out, err.strip()) == (1, "", "busy: 'pid 1 on here\\n'")
    free = other_process(TRY_ONCE, str(path))
    assert free.communicate(timeout=60) == ("locked\n", "")
    assert path.exists()  # kept for the next holder, without remove


def test_a_waiting_process_is_told_the_holder_then_gets_the_lock_once_released(tmp_path):
    path = tmp_path / "x.lock"
    holder = other_process(HOLD, str(path))
    told: list[str] = []
    try:
        assert holder.stdout.readline() == "locked\n"
        threading.Timer(1.0, tell, (holder,)).start()
        started = time.monotonic()
        with file_lock(path, on_busy=told.append):
            waited = time.monotonic() - started
            assert holder.stdout.readline() == "released\n"  # before this block began
    finally:
        holder.communicate(timeout=60)
    assert told == ["the other process\n"]
    assert waited > 0.5


def test_a_killed_holder_leaves_no_stale_lock(tmp_path):
    path = tmp_path / "x.lock"
    holder = other_process(HOLD, str(path))
    assert holder.stdout.readline() == "locked\n"
    with pytest.raises(Busy, match="the other process"), file_lock(path, on_busy=refuse):
        pass
    holder.send_signal(signal.SIGKILL)
    holder.wait(timeout=60)
    with file_lock(path, on_busy=refuse):  # the kernel dropped the dead holder's lock
        assert path.read_text() == "the other process\n"  # its line stays until a holder writes


def test_a_removed_lock_file_passes_the_lock_on_to_the_file_now_there(tmp_path):
    """The holder removes the file as it ends; the process that waited on it must
    then hold the file the path names, not the removed one."""
    path = tmp_path / "x.lock"
    waiter = None
    try:
        with file_lock(path, holder=lambda: "first\n", remove=True):
            waiter = other_process(HOLD, str(path))
            assert waiter.stdout.readline() == "waiting\n"
        assert waiter.stdout.readline() == "locked\n"
        assert path.read_text() == "the other process\n"
        with pytest.raises(Busy, match="the other process"), file_lock(path, on_busy=refuse):
            pass
    finally:
        if waiter is not None:
            waiter.communicate("\n", timeout=60)
    assert waiter.returncode == 0
    with file_lock(path, on_busy=refuse, remove=True):
        assert path.exists()
    assert not path.exists()


def test_two_threads_of_one_process_exclude_each_other(tmp_path):
    path = tmp_path / "x.lock"
    events: list[str] = []
    first_holds, release = threading.Event(), threading.Event()

    def first() -> None:
        with file_lock(path, holder=lambda: "first thread\n"):
            events.append("first locked")
            first_holds.set()
            release.wait(timeout=60)
            events.append("first releases")

    thread = threading.Thread(target=first)
    thread.start()
    assert first_holds.wait(timeout=60)
    threading.Timer(0.5, release.set).start()
    with file_lock(path, on_busy=lambda holder: events.append(f"second waits for {holder}")):
        events.append("second locked")
    thread.join(timeout=60)
    assert events == [
        "first locked",
        "second waits for first thread\n",
        "first releases",
        "second locked",
    ]


def test_an_error_while_busy_leaves_nothing_held(tmp_path):
    """A refusal raised by ``on_busy`` propagates, and no lock stays taken by it."""
    path = tmp_path / "x.lock"
    holder = other_process(HOLD, str(path))
    try:
        assert holder.stdout.readline() == "locked\n"
        for _ in range(3):
            with pytest.raises(Busy), file_lock(path, on_busy=refuse):
                pass
    finally:
        holder.communicate("\n", timeout=60)
    with file_lock(path, on_busy=refuse):
        free = other_process(TRY_ONCE, str(path))
        assert free.communicate(timeout=60)[1].startswith("busy:")
