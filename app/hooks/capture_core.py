"""The hook program's work, loaded by ``capture.py`` (stdlib only; see that file's docstring).

Kept apart from ``capture.py`` for speed: Python compiles a script it runs
from source on every start (~10 ms for this much code), but imports a module
from its cached bytecode. ``capture.py`` stays a few lines and imports this.
It must never import rltray or anything outside the standard library, and
nothing at module level beyond ``posix``, ``sys`` and ``time`` (all already loaded
at start), because every millisecond here is spent inside the agent's turn: not
even ``os``, whose import alone costs a fifth of Python's start (``posix`` is the
built-in it wraps, and the few path rules the hook needs are below: ``join``,
``dirname``, ``abspath``, ``getenv``).
JSON goes through the C accelerator ``_json`` directly (``import json`` pulls
in ``re``, which alone costs about as much as the interpreter's start), hashing
through ``_sha256``/``_sha2`` and spawning through ``posix_spawnp``; each
falls back to the ordinary module when the fast one is missing.

It never fails the agent: every problem becomes one line in
``<home>/logs/hook.log`` (in ``fallback_log_path()`` when logs/ cannot be written)
and exit status 0, and the only stdout it ever writes is a documented answer: the
``{"decision": "block", ...}`` answer to a `/rl` prompt, the lessons rltray wrote for a
session's start (``start_hook``), and the one-line note after a bad rating that the
next prompt carries (``prompt_hook``), both as ``hookSpecificOutput.additionalContext``.
Records go to ``spool/incoming/`` as one file each, written atomically (temp +
rename, 0600) through directory descriptors opened without following symlinks,
so a planted link can redirect nothing. Credentials in spool records are
scrubbed at ingest (``rltray.app.scrub``), not here: scrubbing 200 KB costs ~70 ms.
What the hook keeps between calls (``spool/sessions/``: the pending prompt, a
preview of the last answer) is scrubbed here, with the same ``app/scrub.py``
loaded by file location only when the text may hold a credential (see
``might_hold_secret``: loading ``re`` and compiling the rules costs ~9 ms), and
session files idle for two weeks are deleted (at most one scan a day).

Each agent's payloads are read by its own module beside this one
(``events_claude.py``, ``events_codex.py``), loaded by the event's prefix
(``agent_events``), so a hook run loads the shared core and exactly one agent.
Here: JSON, files, per-session state, credentials, the `/rl` commands, what every
agent's turn goes through (``record_turn``) and the entry point.
"""

import sys
import time

try:  # the built-in module under os: `import os` costs about a fifth of Python's own start
    import posix as _os  # (its _collections_abc builds ~25 classes); posix has every call used here
except ImportError:  # Windows: nt has them too, os gives its path rules; the cost is not measured
    import os as _os
POSIX = _os.__name__ == "posix"
S_IFMT, S_IFREG = 0o170000, 0o100000  # stat's file-type bits (and `import stat` is one more module)

MAX_STDIN = 8 * 1024 * 1024
MAX_STATE = 4 * 1024 * 1024
MAX_TEXT = 200_000
MAX_CONTEXT = 20
MAX_CONTEXT_CHARS = 20_000
MAX_LOG = 1024 * 1024
PREVIEW = 40
PREVIEW_SCAN = 2000  # answer chars scrubbed for the preview: a key starting in it ends in it
PRUNE_AFTER = 14 * 86400  # session state idle this long is deleted
PRUNE_EVERY = 86400  # at most one scan per day, marked by the stamp file's mtime
PRUNE_STAMP = ".pruned"
LOCK_WAIT = 2.0  # seconds a hook waits for another run of the same session to save its state
RECENT_TURNS = 8  # turn ids a session's state remembers, so a late re-report never moves back
# Lower-case pieces of which every credential that app/scrub.py redacts holds at least one:
# its fixed prefixes, the names in its assignment rules (pass, pwd, secret, token, key:
# headers, AccountKey=, connection strings too) and the programs its command-line rules
# look for (mysql/mariadb -pPW; login, mongo, mycli -p PW). With none of them, and no long
# run of mixed letters and digits (how generated keys look, whatever their prefix), text is
# stored without loading the scrubber. A new scrub rule whose matches can avoid all of
# these must add its prefix here (tests/app/test_capture.py checks the known formats).
SECRET_HINTS = ("private key", "akia", "asia", "abia", "acca", "ghp_", "gho_", "ghu_", "ghs_",
                "ghr_", "github_pat_", "glpat-", "npm_", "pypi-", "sk-", "sk_", "rk_", "xox",
                "xapp-", "hooks.slack.com", "aiza", "hf_", "eyj", "sg.", "bearer", "basic",
                "curl", "://", "pass", "pwd", "secret", "token", "key", "auth", "cred", "mysql",
                "mariadb", "login", "mongo", "mycli")
SECRET_RUN = 16
# bytes.translate table: ASCII letters -> "a", digits -> "0", everything else -> space.
_CLASSES = bytes(97 if 65 <= c <= 90 or 97 <= c <= 122 else 48 if 48 <= c <= 57 else 32
                 for c in range(256))
RL_COMMANDS = ("good", "bad", "undo", "status", "1", "2", "4", "5",  # 1-5: a graded rating
               "lesson", "lessons")  # teach the agent a lesson; what new sessions are told
# a 3 is refused here as in app/rating.py, whose reason this repeats (the hook imports no app)
RL_NEUTRAL = ("rltray: 3 is the middle of the scale: it says neither good nor bad, so it "
              "would teach nothing; give 1-2 (bad) or 4-5 (good).")
# How each agent's user types a rating (one home; README says the same): Claude Code knows
# `/rl` through rltray's custom command file; Codex's terminal UI refuses unknown slash
# commands, so there it is `$rl`, the rltray skill's mention (`codex exec` takes both).
RL_PREFIXES = ("/rl", "$rl")
_O_BINARY = getattr(_os, "O_BINARY", 0)
_O_NOFOLLOW = getattr(_os, "O_NOFOLLOW", 0)
_APPEND = _os.O_WRONLY | _os.O_APPEND | _os.O_CREAT | _O_NOFOLLOW


# -- os without `import os`: the few path rules and calls the hook needs -------------------------


def getenv(name):
    """os.environ.get(name): the live environment where os is loaded (the app, tests, the
    bundle's hook program), else posix's copy of the one this process started with, which
    is all a hook run has (nothing here changes the environment)."""
    module = sys.modules.get("os")
    if module is not None:
        return module.environ.get(name)
    value = _os.environ.get(name.encode("utf-8", "surrogateescape"))
    return None if value is None else value.decode(sys.getfilesystemencoding(), "surrogateescape")


def environ():
    """The environment to hand a child program (posix takes its bytes mapping as it is)."""
    module = sys.modules.get("os")
    return module.environ if module is not None else _os.environ


def join(path, *parts):
    """os.path.join for the relative parts the hook adds to its folders."""
    if not POSIX:
        import os

        return os.path.join(path, *parts)
    for part in parts:
        if part.startswith("/") or not path:
            path = part
        else:
            path += part if path.endswith("/") else "/" + part
    return path


def dirname(path):
    """os.path.dirname (posixpath's rule: trailing separators go, except for the root)."""
    if not POSIX:
        import os

        return os.path.dirname(path)
    head = path[: path.rfind("/") + 1]
    return head.rstrip("/") or head


def abspath(path):
    """os.path.abspath; an absolute path with nothing to normalise (every path a hook run
    takes from ``__file__``) is returned as it is, anything else goes through os."""
    if POSIX and path.startswith("/") and not {"", ".", ".."} & set(path.split("/")[1:]):
        return path
    import os

    return os.path.abspath(path)


def makedirs(path, mode=0o700):
    """os.makedirs(path, mode, exist_ok=True) in one mkdir when the folder is there already
    (parents it creates get 0o755 less the umask: never writable by others, whatever the
    umask, so no other user can swap the data folder out from under them)."""
    if not POSIX:
        import os

        os.makedirs(path, mode, exist_ok=True)
        return
    try:
        _os.mkdir(path, mode)
    except FileExistsError:
        return
    except FileNotFoundError:
        parent = dirname(path)
        if not parent or parent == path:
            raise
        makedirs(parent, 0o755)
        try:  # noqa: SIM105 (contextlib costs import time in the hook)
            _os.mkdir(path, mode)
        except FileExistsError:
            pass


def is_regular(mode):
    """stat.S_ISREG(mode)."""
    return mode & S_IFMT == S_IFREG


def isfile(path):
    """os.path.isfile(path)."""
    try:
        return is_regular(_os.stat(path).st_mode)
    except (OSError, ValueError):
        return False


# -- JSON without `re` --------------------------------------------------------------


class _JsonContext:
    """The attributes ``_json.make_scanner`` reads (json.JSONDecoder's, lenient strings)."""

    def __init__(self):
        self.strict = False
        self.object_hook = None
        self.object_pairs_hook = None
        self.parse_float = float
        self.parse_int = int
        self.parse_constant = {"NaN": float("nan"), "Infinity": float("inf"),
                               "-Infinity": float("-inf")}.__getitem__


def loads(text):
    """json.loads(text) through the C scanner; ValueError on anything that is not one value."""
    try:
        from _json import make_scanner
    except ImportError:
        import json

        return json.loads(text)
    text = text.strip(" \t\r\n\ufeff")
    try:
        value, end = make_scanner(_JsonContext())(text, 0)
    except (StopIteration, SystemError):
        # The C scanner reports syntax errors through json.decoder.JSONDecodeError, which it
        # looks up in sys.modules only; without json imported that surfaces as SystemError.
        raise ValueError("not valid JSON") from None
    if end != len(text):
        raise ValueError(f"extra data after JSON at {end}")
    return value


def dumps(value):
    """Compact, ASCII-only JSON (lone surrogates survive as escapes, never as bad bytes)."""
    try:
        from _json import encode_basestring_ascii, make_encoder

        encoder = make_encoder({}, _not_serialisable, encode_basestring_ascii, None,
                               ":", ",", False, False, True)
        return "".join(encoder(value, 0))
    except (ImportError, TypeError):
        import json

        return json.dumps(value, separators=(",", ":"))


def _not_serialisable(value):
    raise TypeError(f"{type(value).__name__} is not JSON serialisable")


def _sha256_hex(text):
    try:
        from _sha256 import sha256  # CPython <= 3.11
    except ImportError:
        try:
            from _sha2 import sha256  # CPython >= 3.12
        except ImportError:
            from hashlib import sha256
    return sha256(text.encode("utf-8", "surrogatepass")).hexdigest()


def state_file_name(agent, session):
    """The name of one agent session's state file in ``spool/sessions/`` (app/hooks/sessionstate.py
    finds a deleted turn's session by it)."""
    return f"{agent}-{_sha256_hex(session)[:16]}.json"


# -- files: private, atomic, never through a symlink ----------------------------------


class UnsafePath(OSError):
    """A symlink or non-regular file where the hook expected its own file or folder."""


class _Dir:
    """A folder opened without following links; ``fd`` is None where dir_fd is unsupported."""

    def __init__(self, path, fd):
        self.path = path
        self.fd = fd
        self.lock_fd = None  # a session's lock (``Hook.load_state``), released by close()

    def open(self, name, flags, mode=0o600):
        if self.fd is None:
            return _os.open(join(self.path, name), flags | _O_BINARY, mode)
        return _os.open(name, flags, mode, dir_fd=self.fd)

    def replace(self, src, dst):
        if self.fd is None:
            _os.replace(join(self.path, src), join(self.path, dst))
        else:
            _os.replace(src, dst, src_dir_fd=self.fd, dst_dir_fd=self.fd)

    def unlink(self, name):
        if self.fd is None:
            _os.unlink(join(self.path, name))
        else:
            _os.unlink(name, dir_fd=self.fd)

    def names(self):
        return _os.listdir(self.path if self.fd is None else self.fd)

    def lstat(self, name):
        if self.fd is None:
            return _os.lstat(join(self.path, name))
        return _os.stat(name, dir_fd=self.fd, follow_symlinks=False)

    def close(self):
        if self.lock_fd is not None:
            _os.close(self.lock_fd)  # releases the lock
            self.lock_fd = None
        if self.fd is not None:
            _os.close(self.fd)
            self.fd = None


def open_dir(home, *parts):
    """Open ``home/parts...``, creating folders 0700; refuse any part below home that is a link."""
    makedirs(home)
    path = home
    if not POSIX:
        import os

        for part in parts:
            path = join(path, part)
            try:  # noqa: SIM105 (contextlib costs import time in the hook)
                _os.mkdir(path, 0o700)
            except FileExistsError:
                pass
            if os.path.islink(path) or not os.path.isdir(path):
                raise UnsafePath(f"refusing {path}: not a plain folder")
        return _Dir(path, None)
    flags = _os.O_RDONLY | _os.O_DIRECTORY
    fd = _os.open(home, flags)
    try:
        for part in parts:
            path = join(path, part)
            try:  # noqa: SIM105 (contextlib costs import time in the hook)
                _os.mkdir(part, 0o700, dir_fd=fd)
            except FileExistsError:
                pass
            try:
                child = _os.open(part, flags | _O_NOFOLLOW, dir_fd=fd)
            except OSError as exc:
                raise UnsafePath(f"refusing {path}: not a plain folder ({exc.strerror})") from None
            _os.close(fd)
            fd = child
    except BaseException:
        _os.close(fd)
        raise
    return _Dir(path, fd)


def write_atomic(folder, name, data):
    """Create ``name`` in ``folder`` with ``data`` (bytes): temp file + rename, 0600."""
    tmp = f".{name}.{_os.getpid()}.{_os.urandom(4).hex()}.tmp"
    try:
        fd = folder.open(tmp, _os.O_WRONLY | _os.O_CREAT | _os.O_EXCL | _O_NOFOLLOW)
    except OSError as exc:  # name the folder in the log, not a temp name relative to a fd
        exc.filename = join(folder.path, name)
        raise
    try:
        view = memoryview(data)
        while view:
            view = view[_os.write(fd, view):]
    finally:
        _os.close(fd)
    try:
        folder.replace(tmp, name)
    except BaseException:
        folder.unlink(tmp)
        raise


def open_path(path, flags):
    """os.open(path, flags), for the agents' modules (they import nothing)."""
    return _os.open(path, flags)


def close(fd):
    """os.close(fd), for the agents' modules."""
    _os.close(fd)


def open_regular(opener):
    """(fd, size) of a regular file opened by ``opener(flags)``; never a link, never a FIFO.

    O_NONBLOCK keeps a FIFO planted at the path from hanging the hook; the fstat check
    then refuses it (and closes the fd).
    """
    fd = opener(_os.O_RDONLY | _O_NOFOLLOW | getattr(_os, "O_NONBLOCK", 0) | _O_BINARY)
    try:
        info = _os.fstat(fd)
        if not is_regular(info.st_mode):
            raise UnsafePath("refusing to read a file that is not a regular file")
    except BaseException:
        _os.close(fd)
        raise
    return fd, info.st_size


def read_at(fd, start, limit, size):
    """Up to ``limit`` bytes of ``fd`` from offset ``start``; ``size`` (the file's, from
    fstat) sizes the reads, so a 200-byte file is not read into a 1 MB buffer."""
    _os.lseek(fd, start, 0)
    chunks, left = [], limit
    while left > 0:
        chunk = _os.read(fd, min(left, 1 << 20, max(size - start, 0) + 1))
        if not chunk:
            break
        chunks.append(chunk)
        left -= len(chunk)
        start += len(chunk)
    return b"".join(chunks)


def read_regular(opener, limit, tail=False):
    """Read at most ``limit`` bytes of a regular file (the last ones when ``tail``); never a link
    (``open_regular``). Returns (bytes, started_mid_file)."""
    fd, size = open_regular(opener)
    try:
        start = max(0, size - limit) if tail else 0
        return read_at(fd, start, limit, size), start > 0
    finally:
        _os.close(fd)


def log(home, event, message):
    """Append one line to <home>/logs/hook.log (0600, never through a link); never raises.

    Returns the path written: hook.log, or ``fallback_log_path()`` when the data folder's
    logs/ cannot be written (a read-only or full data folder would otherwise drop turns
    without a trace), or None when neither could be written.
    """
    if not home:
        return None
    line = f"{iso_now()} pid={_os.getpid()} {event}: {message}"[:2000].replace("\n", " ")
    try:
        logs = open_dir(home, "logs")
        try:
            fd = logs.open("hook.log", _APPEND)
            try:
                if _os.fstat(fd).st_size > MAX_LOG:  # keep one old generation, not an endless file
                    _os.close(fd)
                    logs.replace("hook.log", "hook.log.1")
                    fd = logs.open("hook.log", _APPEND)
                _os.write(fd, line.encode("utf-8", "replace") + b"\n")
            finally:
                _os.close(fd)
        finally:
            logs.close()
        return join(home, "logs", "hook.log")
    except Exception as exc:
        why = f"{exc.strerror or exc}" if isinstance(exc, OSError) else f"{type(exc).__name__}"
    try:
        return _log_fallback(f"{line} [data folder {home}: logs/hook.log not writable: {why}]")
    except Exception:
        return None


def fallback_log_path():
    """The hook's log when ``<home>/logs/`` cannot be written: one private file per user in the
    temp folder (``$TMPDIR``, ``$TEMP`` or ``$TMP``, else /tmp), e.g. /tmp/rltray-hook-1000.log.

    Stdlib and cheap: ``tempfile`` alone costs more to import than the whole hook, so
    this reads the same variables it reads first. ``rltray doctor`` shows this file.
    """
    folder = getenv("TMPDIR") or getenv("TEMP") or getenv("TMP")
    if not folder:
        if POSIX:
            folder = "/tmp"
        else:
            import os

            folder = os.path.expanduser(r"~\AppData\Local\Temp")
    if hasattr(_os, "getuid"):
        who = str(_os.getuid())
    else:
        who = "".join(c for c in (getenv("USERNAME") or "") if c.isalnum())[:64] or "user"
    return join(abspath(folder), f"rltray-hook-{who}.log")


def _log_fallback(line):
    """Append ``line`` to fallback_log_path(): 0600, never through a link, never into a file
    another user planted there (the temp folder is shared); kept under MAX_LOG."""
    path = fallback_log_path()
    flags = _os.O_WRONLY | _os.O_APPEND | _os.O_CREAT | _O_NOFOLLOW | _O_BINARY
    fd = _os.open(path, flags | getattr(_os, "O_NONBLOCK", 0), 0o600)
    try:
        info = _os.fstat(fd)
        if not is_regular(info.st_mode):
            raise UnsafePath(f"refusing {path}: not a regular file")
        if hasattr(_os, "getuid") and info.st_uid != _os.getuid():
            raise UnsafePath(f"refusing {path}: owned by another user")
        if info.st_size > MAX_LOG:
            _os.ftruncate(fd, 0)
        _os.write(fd, line.encode("utf-8", "replace") + b"\n")
    finally:
        _os.close(fd)
    return path


def iso_now():
    now = time.time()
    stamp = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(now))
    return f"{stamp}.{int(now % 1 * 1_000_000):06d}+00:00"


# -- per-session state ---------------------------------------------------------------


class Hook:
    """One hook invocation: where it writes, which agent and session it serves."""

    def __init__(self, home, event):
        self.home = home
        self.event = event
        module = agent_events(event.partition("-")[0]) if "-" in event else None
        self.module = module
        self.agent = module.AGENT if module is not None else "unknown"
        self.usage = module.USAGE if module is not None else ""
        self._scrub = None  # app/scrub.py's scrub once loaded; False when it cannot be

    def scrub(self, text):
        """``text`` with credentials redacted; None when it may hold one and the scrubber
        cannot be loaded (then keep nothing: the caller stores no text)."""
        if not text or not might_hold_secret(text):
            return text
        if self._scrub is None:
            try:
                self._scrub = load_scrubber()
            except Exception as exc:
                self._scrub = False
                self.log(f"credential scrubber not loaded ({type(exc).__name__}: {exc}); "
                         "text that may hold a credential is not kept in session state")
        return self._scrub(text) if self._scrub else None

    def log(self, message):
        return log(self.home, self.event, message)

    def state_name(self, session):
        return state_file_name(self.agent, session)

    def load_state(self, session):
        """The session's state dict; {} when missing, unreadable or refused (logged).

        The returned folder holds the session's lock (``lock_session``) until it is closed
        (``save_state`` closes it): two hooks of one session (Codex's notify of a turn and
        the prompt hook of the next) read, change and write the state one after the other,
        never both from the same old copy, which lost the newer prompt."""
        try:
            folder = open_dir(self.home, "spool", "sessions")
        except OSError as exc:
            self.log(f"state folder unusable: {exc}")
            return {}, None
        name = self.state_name(session)
        # Housekeeping: a folder that refuses it refuses the state write too, logged there.
        try:  # noqa: SIM105 (contextlib costs import time in the hook)
            prune_sessions(folder, name, time.time())
        except OSError:
            pass
        try:
            if not lock_session(folder, name):
                self.log(f"session state still locked after {LOCK_WAIT:g} s; going on without")
        except OSError as exc:
            self.log(f"session state not locked ({exc.strerror or exc}); going on without")
        try:
            data, _ = read_regular(lambda flags: folder.open(name, flags), MAX_STATE)
            state = loads(data.decode("utf-8", "replace"))
            return (state if isinstance(state, dict) else {}), folder
        except FileNotFoundError:
            return {}, folder
        except OSError as exc:
            self.log(f"refusing session state file: {exc.strerror or exc}")
            folder.close()
            return {}, None
        except ValueError as exc:
            self.log(f"session state unreadable, starting fresh: {exc}")
            return {}, folder

    def save_state(self, folder, session, state, keep_open=False):
        """Write the session's state; the folder (and the session's lock) is closed after,
        unless ``keep_open`` (more changes to come under the same lock)."""
        if folder is None:
            return
        try:
            write_atomic(folder, self.state_name(session), dumps(state).encode("ascii"))
        finally:
            if not keep_open:
                folder.close()

    def spool(self, record):
        """Write one record into spool/incoming/ (the tray need not be running)."""
        record = {"v": 1, **record}
        folder = open_dir(self.home, "spool", "incoming")
        try:
            name = record_name()
            write_atomic(folder, name, dumps(record).encode("ascii"))
        finally:
            folder.close()
        return name


def record_name():
    """A new spool record's file name: ingest applies records in the order of these names
    (nanoseconds first), and pid plus random bytes keep two writers' apart. The service's
    own records (``spool.spool_press``) are named here too."""
    return f"{time.time_ns():020d}-{_os.getpid()}-{_os.urandom(4).hex()}.json"


def lock_name(state_name):
    """The lock file beside a session's state file (the state file itself is replaced by a
    rename on every save, so a lock on it would lock a file that is gone)."""
    return state_name[: -len(".json")] + ".lock"


def lock_session(folder, state_name, wait=LOCK_WAIT):
    """Take the session's lock into ``folder.lock_fd``: POSIX record locks through
    ``posix.lockf`` (built in: no import), msvcrt's on Windows. Waits up to ``wait``
    seconds for another hook of the session; False when it is still held then. A lock is
    the process's, released when the folder closes or the process ends, crash included."""
    fd = folder.open(lock_name(state_name), _os.O_RDWR | _os.O_CREAT | _O_NOFOLLOW)
    folder.lock_fd = fd
    if hasattr(_os, "lockf"):
        def attempt():
            _os.lockf(fd, _os.F_TLOCK, 0)
    else:
        import msvcrt

        def attempt():
            msvcrt.locking(fd, msvcrt.LK_NBLCK, 1)
    deadline = time.monotonic() + wait
    while True:
        try:
            attempt()
            return True
        except (BlockingIOError, PermissionError):  # held by another process
            if time.monotonic() >= deadline:
                return False
            time.sleep(0.002)


def prune_sessions(folder, keep, now):
    """Delete session state files (and their locks, stray temp files, untaken notes) idle for
    PRUNE_AFTER, except ``keep`` and its lock; scans at most once per PRUNE_EVERY. Regular
    files only, judged by lstat: a link is never followed nor removed. Returns how many
    files went."""
    try:
        mark = folder.lstat(PRUNE_STAMP)
        if is_regular(mark.st_mode) and 0 <= now - mark.st_mtime < PRUNE_EVERY:
            return 0
    except FileNotFoundError:
        pass
    write_atomic(folder, PRUNE_STAMP, b"")  # first, so hooks running alongside skip the scan
    removed = 0
    kept = (keep, lock_name(keep))
    for name in folder.names():
        if name in kept or not name.endswith((".json", ".tmp", ".note", ".lock")):
            continue
        try:
            info = folder.lstat(name)
            if is_regular(info.st_mode) and now - info.st_mtime > PRUNE_AFTER:
                folder.unlink(name)
                removed += 1
        except OSError:
            continue
    return removed


# -- credentials ------------------------------------------------------------------------


def might_hold_secret(text):
    """False only for text in which app/scrub.py can find nothing (see SECRET_HINTS)."""
    low = text.lower()
    if any(hint in low for hint in SECRET_HINTS):
        return True
    for word in text.encode("ascii", "replace").translate(_CLASSES).split():
        if len(word) >= SECRET_RUN and b"0" in word and b"a" in word:
            return True
    return False


def load_scrubber():
    """``scrub`` from app/scrub.py (stdlib only), loaded by file location from cached
    bytecode like this module, but without putting app/ on sys.path: its secrets.py would
    shadow the standard library's."""
    name = "_rltray_hook_scrub"
    module = sys.modules.get(name)
    if module is None:
        try:
            from _frozen_importlib import module_from_spec
            from _frozen_importlib_external import spec_from_file_location
        except ImportError:
            from importlib.util import module_from_spec, spec_from_file_location
        app = dirname(dirname(abspath(__file__)))
        spec = spec_from_file_location(name, join(app, "scrub.py"))
        module = module_from_spec(spec)
        sys.modules[name] = module
        try:
            spec.loader.exec_module(module)
        except BaseException:
            del sys.modules[name]
            raise
    return module.scrub


def cap(text, limit=MAX_TEXT):
    return text[:limit] if isinstance(text, str) else ""


def text_or_none(value):
    return value if isinstance(value, str) and value else None


def preview(text, limit=PREVIEW):
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"


def norm(text):
    return " ".join(text.split())


# -- transcripts -----------------------------------------------------------------------


def rl_command(text):
    """(subcommand, comment) when ``text`` is a `/rl ...` or `$rl ...` prompt, else None."""
    if not isinstance(text, str):
        return None
    s = text.strip()
    if s[:3].lower() not in RL_PREFIXES or (len(s) > 3 and not s[3].isspace()):
        return None
    rest = s[3:].split(None, 1)
    return (rest[0].lower() if rest else ""), (comment_of(rest[1]) if len(rest) > 1 else None)


def comment_of(text):
    """The comment after a `/rl` subcommand; `-c "…"` as in `rltray bad -c "…"` is one too."""
    text = text.strip()
    for flag in ("-c", "--comment"):
        if text == flag or text.startswith((flag + " ", flag + "=")):
            text = text[len(flag) + 1:].strip()
            break
    if len(text) >= 2 and (text[0], text[-1]) in (('"', '"'), ("'", "'"), ("\u201c", "\u201d")):
        text = text[1:-1].strip()
    return text or None


# -- events ------------------------------------------------------------------------------


def session_of(payload, key):
    value = payload.get(key)
    return value[:500] if isinstance(value, str) and value.strip() else None


def _num(value):
    return value if isinstance(value, (int, float)) and not isinstance(value, bool) else 0


def pending_prompt(state, continuing=False, turn=None):
    """The prompt recorded by the prompt hook, unless a turn was recorded since (then the
    transcript is asked first: the prompt hook may have missed a newer prompt). Where the
    agent names its turns (Codex: ``turn`` here, ``prompt_turn`` kept by the prompt hook)
    the prompt is this turn's only when both name the same one."""
    prompt = text_or_none(state.get("prompt"))
    if prompt is None:
        return None
    asked_for = text_or_none(state.get("prompt_turn"))
    if turn is not None and asked_for is not None:
        return prompt if asked_for == turn[:200] else None
    fresh = _num(state.get("prompt_at")) >= _num(state.get("last_turn_at"))
    return prompt if fresh or continuing else None


def prompt_matcher(hook, state, prompt):
    """Whether a transcript message is ``prompt`` (recorded by the prompt hook), or None when
    there is none. A prompt stored scrubbed is compared scrubbed: the transcript holds what
    was typed."""
    if prompt is None:
        return None
    wanted = norm(prompt)
    if state.get("prompt_scrubbed") is True:
        return lambda text: norm(hook.scrub(text) or "") == wanted
    return lambda text: norm(text) == wanted


def fallback_turn_id(session, prompt, response):
    return _sha256_hex("\0".join((session, prompt, response)))[:16]


def turn_fields(session, turn, prompt, response, payload, **more):
    """What every agent's turn record carries; a turn without an id of its own gets a hash
    of session, prompt and answer. ``more``: context, event, transcript."""
    return {"turn": (turn or fallback_turn_id(session, prompt, response))[:200],
            "prompt": prompt, "response": response,
            "cwd": text_or_none(payload.get("cwd")), "model": text_or_none(payload.get("model")),
            **more}


def pair_digest(prompt, response):
    """A short hash of a turn's prompt and answer (``same_turn``), as the record holds them."""
    return _sha256_hex(norm(prompt or "") + "\0" + norm(response or ""))[:16]


def same_turn(hook, state, prompt, response):
    """The id of the turn last written for this session when it has this prompt and answer,
    else None: a report without an id of its own (Codex's notify without a turn-id) is
    then that turn again, not a second one under a hash. The prompt is compared as the
    prompt hook kept it (scrubbed, when it may hold a credential)."""
    written = state.get("written")
    if not isinstance(written, dict) or not text_or_none(written.get("turn")):
        return None
    if state.get("prompt_scrubbed") is True:
        prompt = hook.scrub(cap(prompt))
        if prompt is None:
            return None
    if written.get("pair") != pair_digest(cap(prompt), cap(response)):
        return None
    return written["turn"]


def record_turn(hook, session, state, folder, fields):
    """Spool a turn unless this turn was already written with everything it now carries.

    A turn whose prompt is an rltray command (`/rl bad` that reached the model because the
    prompt hook did not run) is never a turn to train on: it is not spooled.

    Only a new turn becomes the session's newest (``last_turn``, what `/rl` rates) and
    moves ``last_turn_at``; a re-report of a turn already recorded (Codex reports each
    turn twice, notify late and fire-and-forget) leaves both, so a late notify neither
    makes an interrupted turn look answered (``unanswered``) nor takes `/rl` back to an
    older turn, and when it brings nothing new the state is not even written.
    """
    if rl_command(fields.get("prompt")) is not None:
        hook.log("the prompt is an rltray command; its answer is not recorded as a turn")
        if folder is not None:
            folder.close()
        return
    rec = {"kind": "turn", "agent": hook.agent, "session": session, **fields,
           "captured_at": iso_now()}
    asked_at = _num(state.get("prompt_at"))  # the prompt hook's clock: how long the turn took
    if asked_at and asked_at >= _num(state.get("last_turn_at")):
        rec["duration_s"] = round(max(0.0, time.time() - asked_at), 3)
    rec["prompt"], rec["response"] = cap(rec["prompt"]), cap(rec["response"])
    filled = {k for k in ("prompt", "response", "context", "cwd", "model") if rec.get(k)}
    written = state.get("written") if isinstance(state.get("written"), dict) else {}
    turn, last = rec["turn"], text_or_none(state.get("last_turn"))
    before = set(written.get("fields") or ()) if written.get("turn") == turn else set()
    new = not filled <= before
    if new:
        hook.spool(rec)
        pair = (pair_digest(rec["prompt"], rec["response"]) if rec["prompt"]
                else written.get("pair") if written.get("turn") == turn else None)
        state["written"] = {"turn": turn, "fields": sorted(filled | before), "pair": pair}
    recent = state.get("recent") if isinstance(state.get("recent"), list) else []
    if (turn == last or turn in recent) and not asked_again(state, rec):
        # a re-report: the newest turn stays what it was
        if not new:
            if folder is not None:
                folder.close()
            return
        if turn == last and "response" not in before:  # the answer only now
            state["last_turn_preview"] = preview(hook.scrub(rec["response"][:PREVIEW_SCAN]) or "")
        hook.save_state(folder, session, state)
        return
    shown = hook.scrub(rec["response"][:PREVIEW_SCAN])  # kept in state, shown by `/rl`
    state.update(prev_turn=last, prev_turn_at=state.get("last_turn_at"), last_turn=turn,
                 last_turn_preview=preview(shown or ""), last_turn_at=time.time(),
                 recent=[*recent, turn][-RECENT_TURNS:])
    hook.save_state(folder, session, state)


def asked_again(state, rec):
    """Whether ``rec`` answers the prompt the prompt hook recorded after the session's last
    answer: a turn asked again, word for word (its id, a hash of prompt and answer, may
    be the earlier one's), not a re-report of one recorded before it was asked."""
    if _num(state.get("prompt_at")) <= _num(state.get("last_turn_at")):
        return False
    asked = pending_prompt(state, turn=rec["turn"])
    return asked is not None and norm(cap(asked)) == norm(rec["prompt"])


# -- `/rl` prompts ------------------------------------------------------------------------


def expand_hook(hook, payload, out):
    """Claude Code's UserPromptExpansion: `/rl ...` typed as rltray's custom command.

    It fires only when UserPromptSubmit let the command through (Claude Code runs that
    hook first, and rltray's blocks `/rl`), so it is the second net, never a double rating.
    Any other command's expansion is none of rltray's business: state stays untouched.
    """
    if rl_command(payload.get("prompt")) is not None:
        prompt_hook(hook, payload, out)


def prompt_hook(hook, payload, out):
    """Remember the prompt for the next Stop, or turn `/rl ...` into a command record."""
    session = session_of(payload, "session_id")
    prompt = payload.get("prompt")
    if not isinstance(prompt, str):
        prompt = ""
    command = rl_command(prompt)
    if session is None:
        hook.log("UserPromptSubmit payload without session_id; nothing recorded")
        if command is not None:
            out({"decision": "block", "reason": "rltray: this agent sent no session id; "
                 "rate from the tray or with `rltray good` instead."})
        return
    state, folder = hook.load_state(session)
    if command is None:
        text = cap(prompt)
        kept = hook.scrub(text)  # the file outlives the turn: no credentials in it
        state["prompt"] = kept or ""
        if kept is not None and kept != text:
            state["prompt_scrubbed"] = True
        else:
            state.pop("prompt_scrubbed", None)
        state["prompt_at"] = time.time()
        turn = text_or_none(payload.get("turn_id"))  # Codex names the turn a prompt starts
        if turn is not None:
            state["prompt_turn"] = turn[:200]
        else:
            state.pop("prompt_turn", None)
        waiting = note_waits(folder, hook.state_name(session))
        hook.save_state(folder, session, state)
        lessons = sibling("lessonfiles") if waiting else None
        note = lessons.take_note(hook.home, hook.agent, session) if lessons is not None else None
        if note:  # said once: the bad rating's why, to the answer after it
            out({"hookSpecificOutput": {"hookEventName": "UserPromptSubmit",
                                        "additionalContext": note}})
        return
    sub, comment = command
    if sub not in RL_COMMANDS:
        if folder is not None:
            folder.close()
        out({"decision": "block", "reason": RL_NEUTRAL if sub == "3" else hook.usage})
        return
    said = run_command(hook, session, state, folder, sub, comment, text_or_none(payload.get("cwd")))
    out({"decision": "block", "reason": said})


def note_waits(folder, state_name):
    """Whether the note after a bad rating may wait for this session: its file
    (``lessonfiles.note_path``: the state file's name with ``.note``) is in the open
    sessions folder. One lstat, so a prompt with no note loads neither lessonfiles nor
    the os it imports; True where the folder is not open (then lessonfiles looks)."""
    if folder is None:
        return True
    try:
        folder.lstat(state_name[: -len(".json")] + ".note")
    except FileNotFoundError:
        return False
    except OSError:
        return True
    return True


def run_command(hook, session, state, folder, sub, comment, cwd=None):
    """Spool the command for the exact turn it names; the user-facing sentence about it.

    `/rl good` and `/rl bad` name the session's newest turn (so a second rating changes
    your mind about the same answer). `/rl undo` names the turn last rated here, else
    the newest turn, once: ``undone_at`` remembers the newest turn when an undo ran,
    and until a new rating or a new answer there is nothing left to undo.
    `/rl lesson` and `/rl lessons` are ``lesson_command``'s.
    """
    if sub in ("lesson", "lessons"):
        if folder is not None:
            folder.close()
        return lesson_command(hook, session, state, sub, comment, cwd)
    last_turn = text_or_none(state.get("last_turn"))
    target, shown = last_turn, state.get("last_turn_preview") or ""
    if sub == "undo":
        if text_or_none(state.get("last_rated_turn")):
            target, shown = state["last_rated_turn"], state.get("last_rated_preview") or ""
        elif last_turn is not None and state.get("undone_at") == last_turn:
            if folder is not None:
                folder.close()
            return "rltray: nothing to undo; your last rating here was withdrawn already."
    if sub not in ("undo", "status") and unanswered(state):
        if folder is not None:
            folder.close()
        return ("rltray: the answer to your last prompt was not captured (it was interrupted "
                "or failed), so nothing was rated; an earlier answer can be rated in the "
                "ratings window or with `rltray rate`.")
    summary = status_text(hook.home) if sub == "status" else ""  # before our own record lands
    try:
        hook.spool({"kind": "command", "agent": hook.agent, "session": session, "command": sub,
                    "target_turn": target, "comment": cap(comment, 2000) if comment else None,
                    "captured_at": iso_now(), "event": hook.event})
    except Exception as exc:
        written = hook.log(f"command not recorded: {type(exc).__name__}: {exc}")
        if folder is not None:
            folder.close()
        return unrecorded(hook.home, exc, written)
    if sub == "status":
        if folder is not None:
            folder.close()
        return summary
    if target is None:
        if folder is not None:
            folder.close()
        if sub == "undo":
            return "rltray: nothing to undo in this session."
        return "rltray: no answer has been captured in this session yet, so nothing was rated."
    leave_note(hook, session, sub, comment, target, target == last_turn)
    if sub == "undo":
        state.pop("last_rated_turn", None)
        state.pop("last_rated_preview", None)
        state["undone_at"] = last_turn
        hook.save_state(folder, session, state)
        return f'rltray: withdrew your rating of the answer ("{preview(str(shown))}")'
    state["last_rated_turn"], state["last_rated_preview"] = target, shown
    state.pop("undone_at", None)
    hook.save_state(folder, session, state)
    noted = " with your comment" if comment else ""
    said = f"{sub}/5" if sub.isdigit() else sub
    return f'rltray: rated the last answer {said}{noted} ("{preview(str(shown))}")'


def unanswered(state):
    """Whether a prompt was sent after the session's last captured answer: that turn ended
    with no answer rltray saw (Esc in Claude Code runs no Stop hook, an API error ends in
    StopFailure, an aborted Codex turn sends nothing). `/rl bad` then means the answer the
    user just watched go wrong, not the one before it, which must not take the rating."""
    return _num(state.get("prompt_at")) > _num(state.get("last_turn_at")) > 0


def leave_note(hook, session, sub, comment, target=None, newest=True):
    """After `/rl bad <why>` (or a 1 or 2 with a why) the session's next prompt tells the agent
    why, once (``lessonfiles.take_note``); a good rating or an undo takes a waiting note back.
    Not for a command seen by notify: that `/rl` reached the model itself. The note names
    ``target``, the turn rated; an undo of an older turn than the ``newest`` takes back only
    a note about that turn (a later `/rl bad` about the newest one stays)."""
    lessons = sibling("lessonfiles")
    if lessons is None or hook.event.endswith("-notify"):
        return
    try:
        if sub in ("bad", "1", "2"):
            score = None if sub == "bad" else int(sub)
            # the note sits in spool/sessions until the next prompt: no credential in it
            # (scrub is None when one may be there and the scrubber did not load: no note)
            kept = hook.scrub(comment) if comment else comment
            if kept:
                lessons.note_after_rating(hook.home, hook.agent, session, kept, score, target)
        else:
            lessons.drop_note(hook.home, hook.agent, session, None if newest else target)
    except OSError as exc:
        hook.log(f"note for the next prompt not written: {exc.strerror or exc}")


def lesson_command(hook, session, state, sub, text, cwd):
    """`/rl lesson <text>`: spool it for the service (which words the lessons files);
    `/rl lessons`: what a new session in ``cwd`` is told now (``lessonfiles.read``).

    The record carries ``cwd``, the folder the user typed it in: the lesson is that
    project's. Without it the service took the folder of the session's newest turn, and
    as a session's first prompt (or after /clear) there is none: the lesson was told in
    every project, to every agent. The reply says where it applies."""
    lessons = sibling("lessonfiles")
    on = lessons is not None and lessons.is_on(hook.home, hook.agent)
    if sub == "lessons":
        if not on:
            return (f"rltray: lessons are off for this agent; new sessions are told none "
                    f"(`rltray lessons on --agent {hook.agent}` turns them on).")
        told = lessons.read(hook.home, hook.agent, cwd)
        if told is None:
            return "rltray: no lessons for this folder yet; new sessions here are told none."
        return "rltray: new sessions in this folder are told:\n" + told
    if not text:
        return hook.usage
    most = getattr(lessons, "MAX_LESSON_CHARS", None)
    if most is not None and len(norm(text)) > most:  # the store would refuse it
        return (f"rltray: a lesson is at most {most} characters and this one has "
                f"{len(norm(text))}, so it was not saved; say it shorter.")
    try:
        hook.spool({"kind": "command", "agent": hook.agent, "session": session,
                    "command": "lesson", "target_turn": text_or_none(state.get("last_turn")),
                    "comment": cap(text, 2000), "cwd": cap(cwd, 4096) if cwd else None,
                    "captured_at": iso_now(), "event": hook.event})
    except Exception as exc:
        written = hook.log(f"command not recorded: {type(exc).__name__}: {exc}")
        return unrecorded(hook.home, exc, written)
    # no folder in the payload: the service takes the session's (app/spool.py _add_lesson)
    where = (f"for {shown_folder(cwd)}" if cwd
             else "for this session's folder, or every project if rltray knows none")
    later = "" if on else "; lessons are off for this agent, so sessions are not told it yet"
    return f'rltray: saved the lesson ("{preview(text, 60)}") {where}{later}.'


def shown_folder(path):
    """``path`` as the user reads it: the home folder as ``~`` (app/words.py's ``folder``)."""
    home = (getenv("HOME") or getenv("USERPROFILE") or "").rstrip("/\\")
    if home and path.startswith(home) and path[len(home):len(home) + 1] in ("", "/", "\\"):
        return "~" + path[len(home):]
    return path


def start_hook(hook, payload, out):
    """SessionStart: the lessons the service wrote for this agent and folder become the
    session's context, word for word; no lessons, no output. An agent whose module sets
    ``LESSONS_CHANGED`` also shows the user that sentence when the text differs from the
    last session's in this folder (``lessons_changed``); one that sets ``LESSONS_KEPT``
    keeps a start's context in the session's history, so a resumed session already given
    this text is not given it again (``given_before``)."""
    lessons = sibling("lessonfiles")
    if lessons is None:
        hook.log("lessonfiles.py is not beside the hook program; no lessons given")
        return
    cwd = text_or_none(payload.get("cwd"))
    text = lessons.read(hook.home, hook.agent, cwd)
    tell = getattr(hook.module, "LESSONS_CHANGED", None)
    changed = False
    if tell:
        try:
            changed = lessons_changed(hook, lessons.key(cwd) if cwd else lessons.GLOBAL, text)
        except OSError as exc:
            hook.log(f"lessons seen before not checked: {exc.strerror or exc}")
    if text is None:
        return
    if getattr(hook.module, "LESSONS_KEPT", False) and given_before(hook, payload, text):
        return
    answer = {"hookSpecificOutput": {"hookEventName": "SessionStart", "additionalContext": text}}
    if changed:
        answer["systemMessage"] = tell
    out(answer)


def given_before(hook, payload, text):
    """Whether this session was given exactly ``text`` at an earlier start; remembers it."""
    session = session_of(payload, "session_id")
    if session is None:
        return False
    state, folder = hook.load_state(session)
    digest = _sha256_hex(text)[:16]
    if state.get("lessons_given") == digest:
        if folder is not None:
            folder.close()
        return True
    state["lessons_given"] = digest
    hook.save_state(folder, session, state)
    return False


SEEN_KEEP = 200  # folders whose last lessons ``lessons_changed`` remembers, newest kept


def lessons_changed(hook, key, text):
    """Whether ``text`` (None: none) differs from the last session's in folder ``key``, and
    remember it: ``spool/sessions/<agent>.lessons-seen`` maps key -> hash (not pruned)."""
    name = f"{hook.agent}.lessons-seen"
    folder = open_dir(hook.home, "spool", "sessions")
    try:
        try:
            data, _ = read_regular(lambda flags: folder.open(name, flags), 64 * 1024)
            seen = loads(data.decode("utf-8", "replace"))
        except (FileNotFoundError, ValueError):  # none yet, or not ours to trust
            seen = {}
        if not isinstance(seen, dict):
            seen = {}
        digest = _sha256_hex(text)[:16] if text else None
        if seen.get(key) == digest:
            return False
        seen.pop(key, None)
        if digest is not None:
            seen[key] = digest
        for old in list(seen)[: max(0, len(seen) - SEEN_KEEP)]:
            del seen[old]
        write_atomic(folder, name, dumps(seen).encode("ascii"))
        return digest is not None
    finally:
        folder.close()


def unrecorded(home, exc, log_path):
    """One sentence for a `/rl` command that could not be spooled, naming the folder problem."""
    import errno

    spool = join(home, "spool", "incoming")
    if isinstance(exc, UnsafePath):
        problem = f"rltray's data folder is unsafe to write ({exc})"
    elif isinstance(exc, OSError) and exc.errno in (errno.EACCES, errno.EPERM, errno.EROFS):
        problem = f"rltray's data folder is not writable ({spool}: {exc.strerror})"
    elif isinstance(exc, OSError):
        problem = f"rltray's data folder could not be written ({spool}: {exc.strerror or exc})"
    else:
        problem = f"of an unexpected {type(exc).__name__}"
    details = f"; details in {log_path}" if log_path else ""
    return f"rltray: could not record that command because {problem}{details}."


def status_text(home):
    """Counts for `/rl status`, read-only from the tray's database plus the waiting spool files."""
    try:
        folder = open_dir(home, "spool", "incoming")
        try:
            waiting = sum(1 for n in folder.names() if n.endswith(".json") and n[0] != ".")
        finally:
            folder.close()
    except OSError:
        waiting = 0
    wait = (f"{waiting} record(s) waiting for the tray" if waiting
            else "nothing waiting in the spool")
    db = join(home, "rltray.db")
    if not isfile(db):
        return f"rltray: no database yet (the tray has not run); {wait}."
    try:
        turns, good, bad = read_counts(db)
    except Exception as exc:
        return f"rltray: could not read the database ({type(exc).__name__}); {wait}."
    return (f"rltray: {turns} turn(s) captured, {good} rated good, {bad} rated bad, "
            f"{max(turns - good - bad, 0)} unrated; {wait}.")


def read_counts(db):
    """(turns, good, bad) from a read-only connection; never writes, never waits long."""
    import sqlite3

    path = abspath(db).replace("\\", "/")
    uri = "file:" + ("/" if not path.startswith("/") else "") + (
        path.replace("%", "%25").replace("?", "%3f").replace("#", "%23")) + "?mode=ro"
    con = sqlite3.connect(uri, uri=True, timeout=0.5)
    try:
        turns = con.execute("SELECT count(*) FROM turns").fetchone()[0]
        rows = con.execute(
            "SELECT value, count(*) FROM ratings WHERE withdrawn_at IS NULL GROUP BY value"
        ).fetchall()
    finally:
        con.close()
    by_value = dict(rows)
    return turns, by_value.get(1, 0), by_value.get(-1, 0)


# -- entry point ------------------------------------------------------------------------------


def build_command(event, home, python, chain, script):
    """``capture.build_command``'s body (kept here: capture.py is compiled on every hook run).

    ``script`` is capture.py's path. Called by the installers, never by a hook run.
    """
    import json
    import os

    if not is_event(event):
        known = ", ".join(known_events())
        raise ValueError(f"unknown hook event {event!r}; expected one of {known}")
    argv = [str(python), "-I", "-S", os.path.abspath(script), "--home", os.fspath(home)]
    if chain:
        argv += ["--chain", json.dumps([str(part) for part in chain])]
    argv.append(event)
    return argv


def run():
    """capture.py's entry, right after it imported this module with its folder first on
    sys.path: takes that folder off again, runs ``main``, flushes stdout and leaves through
    ``_exit(0)``. Every file the hook wrote is closed by then; the interpreter's ordinary
    teardown (a garbage collection, every module freed) costs ~15% of a Stop's run and
    does nothing a hook needs."""
    del sys.path[0]
    try:
        main()
        sys.stdout.flush()
    finally:
        _os._exit(0)


def parse_argv(argv):
    """(home, chain argv or None, event, arguments after the event)."""
    home = chain = event = None
    extra = []
    i = 0
    while i < len(argv):
        arg = argv[i]
        if event is not None:
            extra.append(arg)
        elif arg in ("--home", "--chain") and i + 1 < len(argv):
            if arg == "--home":
                home = argv[i + 1]
            else:
                chain = loads(argv[i + 1])
                if not (isinstance(chain, list) and chain
                        and all(isinstance(c, str) for c in chain)):
                    raise ValueError("--chain must be a JSON list of strings")
            i += 1
        elif arg.startswith("--home="):
            home = arg[7:]
        elif is_event(arg):
            event = arg
        else:
            raise ValueError(f"unexpected argument {arg[:80]!r}")
        i += 1
    return home or getenv("RLTRAY_HOME") or None, chain, event, extra


def spawn_detached(argv):
    """Start the user's previous notify program and forget it (no wait, stdio to devnull)."""
    if POSIX and hasattr(_os, "posix_spawnp"):
        null = "/dev/null"
        actions = [(_os.POSIX_SPAWN_OPEN, 0, null, _os.O_RDONLY, 0),
                   (_os.POSIX_SPAWN_OPEN, 1, null, _os.O_WRONLY, 0),
                   (_os.POSIX_SPAWN_OPEN, 2, null, _os.O_WRONLY, 0)]
        try:
            _os.posix_spawnp(argv[0], argv, environ(), file_actions=actions, setsid=True)
            return
        except NotImplementedError:
            pass
    import subprocess

    extra = ({"creationflags": subprocess.DETACHED_PROCESS | subprocess.CREATE_NEW_PROCESS_GROUP}
             if not POSIX else {"start_new_session": True})
    subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                     stderr=subprocess.DEVNULL, close_fds=True, **extra)


def read_stdin(hook):
    stream = getattr(sys.stdin, "buffer", None)
    if stream is None:
        return None
    data = stream.read(MAX_STDIN + 1)
    if len(data) > MAX_STDIN:
        hook.log(f"payload over {MAX_STDIN} bytes; skipped")
        return None
    return data.decode("utf-8", "replace")


def write_stdout(obj):
    sys.stdout.write(dumps(obj) + "\n")
    sys.stdout.flush()


def agent_events(prefix):
    """The events module of the agent whose events start with ``prefix`` (``events_<prefix>``
    beside this file), loaded once, or None when there is none; it reaches the shared
    helpers as its ``core``. The module names its agent, its events and its `/rl` usage,
    so a new agent adds a module here and touches nothing in this file."""
    if not prefix.isidentifier():
        return None
    module = sibling("events_" + prefix)
    if module is not None:
        module.core = sys.modules[__name__]
    return module


def sibling(name):
    """The stdlib-only module ``name`` beside this file (an agent's events, ``lessonfiles``),
    imported once by location; None when it is not there."""
    module = sys.modules.get(name)
    if module is None:
        here = dirname(abspath(__file__))
        sys.path.insert(0, here)
        try:
            module = __import__(name)
        except ImportError:
            return None
        finally:
            sys.path.remove(here)
    return module


def is_event(arg):
    """Whether ``arg`` is ``<prefix>-<event>`` of an agent's events module."""
    prefix, dash, name = arg.partition("-")
    module = agent_events(prefix) if dash else None
    return module is not None and name in module.EVENTS


def known_events():
    """Every event of every agent's module beside this file (messages and installers).

    A source tree has ``events_<prefix>.py``; the bundle ships them as ``.pyc``.
    """
    here = dirname(abspath(__file__))
    stems = (f.rpartition(".")[0] for f in _os.listdir(here) if f.endswith((".py", ".pyc")))
    prefixes = sorted({s[7:] for s in stems if s.startswith("events_")})
    return [f"{p}-{n}" for p in prefixes for n in agent_events(p).EVENTS]


def main(argv=None, out=write_stdout):
    """Run one hook event; always returns 0 (problems go to the hook log)."""
    argv = sys.argv[1:] if argv is None else list(argv)
    home, event = getenv("RLTRAY_HOME") or None, "hook"
    try:
        home, chain, parsed, extra = parse_argv(argv)
        event = parsed or "hook"
        hook = Hook(home, event)
        if parsed is None:
            hook.log(f"no event given; expected one of {', '.join(known_events())}")
            return 0
        raw = extra[-1] if event == "codex-notify" and extra else None
        if chain:
            try:
                spawn_detached(chain + ([raw] if raw is not None else []))
            except Exception as exc:
                hook.log(f"chained notify program not started: {type(exc).__name__}: {exc}")
        if home is None:
            return 0  # nowhere to record or log
        if event != "codex-notify":
            raw = read_stdin(hook)
        if raw is None:
            if event == "codex-notify":
                hook.log("no payload argument")
            return 0
        payload = loads(raw)
        if not isinstance(payload, dict):
            raise ValueError(f"payload is a JSON {type(payload).__name__}, not an object")
        prefix, _, name = event.partition("-")
        if name == "prompt":
            prompt_hook(hook, payload, out)
        elif name == "start":
            start_hook(hook, payload, out)
        elif name == "expand":
            expand_hook(hook, payload, out)
        else:  # stop, notify: the agent's own module reads its payload
            getattr(agent_events(prefix), name)(hook, payload)
    except Exception as exc:
        log(home, event, f"{type(exc).__name__}: {str(exc)[:300]}")
    return 0


if __name__ == "__main__":
    try:  # noqa: SIM105
        main()
    except BaseException:  # e.g. KeyboardInterrupt or a closed stdout: still never fail the agent
        pass
    sys.exit(0)
