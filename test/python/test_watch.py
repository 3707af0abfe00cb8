"""Issue 26 item 3: the watch events of a new file are E2B's: its agent opens
the file with O_CREATE, chowns it to the user, then writes: CREATE, CHMOD,
WRITE (E2B's own test_watch_directory_changes counts exactly three). A write
by a sandbox process gives what the kernel reports: CREATE, WRITE."""

import time

from e2b import FilesystemEventType


def settled(handle, want=0, quiet=0.5, limit=10.0):
    """Events until at least `want` came and then none for `quiet` seconds."""
    events, last, start = [], time.monotonic(), time.monotonic()
    while time.monotonic() - start < limit:
        new = handle.get_new_events()
        if new:
            events += new
            last = time.monotonic()
        elif len(events) >= want and time.monotonic() - last >= quiet:
            break
        time.sleep(0.05)
    return [(e.type, e.name) for e in events]


def test_new_file_through_files_write(sandbox):
    sandbox.files.make_dir("watched")
    handle = sandbox.files.watch_dir("watched")
    try:
        sandbox.files.write("watched/new.txt", "This file will be watched.")
        assert settled(handle, 3) == [
            (FilesystemEventType.CREATE, "new.txt"),
            (FilesystemEventType.CHMOD, "new.txt"),
            (FilesystemEventType.WRITE, "new.txt"),
        ]
        # An overwrite: E2B chowns the existing file, then truncates and writes.
        sandbox.files.write("watched/new.txt", "This file has been modified.")
        assert settled(handle, 2) == [
            (FilesystemEventType.CHMOD, "new.txt"),
            (FilesystemEventType.WRITE, "new.txt"),
        ]
    finally:
        handle.stop()


def test_e2b_watch_exact_count(sandbox):
    """E2B's test, as it is written: events read right after the write."""
    sandbox.files.make_dir("test_watch_dir")
    handle = sandbox.files.watch_dir("test_watch_dir")
    sandbox.files.write("test_watch_dir/test_watch.txt", "This file will be watched.")
    time.sleep(0.5)
    events = handle.get_new_events()
    assert len(events) == 3, events
    assert [e.type for e in events] == [FilesystemEventType.CREATE, FilesystemEventType.CHMOD, FilesystemEventType.WRITE]
    handle.stop()


def test_new_file_through_a_process(sandbox):
    sandbox.files.make_dir("procwatch")
    handle = sandbox.files.watch_dir("procwatch")
    try:
        sandbox.commands.run("printf hello > procwatch/p.txt")
        assert settled(handle, 2) == [
            (FilesystemEventType.CREATE, "p.txt"),
            (FilesystemEventType.WRITE, "p.txt"),
        ]
    finally:
        handle.stop()
