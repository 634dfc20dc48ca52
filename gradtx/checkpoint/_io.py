"""Checkpoint files: atomic, verified streaming writes and checked streaming reads.

The layout, the header's validation and the checksums are in `_format.py`. Writes go to a
temporary file in the same folder; every byte is accounted for (short writes are continued, the
file size is checked before the rename, and a failing write raises `OSError` with the system's
reason, e.g. `No space left on device`); the file is fsynced and renamed over the target
(`os.replace`), so a crash or a full disk at any moment leaves either the old checkpoint or the
new one at the path. Reads open only regular files (never blocking on a FIFO), check the header
against what the caller expects before allocating anything and verify every tensor's checksum
before returning.

Tensors are written straight from their array buffers and read in chunks straight into 64-byte
aligned buffers (which JAX's CPU backend adopts without a copy); neither direction holds more
than one extra tensor in memory. Checksums are computed inline: a helper thread overlapping them
with the I/O measured slower on the 2-core benchmark machine (0.69x vs 0.88x of `numpy.load`).
"""

from __future__ import annotations

import contextlib
import errno
import math
import os
import secrets
import socket
import stat
import struct
from collections.abc import Callable, Iterable, Iterator
from typing import Any

import numpy as np

from ._format import (
    FORMAT,
    SUM_PREFIX,
    VERSION,
    CheckpointError,
    Entry,
    bad,
    dtype_code,
    header_bytes,
    parse_header,
    sum64,
    sum_text,
)

__all__ = [
    "FORMAT",
    "VERSION",
    "CheckpointError",
    "Entry",
    "check_path",
    "open_regular",
    "read_header",
    "read_tensors",
    "remove_stale_temps",
    "temp_path",
    "write_file",
]

CHUNK = 1 << 23  # 8 MiB read chunks
_MAX_HEADER = 1 << 30
_DIRECT_WRITE = 1 << 20
_ALIGN = 64
_TMP_TAG = ".tmp-"


def _as_bytes(arr: np.ndarray) -> memoryview:
    """The raw little-endian bytes of `arr` (no copy when it is contiguous and native)."""
    if arr.dtype.byteorder == ">":
        arr = arr.astype(arr.dtype.newbyteorder("<"))
    arr = np.ascontiguousarray(arr).reshape(-1)
    return memoryview(arr.view(np.uint8).data)


def _chunks(view: memoryview) -> Iterator[memoryview]:
    for start in range(0, len(view), CHUNK):
        yield view[start : start + CHUNK]


def _aligned_empty(shape: tuple[int, ...], dtype: np.dtype) -> np.ndarray:
    """An uninitialised array whose data is 64-byte aligned: JAX's CPU backend then adopts it
    without a copy (`jax.device_put`), so a loaded leaf is never held twice."""
    nbytes = math.prod(shape) * dtype.itemsize
    raw = np.empty(nbytes + _ALIGN, np.uint8)
    start = -raw.ctypes.data % _ALIGN
    return raw[start : start + nbytes].view(dtype).reshape(shape)


def temp_path(path: str) -> str:
    """A fresh temporary name next to `path`: hidden, and never ending like a checkpoint."""
    folder, name = os.path.split(path)
    tag = f"{socket.gethostname()}-{os.getpid()}-{secrets.token_hex(4)}"
    return os.path.join(folder, f".{name}{_TMP_TAG}{tag}")


def remove_stale_temps(path: str) -> list[str]:
    """Delete temporaries of earlier saves of `path` on this host whose process has died (a save
    killed before its rename); returns the removed paths."""
    folder, name = os.path.split(path)
    prefix = f".{name}{_TMP_TAG}{socket.gethostname()}-"
    removed: list[str] = []
    try:
        names = os.listdir(folder or ".")
    except FileNotFoundError:
        return removed
    for other in names:
        if not other.startswith(prefix):
            continue
        pid_text = other[len(prefix) :].split("-", 1)[0]
        if not pid_text.isdigit() or int(pid_text) == os.getpid():
            continue
        try:
            os.kill(int(pid_text), 0)
            continue  # still running: its save is in progress
        except ProcessLookupError:
            pass
        except PermissionError:
            continue  # alive, another user's
        with contextlib.suppress(FileNotFoundError):  # another process removed it first
            os.remove(os.path.join(folder, other))
            removed.append(os.path.join(folder, other))
    return removed


def _write_loop(fd: int, view: memoryview) -> None:
    """`os.write` until all of `view` is written: a short write is continued, and the write that
    cannot continue raises the system's error (ENOSPC, EFBIG, EIO, ...)."""
    while len(view):
        n = os.write(fd, view)
        if n <= 0:
            raise OSError(errno.EIO, f"write() wrote {n} bytes of {len(view)}")
        view = view[n:]


def _write_all(f: Any, view: memoryview) -> None:
    """Append all of `view` to the raw file `f` (at its end), or raise the system's error.

    Large buffers go through NumPy's own writer (the one `numpy.save` uses): on the 2-core
    benchmark machine it ran ~2x faster than `os.write` of the same 64 MB buffer. It cannot be
    trusted with errors (it drops the one of its final, buffered short write, and reports others
    without the reason), so the file size says how much it wrote, and `os.write` continues from
    there: it completes the buffer or raises the error with its reason."""
    fd = f.fileno()
    done = 0
    if len(view) >= _DIRECT_WRITE:
        begin = os.lseek(fd, 0, os.SEEK_CUR)
        if begin == os.fstat(fd).st_size:  # appending: the size tells what was written
            with contextlib.suppress(OSError):  # not lost: the write below raises it again
                np.frombuffer(view, np.uint8).tofile(f)
            done = min(max(os.fstat(fd).st_size - begin, 0), len(view))
            os.lseek(fd, begin + done, os.SEEK_SET)
    _write_loop(fd, view[done:])


def _save_error(path: str, error: OSError) -> OSError:
    reason = error.strerror or str(error)
    message = (
        f"save: writing {path!r} failed: {reason} (the file at that path, if any, is unchanged "
        "and the temporary file was removed)"
    )
    return OSError(error.errno, message) if error.errno is not None else OSError(message)


def _create_error(path: str, error: OSError) -> OSError:
    """The error of creating the temporary file, in terms of `path` and its folder (the
    temporary file's hidden name means nothing to the caller)."""
    folder = os.path.dirname(path) or "."
    if not os.path.isdir(folder):
        what = "does not exist" if not os.path.exists(folder) else "is not a folder"
        reason = f"the folder {folder!r} {what}; create it first"
    else:
        reason = f"cannot create a file in the folder {folder!r}: {error.strerror or error}"
    message = f"save: writing {path!r} failed: {reason}"
    return OSError(error.errno, message) if error.errno is not None else OSError(message)


def write_file(
    path: str,
    items: list[tuple[str, tuple[int, ...], np.dtype]],
    fetch: Callable[[int], np.ndarray],
    *,
    fsync: bool = True,
    structure: str | None = None,
) -> None:
    """Write a checkpoint atomically: `items` are (key, shape, dtype) in file order and
    `fetch(i)` returns tensor `i` as a NumPy array (called once each, in order). A failed write
    (a full disk) raises `OSError` with the system's reason and leaves `path` untouched."""
    entries, offset = [], 0
    for key, shape, dtype in items:
        nbytes = math.prod(shape) * dtype.itemsize
        entries.append((key, dtype_code("save", key, dtype), shape, offset, offset + nbytes))
        offset += nbytes
    header = header_bytes(entries, structure)
    total = 8 + len(header) + offset
    folder = os.path.dirname(os.path.abspath(path))
    remove_stale_temps(path)
    tmp = temp_path(path)
    try:
        f = open(tmp, "xb", buffering=0)  # noqa: SIM115 (closed below, before the rename)
    except OSError as e:
        raise _create_error(path, e) from e
    try:
        sums = []
        _write_all(f, memoryview(struct.pack("<Q", len(header)) + header))
        for i, (key, _, shape, begin, end) in enumerate(entries):
            arr = fetch(i)
            if tuple(arr.shape) != tuple(shape) or arr.dtype != items[i][2]:
                raise CheckpointError(
                    f"save: {key!r} changed while saving: expected {items[i][2].name}"
                    f"{list(shape)}, got {arr.dtype.name}{list(arr.shape)}"
                )
            view = _as_bytes(arr)
            assert len(view) == end - begin
            sums.append(sum64(view))
            _write_all(f, view)
            del arr, view
        # The checksums replace their placeholder in the header, in place.
        text = sum_text([key for key, *_ in entries], sums).encode("ascii")
        os.lseek(f.fileno(), 8 + len(SUM_PREFIX), os.SEEK_SET)
        _write_loop(f.fileno(), memoryview(text))
        if fsync:
            os.fsync(f.fileno())
        size = os.fstat(f.fileno()).st_size
        if size != total:
            raise OSError(errno.EIO, f"the file has {size} bytes after writing, not {total}")
        f.close()
        os.replace(tmp, path)
    except BaseException as e:
        with contextlib.suppress(OSError):  # the error being raised is the one to report
            f.close()
        with contextlib.suppress(FileNotFoundError):
            os.remove(tmp)
        if isinstance(e, OSError):
            raise _save_error(path, e) from e
        raise
    if fsync and os.name == "posix":  # make the rename itself durable
        dir_fd = os.open(folder, os.O_RDONLY)
        try:
            os.fsync(dir_fd)
        finally:
            os.close(dir_fd)


def check_path(who: str, path: str) -> None:
    """A `CheckpointError` for a path no file can have (the OS would say 'embedded null byte')."""
    if "\0" in path:
        raise CheckpointError(
            f"{who}: a NUL byte ('\\x00') is in the path {path!r}; no file name can hold one"
        )


def _file_kind(mode: int) -> str:
    kinds = [
        (stat.S_ISDIR, "a directory"),
        (stat.S_ISFIFO, "a FIFO"),
        (stat.S_ISCHR, "a character device"),
        (stat.S_ISBLK, "a block device"),
        (stat.S_ISSOCK, "a socket"),
    ]
    return next((name for test, name in kinds if test(mode)), f"mode {mode:o}")


def open_regular(path: str) -> Any:
    """`path` opened for unbuffered binary reading, if it is a regular file: a FIFO, a device or
    a directory is a `CheckpointError` (opened without blocking, then checked: no race)."""
    flags = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_BINARY", 0)
    fd = os.open(path, flags)
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            raise bad(path, f"it is not a regular file ({_file_kind(mode)})")
        if flags & getattr(os, "O_NONBLOCK", 0):
            os.set_blocking(fd, True)
        return os.fdopen(fd, "rb", buffering=0)
    except BaseException:
        os.close(fd)
        raise


def _read_exact(f: Any, n: int) -> bytes:
    out = bytearray(n)
    view, got = memoryview(out), 0
    while got < n:
        k = f.readinto(view[got:])
        if not k:
            break
        got += k
    return bytes(out[:got])


def read_header(f: Any, path: str) -> tuple[list[Entry], int, str | None]:
    """The tensors listed in an open file's header (in file order), where its data section
    starts and the recorded state structure (or None); checks the format, the layout and that
    the file is complete (a truncated file fails here)."""
    size = os.fstat(f.fileno()).st_size
    head = _read_exact(f, 8)
    if len(head) < 8:
        raise bad(path, f"the file has {size} bytes, too short for a header (truncated?)")
    (n,) = struct.unpack("<Q", head)
    if n > min(size - 8, _MAX_HEADER):
        raise bad(path, f"the header length field says {n} bytes but the file has {size}")
    raw = _read_exact(f, n)
    if len(raw) < n:
        raise bad(path, f"the header ends early at byte {8 + len(raw)} (the file was truncated)")
    entries, data_size, structure = parse_header(raw, path)
    start = 8 + n
    if size != start + data_size:
        raise bad(
            path,
            f"the header describes {start + data_size} bytes but the file has {size} "
            + ("(truncated: an interrupted copy?)" if size < start + data_size else ""),
        )
    return entries, start, structure


def read_tensors(
    f: Any, path: str, entries: Iterable[Entry], start: int
) -> Iterator[tuple[Entry, np.ndarray]]:
    """Each entry's array, read straight into a fresh buffer and checked against its checksum."""
    position = -1
    for entry in entries:
        arr = _aligned_empty(entry.shape, entry.dtype.newbyteorder("<"))
        view = memoryview(arr.reshape(-1).view(np.uint8).data)
        if position != start + entry.begin:
            f.seek(start + entry.begin)
        checksum = 0
        for chunk in _chunks(view):
            got = 0
            while got < len(chunk):
                n = f.readinto(chunk[got:])
                if not n:
                    raise bad(path, f"{entry.key!r} ends early (the file was truncated)")
                got += n
            checksum = (checksum + sum64(chunk)) % (1 << 64)
        position = start + entry.end
        found = entry.expected(checksum)
        if found != entry.checksum:
            where = " or not stored under this name" if entry.keyed else ""
            raise bad(
                path,
                f"the data of {entry.key!r} is corrupt{where} (checksum {found:016x}, the "
                f"header says {entry.checksum:016x})",
            )
        if not arr.dtype.isnative:
            arr = arr.astype(arr.dtype.newbyteorder("="))
        del view
        yield entry, arr
        del arr  # before the next buffer is allocated: at most one tensor in flight
