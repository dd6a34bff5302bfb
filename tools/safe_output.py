"""tools/safe_output.py - the one way the Python tools (nnscaler2plan, torch2plan and its
workers) write an output file.  The rules are verdict's own (common/outfile.h,
docs/guarantees.md):

  - a path that exists and is not a regular file (a FIFO, a device such as /dev/null, a
    directory, a socket) is refused: it is never replaced by a regular file nor written into;
  - a symbolic link is refused, whatever it points to (neither replaced nor written through);
  - a path whose directory does not exist, or an existing file we may not write, is refused;
  - the data goes to a temporary created exclusively (tempfile.mkstemp: O_EXCL, a random
    name, mode 0600) in the target's directory, which then gets the mode (and, when
    permitted, the owner) of the file it replaces, or 0666 minus the umask, and is renamed
    over the target; on any failure the temporary is removed and the target is untouched.

A refusal raises OutputError, whose str() is one line without the path (the caller names
it).  Standard library only; Python 3.
"""
import os
import stat
import tempfile


class OutputError(Exception):
    """An output path that may not be written; str() is one line."""


def _kind(mode):
    for test, name in ((stat.S_ISDIR, "a directory"), (stat.S_ISFIFO, "a FIFO"),
                       (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"),
                       (stat.S_ISSOCK, "a socket"), (stat.S_ISLNK, "a symbolic link")):
        if test(mode):
            return name
    return "not a regular file"


def check(path):
    """Judges `path` without creating anything.  Returns the os.stat_result of an existing
    regular file (its mode is kept), or None for a new file.  Raises OutputError."""
    if not path:
        raise OutputError("expected an output file name, got an empty one")
    if path.endswith("/"):
        raise OutputError("expected a file name, got a directory path")
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        st = None
    except OSError as e:
        raise OutputError("cannot be used as an output: %s" % (e.strerror or e))
    if st is not None:
        if stat.S_ISLNK(st.st_mode):
            raise OutputError("is a symbolic link: refused (neither replaced nor written through; "
                              "give the file it points to)")
        if not stat.S_ISREG(st.st_mode):
            raise OutputError("exists and is %s: refused (only regular files are written)" % _kind(st.st_mode))
        if not os.access(path, os.W_OK):
            raise OutputError("the file is not writable")
    d = os.path.dirname(path) or "."
    if not os.path.isdir(d):
        raise OutputError("cannot create the file: directory '%s' %s"
                          % (d, "is not a directory" if os.path.exists(d) else "does not exist"))
    if not os.access(d, os.W_OK | os.X_OK):
        raise OutputError("cannot create the file: directory '%s' is not writable" % d)
    return st


def _umask():
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError, IndexError):
        pass
    old = os.umask(0o022)  # no /proc: read it the old way (these tools are single-threaded)
    os.umask(old)
    return old


def write_bytes(path, data):
    """Writes `data` (bytes) to `path` under the rules above.  Raises OutputError."""
    st = check(path)
    d = os.path.dirname(path) or "."
    base = os.path.basename(path)[:64]
    try:
        fd, tmp = tempfile.mkstemp(dir=d, prefix="." + base + ".", suffix=".tmp")
    except OSError as e:
        raise OutputError("cannot create a temporary file in '%s': %s" % (d, e.strerror or e))
    try:
        try:
            view = memoryview(data)
            while view:
                n = os.write(fd, view)
                view = view[n:]
            if st is not None:
                try:
                    os.fchown(fd, st.st_uid, st.st_gid)  # only with privilege; else the file is ours
                except OSError:
                    pass
                os.fchmod(fd, stat.S_IMODE(st.st_mode))
            else:
                os.fchmod(fd, 0o666 & ~_umask())
        finally:
            os.close(fd)
        # The target may have changed since check(): judged again right before the rename.
        try:
            now = os.lstat(path)
        except FileNotFoundError:
            now = None
        if now is not None and not stat.S_ISREG(now.st_mode):
            raise OutputError("became %s while it was written: refused" % _kind(now.st_mode))
        os.replace(tmp, path)
    except OutputError:
        _unlink(tmp)
        raise
    except OSError as e:
        _unlink(tmp)
        raise OutputError("write failed: %s" % (e.strerror or e))
    except BaseException:
        _unlink(tmp)
        raise


def _unlink(p):
    try:
        os.unlink(p)
    except OSError:
        pass
