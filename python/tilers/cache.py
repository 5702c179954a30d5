"""The kernel cache: cubins on disk, content-addressed, with an in-process memo and LRU eviction.

A cubin is filed under the SHA-256 of everything that decides its bytes: the CUDA source,
the NVRTC command line (architecture and options) and NVRTC's version. Files are written
atomically (a temporary file renamed into place), carry a length and a CRC so that a torn
or corrupt file reads as a miss (and is removed), and the folder is kept under a size cap
by removing the least recently used files (a hit refreshes a file's modification time).

Where: ``$TILERS_CACHE_DIR`` or ``~/.cache/tilers``; cubins in ``cubins/``, tuning
records (tilers/autotuner.py) in ``tuning/``. The cap: ``$TILERS_CACHE_MAX_BYTES``
(bytes, or with a K/M/G/T suffix in powers of 1024; default 1G); ``TILERS_CACHE=0`` turns
the disk cache off (the memo stays).

A cubin from the cache runs on the GPU with the user's rights, so the cache trusts only
what no other user could have put there, as ssh does with its keys: folders tilers creates
are private (0700) and files 0600, and a folder or entry that another user owns, or that
others can write, is neither read nor written (a one-time warning names it; kernels are
compiled instead).
"""

from __future__ import annotations

import collections
import functools
import hashlib
import json
import os
import re
import struct
import sys
import threading
import time
import warnings
import zlib

DEFAULT_MAX_BYTES = 1 << 30

# A temporary file older than this was left by a writer that died; eviction removes it.
STALE_TEMPORARY_SECONDS = 3600

MAGIC = b"tilers-cache-1\n"
HEADER = struct.Struct("<QI")  # payload length, CRC-32 of the payload


def cache_dir() -> str:
    """The root of tilers' on-disk caches (``$TILERS_CACHE_DIR`` or ``~/.cache/tilers``)."""
    root = os.environ.get("TILERS_CACHE_DIR")
    if root:
        return root
    return os.path.join(os.path.expanduser("~"), ".cache", "tilers")


# tilers.disable_cache() / enable_cache() (TileLang's names): None follows $TILERS_CACHE
_enabled: bool | None = None


def disk_cache_enabled() -> bool:
    if _enabled is not None:
        return _enabled
    return os.environ.get("TILERS_CACHE", "1") != "0"


def set_enabled(enabled: bool | None) -> None:
    global _enabled
    _enabled = enabled


_SIZE_UNITS = {"": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40}


def max_bytes() -> int:
    text = os.environ.get("TILERS_CACHE_MAX_BYTES")
    return parse_size(text, "TILERS_CACHE_MAX_BYTES") if text else DEFAULT_MAX_BYTES


def parse_size(text: str, name: str) -> int:
    """Bytes from "1073741824", "512M", "1G", "1.5GiB" (K, M, G, T are powers of 1024)."""
    match = re.fullmatch(r"\s*(\d+(?:\.\d*)?)\s*([kKmMgGtT]?)(?:i?[bB])?\s*", text)
    if match is None:
        raise ValueError(
            f"{name}={text!r}: expected a size in bytes, such as 1073741824, 512M or 1G "
            "(K, M, G and T are powers of 1024)"
        )
    return int(float(match[1]) * _SIZE_UNITS[match[2].lower()])


# --- whose folder is it ------------------------------------------------------------------

_warned_folders: set = set()


def untrusted_reason(stat_result) -> str | None:
    """Why a file or folder with this `os.stat` result may hold what another user put
    there (owned by someone else, or writable by group or others), or None."""
    if not hasattr(os, "getuid"):  # no POSIX owners (Windows): nothing to check
        return None
    if stat_result.st_uid not in (os.getuid(), 0):
        return f"it is owned by another user (uid {stat_result.st_uid})"
    if stat_result.st_mode & 0o022:
        return f"other users can write it (mode {stat_result.st_mode & 0o777:o})"
    return None


def folder_trusted(folder: str, root: str | None = None) -> bool:
    """Whether `folder` and each folder above it up to `root` (default: the cache root)
    are the user's own and closed to other writers; a missing folder is trusted (tilers
    creates it private). The first refusal of a folder warns once per process."""
    root = os.path.abspath(root if root is not None else cache_dir())
    path = os.path.abspath(folder)
    while True:
        try:
            reason = untrusted_reason(os.stat(path))
        except OSError:
            reason = None
        if reason is not None:
            if path not in _warned_folders:
                _warned_folders.add(path)
                warnings.warn(
                    f"tilers: not using the cache folder {path}: {reason}; kernels and "
                    "tuning records found there could have been put there by someone else, "
                    "so they are compiled and searched again instead (chmod go-w it, or "
                    "point TILERS_CACHE_DIR at a folder of your own)",
                    RuntimeWarning, stacklevel=3,
                )
            return False
        if path == root or not path.startswith(root + os.sep):
            return True
        path = os.path.dirname(path)


def make_private_dirs(folder: str) -> None:
    """Create `folder` and the folders above it that are missing, each readable and
    writable by the user alone (0700)."""
    missing = []
    path = os.path.abspath(folder)
    while not os.path.isdir(path):
        missing.append(path)
        parent = os.path.dirname(path)
        if parent == path:
            break
        path = parent
    for path in reversed(missing):
        try:
            os.mkdir(path, 0o700)
        except FileExistsError:
            pass


def read_trusted(path: str) -> bytes | None:
    """The bytes of `path`, if it and its folders are trusted (see folder_trusted)."""
    if not folder_trusted(os.path.dirname(path)):
        return None
    try:
        with open(path, "rb") as file:
            # the file opened, not the name looked up: a swapped file is checked too
            if untrusted_reason(os.fstat(file.fileno())) is not None:
                return None
            return file.read()
    except OSError:
        return None


def atomic_write(path: str, data: bytes) -> None:
    """Write `data` to `path` so that a reader sees the old file or the new one, never a mix.
    The file is the user's alone (0600), its folders are created private (0700)."""
    directory = os.path.dirname(path) or "."
    make_private_dirs(directory)
    temporary = os.path.join(
        directory, f".tmp-{os.getpid()}-{threading.get_ident()}-{os.path.basename(path)}"
    )
    try:
        descriptor = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(descriptor, "wb") as file:
            file.write(data)
        os.replace(temporary, path)
    except BaseException:
        try:
            os.remove(temporary)
        except OSError:
            pass
        raise


class DiskCache:
    """Byte strings in files named by their key under one folder.

    ``get`` returns None for a missing, torn or corrupt entry (removing the latter);
    ``put`` writes atomically and then evicts least recently used entries until the
    folder holds at most ``max_bytes``.
    """

    def __init__(self, directory: str, max_bytes: int = DEFAULT_MAX_BYTES, suffix=".bin"):
        self.directory = directory
        self.max_bytes = max_bytes
        self.suffix = suffix

    def path(self, key: str) -> str:
        return os.path.join(self.directory, key + self.suffix)

    def get(self, key: str) -> bytes | None:
        path = self.path(key)
        blob = read_trusted(path)
        if blob is None:
            return None
        payload = _unwrap(blob)
        if payload is None:
            self._remove(path)
            return None
        try:
            os.utime(path)  # recently used: evicted last
        except OSError:
            pass
        return payload

    def put(self, key: str, payload: bytes) -> bool:
        """Store `payload`; False when it could not be written (or is over the cap)."""
        blob = _wrap(payload)
        if len(blob) > self.max_bytes or not folder_trusted(self.directory):
            return False
        try:
            atomic_write(self.path(key), blob)
        except OSError:
            return False
        self.evict()
        return True

    def entries(self) -> list[tuple[float, int, str]]:
        """(modification time, size, path) of every entry, least recently used first."""
        found = []
        try:
            scan = os.scandir(self.directory)
        except OSError:
            return found
        now = time.time()
        with scan:
            for entry in scan:
                try:
                    stat = entry.stat()
                except OSError:
                    continue
                if entry.name.endswith(self.suffix) and not entry.name.startswith("."):
                    found.append((stat.st_mtime, stat.st_size, entry.path))
                elif entry.name.startswith(".tmp-") and now - stat.st_mtime > STALE_TEMPORARY_SECONDS:
                    self._remove(entry.path)
        found.sort()
        return found

    def size(self) -> int:
        return sum(size for _, size, _ in self.entries())

    def evict(self) -> list[str]:
        """Remove least recently used entries until the folder is under the cap."""
        entries = self.entries()
        total = sum(size for _, size, _ in entries)
        removed = []
        for _, size, path in entries:
            if total <= self.max_bytes:
                break
            self._remove(path)
            total -= size
            removed.append(path)
        return removed

    @staticmethod
    def _remove(path: str) -> None:
        try:
            os.remove(path)
        except OSError:
            pass


def _wrap(payload: bytes) -> bytes:
    return MAGIC + HEADER.pack(len(payload), zlib.crc32(payload)) + payload


def _unwrap(blob: bytes) -> bytes | None:
    """The payload of a cache file, or None when the file is not a whole, intact entry."""
    start = len(MAGIC) + HEADER.size
    if len(blob) < start or not blob.startswith(MAGIC):
        return None
    length, crc = HEADER.unpack_from(blob, len(MAGIC))
    payload = blob[start:]
    if len(payload) != length or zlib.crc32(payload) != crc:
        return None
    return payload


# ---------------------------------------------------------------------------------------
# cubins
# ---------------------------------------------------------------------------------------


def cubin_key(source: str, arch: str, nvrtc_version: str, options) -> str:
    """The content address of a cubin: SHA-256 over source, architecture, NVRTC and options."""
    digest = hashlib.sha256()
    header = json.dumps({"arch": arch, "nvrtc": nvrtc_version, "options": list(options)})
    digest.update(header.encode())
    digest.update(b"\0")
    digest.update(source.encode())
    return digest.hexdigest()


def cubin_cache() -> DiskCache:
    return DiskCache(os.path.join(cache_dir(), "cubins"), max_bytes(), suffix=".cubin")


# In-process memo: (source, arch, lineinfo, fast_math) -> cubin. A repeated lookup hashes
# the source string once (Python caches a str's hash), never SHA-256 over it.
MEMO_ENTRIES = 512
_memo: collections.OrderedDict = collections.OrderedDict()
_memo_lock = threading.Lock()

# Counters that tests and bench/compile.py read: where each cubin came from.
stats = {"memo": 0, "disk": 0, "nvrtc": 0}


def get_cubin(
    source: str, arch: str, name: str, lineinfo: bool = False, fast_math: bool = False
) -> bytes:
    """The cubin of `source` for `arch`: from the memo, else the disk cache, else NVRTC."""
    from tilers import runtime

    memo_key = (source, arch, lineinfo, fast_math)
    with _memo_lock:
        cubin = _memo.get(memo_key)
        if cubin is not None:
            _memo.move_to_end(memo_key)
            stats["memo"] += 1
            return cubin
    options = runtime.nvrtc_options(arch, lineinfo=lineinfo, fast_math=fast_math)
    disk = cubin_cache() if disk_cache_enabled() else None
    key = None
    if disk is not None:
        key = cubin_key(source, arch, nvrtc_version_for_key(), options)
        cubin = disk.get(key)
    if cubin is not None:
        stats["disk"] += 1
    else:
        cubin = runtime.nvrtc_compile(source, arch, name, lineinfo=lineinfo, fast_math=fast_math)
        stats["nvrtc"] += 1
        if disk is not None:
            loaded = "{}.{}".format(*runtime.nvrtc_version())
            if loaded != nvrtc_version_for_key():
                # the fingerprinted library is not the one cuda-bindings loaded: trust the latter
                _trust_fingerprint(False)
                key = cubin_key(source, arch, loaded, options)
            disk.put(key, cubin)
    with _memo_lock:
        _memo[memo_key] = cubin
        while len(_memo) > MEMO_ENTRIES:
            _memo.popitem(last=False)
    return cubin


def clear_memo() -> None:
    with _memo_lock:
        _memo.clear()


# ---------------------------------------------------------------------------------------
# NVRTC's version without loading NVRTC
# ---------------------------------------------------------------------------------------
# Loading libnvrtc costs ~15 ms and importing cuda.bindings ~0.1 s, more than a whole
# disk-cache hit may take. The NVRTC wheel's library file is found by a few stat calls;
# its identity (path, size, modification time) maps to the version it reported when it was
# last loaded, kept in nvrtc-versions.json beside the caches. Without the wheel (a system
# NVRTC) the version comes from loading NVRTC.

NVRTC_WHEEL_LIBRARIES = (
    ("nvidia", "cu13", "lib", "libnvrtc.so.13"),
    ("nvidia", "cuda_nvrtc", "lib", "libnvrtc.so.12"),
)

_fingerprint_trusted = True


def _trust_fingerprint(trusted: bool) -> None:
    global _fingerprint_trusted
    _fingerprint_trusted = trusted
    nvrtc_version_for_key.cache_clear()


def nvrtc_library_fingerprint() -> str | None:
    """path:size:mtime of the NVRTC wheel's library on sys.path, or None when there is none."""
    for entry in sys.path:
        if not entry or not os.path.isdir(entry):
            continue
        for parts in NVRTC_WHEEL_LIBRARIES:
            path = os.path.join(entry, *parts)
            try:
                stat = os.stat(path)
            except OSError:
                continue
            return f"{os.path.realpath(path)}:{stat.st_size}:{stat.st_mtime_ns}"
    return None


@functools.cache
def nvrtc_version_for_key() -> str:
    """NVRTC's version as "major.minor", from the fingerprint memo when possible."""
    from tilers import runtime

    fingerprint = nvrtc_library_fingerprint() if _fingerprint_trusted else None
    if fingerprint is None or not disk_cache_enabled():
        return "{}.{}".format(*runtime.nvrtc_version())
    path = os.path.join(cache_dir(), "nvrtc-versions.json")
    try:
        known = json.loads(read_trusted(path) or b"{}")
        if not isinstance(known, dict):
            known = {}
    except ValueError:
        known = {}
    version = known.get(fingerprint)
    if isinstance(version, str):
        return version
    version = "{}.{}".format(*runtime.nvrtc_version())
    known[fingerprint] = version
    try:
        if folder_trusted(cache_dir()):
            atomic_write(path, json.dumps(known, indent=1).encode())
    except OSError:
        pass
    return version
