"""Files the root daemon keeps in directories it may share with others (the CDI directory):
never written through a symlink, never under a name someone else could have prepared.

- A directory is opened once per operation (``O_DIRECTORY|O_NOFOLLOW``) and checked through
  that descriptor, so what is checked is what is written in: a real directory owned by root
  or by us, not writable by group or others. Its ancestors may be symlinks (``/var/run`` is
  one to ``/run``), but each must be owned by root or us, and one writable by others must be
  sticky (``/tmp``), so nobody else can swap a component of the path.
- A file is written under a random temporary name created ``O_CREAT|O_EXCL|O_NOFOLLOW``
  relative to that descriptor, then renamed over its name: a rename replaces a symlink
  planted at the name, it never follows it.
- Reading refuses a symlink or anything but a regular file (a FIFO would block the read),
  and reads at most a given size; removing unlinks the name itself, never a link's target.

A refusal is an ``UnsafePath`` (an ``OSError`` whose ``strerror`` says what is wrong), so
callers report it as they report any other failed write.
"""

from __future__ import annotations

import contextlib
import errno
import os
import secrets
import stat
from collections.abc import Iterator
from pathlib import Path

from nri_resmgr.errors import ResmgrError

# Write bits for group and others: whoever has them on a directory can plant names in it.
_FOREIGN_WRITE = stat.S_IWGRP | stat.S_IWOTH


class UnsafePath(ResmgrError, OSError):
    """A directory or file the daemon refuses to use; ``strerror`` names the reason."""

    def __init__(self, path: Path | str, reason: str, code: int = errno.EPERM) -> None:
        super().__init__(code, f"{path}: {reason}")


def _owned(st: os.stat_result) -> bool:
    return st.st_uid in (0, os.geteuid())


def _check_directory(fd: int, path: Path) -> None:
    st = os.fstat(fd)
    if not _owned(st):
        raise UnsafePath(path, f"directory is owned by uid {st.st_uid}, not by root or us")
    if st.st_mode & _FOREIGN_WRITE:
        raise UnsafePath(
            path, f"directory is writable by group or others (mode {stat.S_IMODE(st.st_mode):o})"
        )


def _check_ancestors(path: Path) -> None:
    for parent in Path(os.path.realpath(path)).parents:
        st = parent.stat()
        if not _owned(st):
            raise UnsafePath(path, f"parent {parent} is owned by uid {st.st_uid}")
        if st.st_mode & _FOREIGN_WRITE and not st.st_mode & stat.S_ISVTX:
            raise UnsafePath(path, f"parent {parent} is writable by others and not sticky")


def _open_directory(path: Path) -> int:
    try:
        if stat.S_ISLNK(path.lstat().st_mode):
            raise UnsafePath(path, "directory is a symlink; refusing to follow it")
        fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except NotADirectoryError as e:
        raise UnsafePath(path, "exists and is not a directory", errno.ENOTDIR) from e
    try:
        _check_directory(fd, path)
        _check_ancestors(path)
    except BaseException:
        os.close(fd)
        raise
    return fd


@contextlib.contextmanager
def checked_directory(path: Path, *, create: int | None = None) -> Iterator[int | None]:
    """A descriptor of the checked directory ``path``; None when it does not exist and
    ``create`` (the mode to create it with) is not given."""
    if create is not None:
        path.mkdir(mode=create, parents=True, exist_ok=True)
    try:
        fd = _open_directory(path)
    except FileNotFoundError:
        if create is not None:
            raise
        yield None
        return
    try:
        yield fd
    finally:
        os.close(fd)


def write_file(
    directory: Path, name: str, data: bytes, mode: int, *, durable: bool, dir_mode: int = 0o700
) -> None:
    """``directory/name`` holds ``data`` or what it held before, whatever fails when;
    ``durable``: the data reaches the disk before the rename (not needed on tmpfs)."""
    with checked_directory(directory, create=dir_mode) as dfd:
        # No .json suffix on the temporary name: CDI scanners read only .json/.yaml files.
        tmp = f".{name}.{secrets.token_hex(8)}.tmp"
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
        fd = os.open(tmp, flags, mode, dir_fd=dfd)
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(data)
                if durable:
                    f.flush()
                    os.fsync(f.fileno())
            os.rename(tmp, name, src_dir_fd=dfd, dst_dir_fd=dfd)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(tmp, dir_fd=dfd)
            raise


def read_file(directory: Path, name: str, limit: int) -> bytes | None:
    """The content of ``directory/name`` (None when it or the directory does not exist);
    a symlink, a file that is not a regular file, or one over ``limit`` bytes is refused."""
    with checked_directory(directory) as dfd:
        if dfd is None:
            return None
        flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
        try:
            fd = os.open(name, flags, dir_fd=dfd)
        except FileNotFoundError:
            return None
        except OSError as e:
            if e.errno == errno.ELOOP:
                raise UnsafePath(directory / name, "is a symlink; refusing to follow it") from e
            raise
        with os.fdopen(fd, "rb") as f:
            if not stat.S_ISREG(os.fstat(f.fileno()).st_mode):
                raise UnsafePath(directory / name, "is not a regular file")
            data = f.read(limit + 1)
        if len(data) > limit:
            raise UnsafePath(directory / name, f"is larger than {limit} bytes", errno.EFBIG)
        return data


def remove_file(directory: Path, name: str) -> None:
    """Unlink ``directory/name`` (a symlink there is removed, not followed); absent is fine."""
    with checked_directory(directory) as dfd:
        if dfd is not None:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(name, dir_fd=dfd)


def remove_matching(directory: Path, prefix: str, suffix: str) -> list[str]:
    """Unlink every name in ``directory`` that starts with ``prefix`` and ends with
    ``suffix`` (as ``remove_file``); returns the names removed."""
    removed: list[str] = []
    with checked_directory(directory) as dfd:
        if dfd is None:
            return removed
        for name in os.listdir(dfd):
            if name.startswith(prefix) and name.endswith(suffix):
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(name, dir_fd=dfd)
                    removed.append(name)
    return removed


def is_regular_file(directory: Path, name: str) -> bool:
    with contextlib.suppress(OSError), checked_directory(directory) as dfd:
        if dfd is not None:
            return stat.S_ISREG(os.stat(name, dir_fd=dfd, follow_symlinks=False).st_mode)
    return False


__all__ = ["UnsafePath", "checked_directory", "is_regular_file", "read_file", "remove_file",
           "remove_matching", "write_file"]  # fmt: skip
