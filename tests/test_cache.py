"""The kernel cache without a GPU: content addresses, atomic writes, corrupt files, LRU eviction."""

import json
import os
import time

import pytest
from tilers import cache

ELF_MAGIC = b"\x7fELF"

SOURCE = r"""
extern "C" __global__ void copy_kernel(const float* __restrict__ x, float* __restrict__ y, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] = x[i];
}
"""


@pytest.fixture(autouse=True)
def cache_dir(tmp_path, monkeypatch):
    """Every test gets its own cache folder and a clean memo."""
    monkeypatch.setenv("TILERS_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv("TILERS_CACHE", raising=False)
    monkeypatch.delenv("TILERS_CACHE_MAX_BYTES", raising=False)
    cache.clear_memo()
    cache.nvrtc_version_for_key.cache_clear()
    yield tmp_path / "cache"
    cache.clear_memo()
    cache.nvrtc_version_for_key.cache_clear()


def age(path, seconds_ago):
    """Set a file's modification time (the cache's recency) to `seconds_ago`."""
    when = time.time() - seconds_ago
    os.utime(path, (when, when))


# --- keys ----------------------------------------------------------------------------------


def test_cubin_key_depends_on_source_arch_nvrtc_and_options():
    base = cache.cubin_key(SOURCE, "sm_90a", "13.0", ["-arch=sm_90a", "-std=c++17"])
    assert base == cache.cubin_key(SOURCE, "sm_90a", "13.0", ["-arch=sm_90a", "-std=c++17"])
    others = [
        cache.cubin_key(SOURCE + " ", "sm_90a", "13.0", ["-arch=sm_90a", "-std=c++17"]),
        cache.cubin_key(SOURCE, "sm_80", "13.0", ["-arch=sm_90a", "-std=c++17"]),
        cache.cubin_key(SOURCE, "sm_90a", "13.5", ["-arch=sm_90a", "-std=c++17"]),
        cache.cubin_key(SOURCE, "sm_90a", "13.0", ["-arch=sm_90a", "-std=c++17", "-lineinfo"]),
    ]
    assert len({base, *others}) == 5


def test_default_cache_dir(monkeypatch):
    monkeypatch.delenv("TILERS_CACHE_DIR")
    monkeypatch.setenv("HOME", "/home/someone")
    assert cache.cache_dir() == "/home/someone/.cache/tilers"


# --- the disk cache ----------------------------------------------------------------------------


def test_put_then_get(tmp_path):
    disk = cache.DiskCache(str(tmp_path / "d"), max_bytes=1 << 20)
    assert disk.get("a") is None
    assert disk.put("a", b"payload")
    assert disk.get("a") == b"payload"
    assert os.listdir(tmp_path / "d") == ["a.bin"]  # no temporary file left behind


def test_a_failed_write_keeps_the_old_entry_and_leaves_no_temporary(tmp_path, monkeypatch):
    disk = cache.DiskCache(str(tmp_path / "d"), max_bytes=1 << 20)
    disk.put("a", b"old")

    def fail(*args):
        raise OSError("disk full")

    monkeypatch.setattr(cache.os, "replace", fail)
    assert not disk.put("a", b"new")
    monkeypatch.undo()
    assert disk.get("a") == b"old"
    assert os.listdir(tmp_path / "d") == ["a.bin"]


@pytest.mark.parametrize(
    "damage",
    [
        lambda blob: blob[: len(blob) - 3],  # torn write
        lambda blob: blob[:-1] + bytes([blob[-1] ^ 1]),  # a flipped bit
        lambda blob: b"garbage",  # not a cache file at all
        lambda blob: b"",  # empty
    ],
    ids=["truncated", "bit-flip", "garbage", "empty"],
)
def test_a_corrupt_entry_is_a_miss_and_is_removed(tmp_path, damage):
    disk = cache.DiskCache(str(tmp_path / "d"), max_bytes=1 << 20)
    disk.put("a", b"payload" * 100)
    path = disk.path("a")
    with open(path, "rb") as file:
        blob = file.read()
    with open(path, "wb") as file:
        file.write(damage(blob))
    assert disk.get("a") is None
    assert not os.path.exists(path)


def test_eviction_removes_the_least_recently_used_first(tmp_path):
    entry = len(cache._wrap(b"x" * 1000))
    disk = cache.DiskCache(str(tmp_path / "d"), max_bytes=3 * entry)
    for key, seconds_ago in [("a", 300), ("b", 200), ("c", 100)]:
        disk.put(key, b"x" * 1000)
        age(disk.path(key), seconds_ago)
    assert disk.get("a") == b"x" * 1000  # a hit: "a" is now the most recent
    disk.put("d", b"x" * 1000)  # over the cap by one entry
    assert disk.get("b") is None  # the least recently used went
    assert disk.get("a") is not None and disk.get("c") is not None
    assert disk.get("d") is not None
    assert disk.size() <= 3 * entry


def test_eviction_keeps_the_folder_under_the_cap(tmp_path):
    disk = cache.DiskCache(str(tmp_path / "d"), max_bytes=10_000)
    for i in range(50):
        disk.put(f"k{i}", os.urandom(900))
    assert disk.size() <= 10_000
    assert disk.get("k49") is not None  # the newest survive


def test_an_entry_over_the_cap_is_not_stored(tmp_path):
    disk = cache.DiskCache(str(tmp_path / "d"), max_bytes=100)
    assert not disk.put("big", b"x" * 1000)
    assert disk.get("big") is None


def test_stale_temporaries_are_removed(tmp_path):
    disk = cache.DiskCache(str(tmp_path / "d"), max_bytes=1 << 20)
    disk.put("a", b"1")
    stale = tmp_path / "d" / ".tmp-123-456-b.bin"
    fresh = tmp_path / "d" / ".tmp-123-789-c.bin"
    stale.write_bytes(b"half")
    fresh.write_bytes(b"half")
    age(stale, 2 * cache.STALE_TEMPORARY_SECONDS)
    disk.evict()
    assert not stale.exists()
    assert fresh.exists()  # possibly a writer at work


def test_an_unwritable_folder_is_not_an_error(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("not a folder")
    disk = cache.DiskCache(str(blocker / "d"), max_bytes=1 << 20)
    assert not disk.put("a", b"1")
    assert disk.get("a") is None


# --- cubins: memo, disk, NVRTC ---------------------------------------------------------------------


def test_get_cubin_compiles_once_then_reads_the_memo_then_the_disk(cache_dir):
    before = dict(cache.stats)
    first = cache.get_cubin(SOURCE, "sm_90a", "copy")
    assert first.startswith(ELF_MAGIC)
    assert cache.stats["nvrtc"] == before["nvrtc"] + 1
    assert cache.get_cubin(SOURCE, "sm_90a", "copy") is first  # the memo: no hashing, no I/O
    assert cache.stats["memo"] == before["memo"] + 1
    cache.clear_memo()  # as in a new process
    assert cache.get_cubin(SOURCE, "sm_90a", "copy") == first
    assert cache.stats["disk"] == before["disk"] + 1
    assert cache.stats["nvrtc"] == before["nvrtc"] + 1
    files = os.listdir(cache_dir / "cubins")
    assert len(files) == 1 and files[0].endswith(".cubin")


def test_get_cubin_recompiles_over_a_corrupt_file(cache_dir):
    first = cache.get_cubin(SOURCE, "sm_80", "copy")
    (path,) = (cache_dir / "cubins").iterdir()
    path.write_bytes(path.read_bytes()[:100])
    cache.clear_memo()
    nvrtc_before = cache.stats["nvrtc"]
    assert cache.get_cubin(SOURCE, "sm_80", "copy") == first
    assert cache.stats["nvrtc"] == nvrtc_before + 1


def test_options_are_part_of_the_address(cache_dir):
    cache.get_cubin(SOURCE, "sm_90a", "copy")
    cache.get_cubin(SOURCE, "sm_90a", "copy", lineinfo=True)
    cache.get_cubin(SOURCE, "sm_80", "copy")
    assert len(os.listdir(cache_dir / "cubins")) == 3


def test_the_disk_cache_can_be_turned_off(cache_dir, monkeypatch):
    monkeypatch.setenv("TILERS_CACHE", "0")
    assert cache.get_cubin(SOURCE, "sm_90a", "copy").startswith(ELF_MAGIC)
    assert not (cache_dir / "cubins").exists()


def test_the_size_cap_comes_from_the_environment(monkeypatch):
    monkeypatch.setenv("TILERS_CACHE_MAX_BYTES", "12345")
    assert cache.cubin_cache().max_bytes == 12345


def test_nvrtc_version_comes_from_the_fingerprint_memo(cache_dir):
    from tilers import runtime

    fingerprint = cache.nvrtc_library_fingerprint()
    if fingerprint is None:
        pytest.skip("NVRTC is not installed from the wheel here")
    real = "{}.{}".format(*runtime.nvrtc_version())
    assert cache.nvrtc_version_for_key() == real
    with open(cache_dir / "nvrtc-versions.json") as file:
        assert json.load(file) == {fingerprint: real}
    # the memo is what a new process reads: a planted version shows it loads nothing
    (cache_dir / "nvrtc-versions.json").write_text(json.dumps({fingerprint: "99.9"}))
    cache.nvrtc_version_for_key.cache_clear()
    assert cache.nvrtc_version_for_key() == "99.9"
    # a corrupt memo file is rebuilt
    (cache_dir / "nvrtc-versions.json").write_text("{not json")
    cache.nvrtc_version_for_key.cache_clear()
    assert cache.nvrtc_version_for_key() == real


def test_a_wrong_fingerprint_memo_is_corrected_on_a_miss(cache_dir):
    fingerprint = cache.nvrtc_library_fingerprint()
    if fingerprint is None:
        pytest.skip("NVRTC is not installed from the wheel here")
    os.makedirs(cache_dir, exist_ok=True)
    (cache_dir / "nvrtc-versions.json").write_text(json.dumps({fingerprint: "99.9"}))
    try:
        cache.get_cubin(SOURCE, "sm_90a", "copy")  # a miss loads NVRTC: its version wins
        assert cache.nvrtc_version_for_key() != "99.9"
    finally:
        cache._trust_fingerprint(True)


def test_kernel_cubin_goes_through_the_cache(cache_dir):
    import sys

    sys.path.insert(0, os.path.dirname(__file__))
    import kernels
    import tilers

    kernel = tilers.compile(kernels.add(64, 64), target="cuda:sm_90a")
    assert kernel.cubin.startswith(ELF_MAGIC)
    assert len(os.listdir(cache_dir / "cubins")) == 1


# --- whose folder is it ----------------------------------------------------------------------


def test_folders_and_files_are_private_to_the_user(tmp_path):
    disk = cache.DiskCache(str(tmp_path / "a" / "b"), max_bytes=1 << 20)
    assert disk.put("k", b"payload")
    for folder in (tmp_path / "a", tmp_path / "a" / "b"):
        assert os.stat(folder).st_mode & 0o777 == 0o700
    assert os.stat(disk.path("k")).st_mode & 0o777 == 0o600


@pytest.mark.parametrize("mode", [0o777, 0o775, 0o757, 0o1777])
def test_a_folder_others_can_write_is_not_read_from(tmp_path, mode):
    folder = tmp_path / f"shared-{mode:o}"
    disk = cache.DiskCache(str(folder), max_bytes=1 << 20)
    assert disk.put("k", b"planted?")
    os.chmod(folder, mode)
    with pytest.warns(RuntimeWarning, match=f"not using the cache folder {folder}"):
        assert disk.get("k") is None
    assert not disk.put("other", b"x")  # nor written to
    os.chmod(folder, 0o700)
    assert disk.get("k") == b"planted?"


def test_an_entry_others_can_write_is_not_read(tmp_path):
    disk = cache.DiskCache(str(tmp_path / "d"), max_bytes=1 << 20)
    disk.put("k", b"payload")
    os.chmod(disk.path("k"), 0o666)
    assert disk.get("k") is None


def _owned_by_someone_else(path, monkeypatch):
    """Make `path` look owned by another user: chown it (as root), or pretend to be someone
    else (otherwise)."""
    if os.geteuid() == 0:
        os.chown(path, 4242, 4242)
    else:
        monkeypatch.setattr(cache.os, "getuid", lambda: os.geteuid() + 4242)


def test_a_folder_or_entry_owned_by_another_user_is_not_read(tmp_path, monkeypatch):
    disk = cache.DiskCache(str(tmp_path / "theirs"), max_bytes=1 << 20)
    disk.put("k", b"payload")
    _owned_by_someone_else(disk.path("k"), monkeypatch)
    assert disk.get("k") is None
    _owned_by_someone_else(tmp_path / "theirs", monkeypatch)
    with pytest.warns(RuntimeWarning, match="owned by another user"):
        assert disk.get("k") is None


def test_a_cache_root_others_can_write_falls_back_to_compiling(cache_dir, monkeypatch):
    cache.get_cubin(SOURCE, "sm_80", "copy")
    cache.clear_memo()
    os.chmod(cache_dir, 0o777)
    before = dict(cache.stats)
    with pytest.warns(RuntimeWarning, match=f"not using the cache folder {cache_dir}"):
        cubin = cache.get_cubin(SOURCE, "sm_80", "copy")
    assert cubin[:4] == ELF_MAGIC
    assert cache.stats["nvrtc"] == before["nvrtc"] + 1 and cache.stats["disk"] == before["disk"]


@pytest.mark.parametrize("text, value", [
    ("1073741824", 1 << 30), ("1G", 1 << 30), ("1g", 1 << 30), ("512M", 512 << 20),
    ("64KiB", 64 << 10), ("2GB", 2 << 30), ("1.5G", 3 << 29), ("100B", 100),
])
def test_the_size_cap_takes_suffixes(monkeypatch, text, value):
    monkeypatch.setenv("TILERS_CACHE_MAX_BYTES", text)
    assert cache.max_bytes() == value


@pytest.mark.parametrize("text", ["lots", "1X", "-5", "G"])
def test_a_bad_size_cap_names_the_variable(monkeypatch, text):
    monkeypatch.setenv("TILERS_CACHE_MAX_BYTES", text)
    with pytest.raises(ValueError, match=r"TILERS_CACHE_MAX_BYTES=.*expected a size in bytes"):
        cache.max_bytes()
