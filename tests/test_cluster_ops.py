"""A kernel's own thread-block cluster operations (TileLang's): `T.copy_cluster` into a peer
block's shared tile (distributed shared memory), `T.cluster_sync`, `T.block_rank_in_cluster`.
Checked on the CPU: the interpreter against numpy (the cluster's blocks run in turn between
cluster_syncs), every pass on the warp-level model (which reports accesses across blocks
with no cluster_sync between), the generated CUDA (mapa, __cluster_dims__, the cluster
syncs tilers adds at the start and the end) and NVRTC for sm_90a; the mistakes at the
user's line."""

import numpy as np
import pytest
import tilers
import tilers.language as T
from tilers.errors import TileError
from tilers.testing import check_passes


def gather(n, N=64, rows=4, sync=True, dtype="float32", to=0, grid=None):
    """Each block doubles its row of A and writes it into slot `rank` of block `to`'s
    tile; block `to` writes the cluster's rows to B."""

    @T.prim_func
    def k(A: T.Tensor((n * rows, N), dtype), B: T.Tensor((n * rows, N), dtype)):
        with T.ClusterKernel(grid or n * rows, threads=128, cluster_dims=n) as bx:
            mine = T.alloc_shared((N,), dtype)
            got = T.alloc_shared((n, N), dtype)
            rank = T.block_rank_in_cluster()
            for i in T.Parallel(N):
                mine[i] = A[bx, i] * 2
            T.copy_cluster(mine, got[rank, :], dst_block=to)
            if sync:
                T.cluster_sync()
            if rank == to:
                for r, i in T.Parallel(n, N):
                    B[bx - to + r, i] = got[r, i]

    return k



def gather_rows(n, N=64):
    """gather's pattern over a symbolic number of rows M, a row per block: the grid along
    bx is M, checked per call to hold whole clusters of n."""
    M = T.dynamic("M")

    @T.prim_func
    def k(A: T.Tensor((M, N), "float32"), B: T.Tensor((M, N), "float32")):
        with T.ClusterKernel(M, threads=128, cluster_dims=n) as bx:
            mine = T.alloc_shared((N,), "float32")
            got = T.alloc_shared((n, N), "float32")
            rank = T.block_rank_in_cluster()
            for i in T.Parallel(N):
                mine[i] = A[bx, i] * 2
            T.copy_cluster(mine, got[rank, :], dst_block=0)
            T.cluster_sync()
            if rank == 0:
                for r, i in T.Parallel(n, N):
                    B[bx + r, i] = got[r, i]

    return k

def reduce_ring(n, N=96):
    """Each block sends its partial row to the next block of the cluster (a ring), which
    adds it to its own: a fragment source, a traced destination rank, two cluster_syncs."""

    @T.prim_func
    def k(A: T.Tensor((n * 2, N), "float32"), B: T.Tensor((n * 2, N), "float32")):
        with T.ClusterKernel(n * 2, threads=128, cluster_dims=(n, 1, 1)) as bx:
            part = T.alloc_fragment((N,), "float32")
            inbox = T.alloc_shared((N,), "float32")
            rank = T.block_rank_in_cluster()
            for i in T.Parallel(N):
                part[i] = A[bx, i] + 1
            T.cluster_sync()
            T.copy_cluster(part, inbox, dst_block=(rank + 1) % n)
            T.cluster_sync()
            for i in T.Parallel(N):
                B[bx, i] = inbox[i] + part[i]

    return k


def row_max_gather():
    """A reduction's output (a fragment the threads hold in replicas) sent to block 0."""

    @T.prim_func
    def k(A: T.Tensor((4, 64, 64), "float32"), B: T.Tensor((4, 64), "float32")):
        with T.ClusterKernel(4, threads=128, cluster_dims=2) as bx:
            a = T.alloc_fragment((64, 64), "float32")
            m = T.alloc_fragment((64,), "float32")
            both = T.alloc_shared((2, 64), "float32")
            rank = T.block_rank_in_cluster()
            T.copy(A[bx, :, :], a)
            T.reduce_max(a, m, dim=1)
            T.copy_cluster(m, both[rank, :], dst_block=0)
            T.cluster_sync()
            if rank == 0:
                for r, i in T.Parallel(2, 64):
                    B[bx + r, i] = both[r, i]

    return k


def ring_reference(A, n):
    out = np.empty_like(A)
    for b in range(A.shape[0]):
        prev = b - b % n + (b % n - 1) % n
        out[b] = A[prev] + 1 + A[b] + 1
    return out


@pytest.mark.parametrize("n", [2, 4, 8, 16])
def test_gather_on_the_interpreter(n):
    A = np.random.default_rng(n).standard_normal((n * 4, 64)).astype(np.float32)
    B = np.zeros_like(A)
    tilers.compile(gather(n), target="sm_90a")(A, B)
    np.testing.assert_array_equal(B, 2 * A)


@pytest.mark.parametrize("n", [2, 4])
def test_ring_on_the_interpreter(n):
    A = np.random.default_rng(1).standard_normal((n * 2, 96)).astype(np.float32)
    B = np.zeros_like(A)
    tilers.compile(reduce_ring(n), target="sm_90a")(A, B)
    np.testing.assert_allclose(B, ring_reference(A, n), rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize(
    "make",
    [lambda: gather(2), lambda: gather(4, to=3), lambda: gather(2, dtype="float16", N=40), lambda: reduce_ring(4),
     row_max_gather, lambda: gather(16, rows=1, to=9)],
    ids=["gather2", "gather4_to3", "gather_f16_ragged", "ring4", "row_max", "gather16_to9"],
)
def test_every_pass_on_the_cpu_model(make):
    check_passes(make(), arch="sm_90a", check=True, blocks="all")


def test_a_reduction_sent_to_block_0():
    A = np.random.default_rng(3).standard_normal((4, 64, 64)).astype(np.float32)
    B = np.zeros((4, 64), np.float32)
    tilers.compile(row_max_gather(), target="sm_90a")(A, B)
    np.testing.assert_array_equal(B, A.max(axis=2))


def zeroed_through_a_view(sync=True):
    """The tile peers write into, first zeroed through a T.view of another dtype over its
    bytes, then a cluster_sync, so no peer's store lands before the zeros."""

    @T.prim_func
    def k(A: T.Tensor((4, 64), "float32"), B: T.Tensor((4, 64), "float32")):
        with T.ClusterKernel(4, threads=128, cluster_dims=2) as bx:
            got = T.alloc_shared((2, 64), "float32")
            raw = T.view(got, shape=[2, 64], dtype="int32")
            mine = T.alloc_shared((64,), "float32")
            rank = T.block_rank_in_cluster()
            for i in T.Parallel(64):
                mine[i] = A[bx, i] + 1
            for r, i in T.Parallel(2, 64):
                raw[r, i] = 0
            if sync:
                T.cluster_sync()
            T.copy_cluster(mine, got[rank, :], dst_block=0)
            T.cluster_sync()
            if rank == 0:
                for r, i in T.Parallel(2, 64):
                    B[bx + r, i] = got[r, i]

    return k


def test_a_reached_tile_written_through_a_view_waits_for_the_cluster():
    # tilers' wait comes before the first touch of the reached tile's bytes, whatever name
    # it is made through (here the int32 view), not only before the first reach or sync
    k = zeroed_through_a_view()
    src = tilers.compile(k, target="sm_90a").get_kernel_source()
    assert src.index("barrier.cluster.arrive.release") < src.index("mine[") < src.index(
        "barrier.cluster.wait.acquire") < src.index("got_as_int32[")
    check_passes(k, arch="sm_90a", check=True, blocks="all")
    a = np.arange(4 * 64, dtype=np.float32).reshape(4, 64)
    out = np.zeros_like(a)
    tilers.compile(k, target="sm_90a")(a, out)  # numpy arrays: the interpreter
    np.testing.assert_array_equal(out, a + 1)
    # without the user's cluster_sync between the zeros and the peers' stores: a race
    with pytest.raises(AssertionError, match="race across the cluster"):
        check_passes(zeroed_through_a_view(sync=False), arch="sm_90a", check=True, blocks="all")



def test_a_grid_of_symbolic_size_in_clusters():
    # compiled once; each call's grid along bx must hold whole clusters
    k = tilers.compile(gather_rows(4), target="sm_90a")
    assert k.info["cluster"] == [4, 1, 1] and len(k.cubin) > 0
    for m in (4, 12):
        A = np.random.default_rng(m).standard_normal((m, 64)).astype(np.float32)
        B = np.zeros_like(A)
        k(A, B)  # numpy arrays: the interpreter
        np.testing.assert_array_equal(B, 2 * A)
    with pytest.raises(TileError, match="a grid of 6 blocks along x launched in thread-block clusters of 4"):
        k(np.zeros((6, 64), np.float32), np.zeros((6, 64), np.float32))
    check_passes(gather_rows(2), arch="sm_90a", check=True, blocks="all")

def test_a_missing_cluster_sync_is_a_race():
    with pytest.raises(AssertionError, match="race across the cluster"):
        check_passes(gather(2, sync=False), arch="sm_90a", check=True, blocks="all")


def test_generated_cuda():
    k = tilers.compile(gather(4), target="sm_90a")
    src = k.get_kernel_source()
    assert "__cluster_dims__(4, 1, 1)" in src and k.info["cluster"] == [4, 1, 1]
    assert "mapa.u64" in src and "tl_cluster_ptr(&got[" in src
    assert "vector stores [got_cluster x4 (16 bytes)]" in k.report()  # 16-byte stores into the peer
    # tilers' arrive first thing and its wait just before the first store into a peer, then
    # the user's cluster_sync after the stores: past it no block reaches another, so none is
    # added after the last statement
    assert src.count("barrier.cluster.wait.acquire") == 2 and src.count("barrier.cluster.arrive.release") == 2
    assert src.index("barrier.cluster.arrive.release") < src.index("mine[") < src.index(
        "barrier.cluster.wait.acquire") < src.index("tl_cluster_ptr(&got[")
    assert "for the kernel's own cluster operations" in k.report()
    assert len(k.cubin) > 0
    assert tilers.compile(gather(4), target="sm_90a").get_kernel_source() == src  # deterministic
    ring = tilers.compile(reduce_ring(2), target="sm_90a")
    assert len(ring.cubin) > 0 and ring.info["cluster"] == [2, 1, 1]
    assert ring.get_kernel_source().count("barrier.cluster.wait.acquire") == 3  # tilers' wait, the user's two
    # a peer's tile reached after the last cluster_sync (no sync at all here): tilers adds one
    # at the end, so no block exits while another may still reach it
    unsynced = tilers.compile(gather(2, sync=False), target="sm_90a").get_kernel_source()
    assert unsynced.count("barrier.cluster.wait.acquire") == 2
    assert unsynced.rstrip().endswith('asm volatile("barrier.cluster.wait.acquire;" ::: "memory");\n}')


@pytest.mark.parametrize("n", [8, 16])
def test_a_cluster_past_the_portable_size_is_allowed_when_loaded(monkeypatch, n):
    """Clusters of more than 8 blocks (Hopper's non-portable sizes) launch only once the
    function allows them: the kernel passes its cluster to the loader, which sets
    CU_FUNC_ATTRIBUTE_NON_PORTABLE_CLUSTER_SIZE_ALLOWED past 8."""
    from tilers import runtime

    k = tilers.compile(gather(n, rows=2), target="cuda:sm_90a")
    assert f"__cluster_dims__({n}, 1, 1)" in k.get_kernel_source() and len(k.cubin) > 0
    loads = []
    monkeypatch.setattr(runtime, "device_arch", lambda device: "sm_90a")
    monkeypatch.setattr(runtime, "load_kernel", lambda *args: loads.append(args) or runtime.LoadedKernel(0, 1, 2, 3, 0))
    k._load(0)
    assert [(entry, cluster) for _, _, entry, _, cluster in loads] == [(k.info["entry"], n)]


def split_barrier_gather(n, N=64, relaxed=False, touch_between=False, wait_early=False):
    """gather with T.cluster_arrive / T.cluster_wait around work that touches no tile a peer
    reaches (another output): block 0 reads what the others sent after its wait."""

    @T.prim_func
    def k(A: T.Tensor((n * 2, N), "float32"), B: T.Tensor((n * 2, N), "float32"),
          C: T.Tensor((n * 2, N), "float32")):
        with T.ClusterKernel(n * 2, threads=128, cluster_dims=n) as bx:
            mine = T.alloc_shared((N,), "float32")
            got = T.alloc_shared((n, N), "float32")
            other = T.alloc_shared((N,), "float32")
            rank = T.block_rank_in_cluster()
            for i in T.Parallel(N):
                mine[i] = A[bx, i] * 2
            if wait_early:
                T.cluster_arrive()
                T.cluster_wait()
            T.copy_cluster(mine, got[rank, :], dst_block=0)
            if not wait_early:
                if relaxed:
                    T.cluster_arrive_relaxed()
                else:
                    T.cluster_arrive()
            for i in T.Parallel(N):
                other[i] = A[bx, i] + 1
            if touch_between:
                for i in T.Parallel(N):
                    C[bx, i] = got[0, i]
            if not wait_early:
                T.cluster_wait()
            if rank == 0:
                for r, i in T.Parallel(n, N):
                    B[bx + r, i] = got[r, i]
            for i in T.Parallel(N):
                C[bx, i] = other[N - 1 - i]  # another thread's element

    return k


@pytest.mark.parametrize("n", [2, 4])
def test_split_cluster_barrier(n):
    A = np.random.default_rng(n).standard_normal((n * 2, 64)).astype(np.float32)
    B, C = np.zeros_like(A), np.zeros_like(A)
    k = split_barrier_gather(n)
    tilers.compile(k, target="sm_90a")(A, B, C)  # the interpreter
    np.testing.assert_array_equal(B, 2 * A)
    np.testing.assert_array_equal(C, (A + 1)[:, ::-1])
    check_passes(k, arch="sm_90a", check=True, blocks="all")
    c = tilers.compile(k, target="cuda:sm_90a")
    src = c.get_kernel_source()
    assert len(c.cubin) > 0
    # tilers' opening arrive and wait, then the user's arrive after the stores into block 0
    # and wait before block 0 reads them; past the user's wait no block reaches another, so
    # no closing cluster_sync
    arrives = [i for i in range(len(src)) if src.startswith("barrier.cluster.arrive.release", i)]
    waits = [i for i in range(len(src)) if src.startswith("barrier.cluster.wait.acquire", i)]
    assert len(arrives) == 2 and len(waits) == 2
    store = src.index("tl_cluster_ptr(&got[")
    assert arrives[0] < waits[0] < store < arrives[1] < src.index("other[") < waits[1]
    assert tilers.compile(split_barrier_gather(n, relaxed=True), target="cuda:sm_90a").get_kernel_source() == src


def test_split_cluster_barrier_mistakes_the_model_finds():
    # a tile peers reach, read between the block's arrive and wait: ordered with no peer
    with pytest.raises(AssertionError, match="between its cluster_arrive and cluster_wait"):
        check_passes(split_barrier_gather(2, touch_between=True), arch="sm_90a", check=True, blocks="all")
    # the barrier before the stores into block 0: its reads race with them
    with pytest.raises(AssertionError, match="race across the cluster"):
        check_passes(split_barrier_gather(2, wait_early=True), arch="sm_90a", check=True, blocks="all")


@pytest.mark.parametrize("body, message", [
    ("wait", "T.cluster_wait with no T.cluster_arrive before it"),
    ("arrive arrive", r"T.cluster_arrive after a T.cluster_arrive \(line \d+\) with no T.cluster_wait between"),
    ("arrive sync", r"T.cluster_sync after a T.cluster_arrive \(line \d+\) not yet waited for"),
    ("arrive", "T.cluster_arrive with no T.cluster_wait after it in the kernel"),
    ("arrive relaxed", "T.cluster_arrive_relaxed after a T.cluster_arrive"),
    ("branch", "T.cluster_arrive inside a T.If block"),
])
def test_split_cluster_barrier_mistakes_at_the_line(body, message):
    @T.prim_func
    def k(A: T.Tensor((4, 64), "float32")):
        with T.ClusterKernel(4, threads=128, cluster_dims=2) as bx:
            for word in body.split():
                if word == "wait":
                    T.cluster_wait()
                elif word == "arrive":
                    T.cluster_arrive()
                elif word == "relaxed":
                    T.cluster_arrive_relaxed()
                elif word == "sync":
                    T.cluster_sync()
                elif word == "branch":
                    if bx == 0:
                        T.cluster_arrive()
            for i in T.Parallel(64):
                A[bx, i] = A[bx, i] + 1

    with pytest.raises(TileError, match=message) as e:
        tilers.compile(k, target="sm_90a")
    assert "test_cluster_ops.py" in str(e.value)


def test_split_cluster_barrier_in_a_kernel_of_no_cluster():
    @T.prim_func
    def k(A: T.Tensor((8,), "float32")):
        with T.Kernel(1, threads=128):
            T.cluster_arrive()
            T.cluster_wait()
            for i in T.Parallel(8):
                A[i] = A[i] + 1

    c = tilers.compile(k, target="sm_90a")
    assert "cluster barriers" in c.report() and c.info["cluster"] == [1, 1, 1]
    A = np.arange(8, dtype=np.float32)
    c(A)
    np.testing.assert_array_equal(A, np.arange(8) + 1)
    check_passes(k, arch="sm_90a", check=True)

def test_a_kernel_without_cluster_views_has_no_cluster_helpers():
    @T.prim_func
    def k(A: T.Tensor((8,), "float32")):
        with T.Kernel(1, threads=128):
            T.cluster_sync()  # a cluster of one block: a barrier of the block
            for i in T.Parallel(8):
                A[i] = A[i] + 1

    c = tilers.compile(k, target="sm_90a")
    assert "tl_cluster_ptr" not in c.get_kernel_source() and c.info["cluster"] == [1, 1, 1]
    A = np.arange(8, dtype=np.float32)
    c(A)
    np.testing.assert_array_equal(A, np.arange(8) + 1)


def test_a_pipelined_kernel_with_cluster_ops_stays_on_cp_async():
    @T.prim_func
    def k(A: T.Tensor((4, 256, 64), "float16"), B: T.Tensor((4, 64), "float32")):
        with T.ClusterKernel(4, threads=128, cluster_dims=2) as bx:
            tile = T.alloc_shared((64, 64), "float16")
            tile_f = T.alloc_fragment((64, 64), "float32")
            part = T.alloc_fragment((64,), "float32")
            acc = T.alloc_fragment((64,), "float32")
            sums = T.alloc_shared((2, 64), "float32")
            rank = T.block_rank_in_cluster()
            T.clear(acc)
            for k in T.Pipelined(4, num_stages=2):
                T.copy(A[bx, k * 64:(k + 1) * 64, :], tile)
                T.copy(tile, tile_f)
                T.reduce_sum(tile_f, part, dim=0)
                for i in T.Parallel(64):
                    acc[i] += part[i]
            T.copy_cluster(acc, sums[rank, :], dst_block=0)
            T.cluster_sync()
            if rank == 0:
                for r, i in T.Parallel(2, 64):
                    B[bx + r, i] = sums[r, i]

    c = tilers.compile(k, target="sm_90a")
    assert "works across its thread-block cluster itself" in c.report()
    A = np.random.default_rng(0).standard_normal((4, 256, 64)).astype(np.float16)
    B = np.zeros((4, 64), np.float32)
    c(A, B)
    np.testing.assert_allclose(B, A.astype(np.float32).sum(axis=1), rtol=1e-3, atol=1e-3)
    check_passes(k, arch="sm_90a", check=True, blocks="all")


def _error(make, match, target="sm_90a"):
    with pytest.raises(TileError, match=match) as e:
        tilers.compile(make(), target=target)
    return str(e.value)


def test_mistakes_at_the_users_line():
    def no_cluster():
        @T.prim_func
        def k(A: T.Tensor((64,), "float32")):
            with T.Kernel(2, threads=128):
                s = T.alloc_shared((64,), "float32")
                T.copy(A, s)
                T.copy_cluster(s, s, dst_block=1)

        return k

    msg = _error(no_cluster, "no thread-block cluster")
    assert "test_cluster_ops.py" in msg and "T.ClusterKernel" in msg

    def bad_rank():
        @T.prim_func
        def k(A: T.Tensor((64,), "float32")):
            with T.ClusterKernel(2, threads=128, cluster_dims=2):
                s = T.alloc_shared((64,), "float32")
                T.copy(A, s)
                T.copy_cluster(s, s, dst_block=2)

        return k

    _error(bad_rank, "parameter 'dst_block': expected a rank from 0 to 1")

    def barrier():
        @T.prim_func
        def k(A: T.Tensor((64,), "float32")):
            with T.ClusterKernel(2, threads=128, cluster_dims=2):
                s = T.alloc_shared((64,), "float32")
                T.copy(A, s)
                T.copy_cluster(s, s, dst_block=1, remote_barrier=s[0])

        return k

    _error(barrier, "remote_barrier")

    def mask():
        @T.prim_func
        def k(A: T.Tensor((64,), "float32")):
            with T.ClusterKernel(2, threads=128, cluster_dims=2):
                s = T.alloc_shared((64,), "float32")
                T.copy_cluster(A, s, cluster_mask=3)

        return k

    _error(mask, "cluster_mask")

    def global_dst():
        @T.prim_func
        def k(A: T.Tensor((64,), "float32")):
            with T.ClusterKernel(2, threads=128, cluster_dims=2):
                s = T.alloc_shared((64,), "float32")
                T.copy_cluster(s, A, dst_block=1)

        return k

    _error(global_dst, "parameter 'dst': expected a T.alloc_shared tile")

    def sync_in_branch():
        @T.prim_func
        def k(A: T.Tensor((64,), "float32")):
            with T.ClusterKernel(2, threads=128, cluster_dims=2) as bx:
                if bx == 0:
                    T.cluster_sync()

        return k

    msg = _error(sync_in_branch, "T.cluster_sync inside a T.If block")
    assert "test_cluster_ops.py" in msg


@pytest.mark.parametrize(
    "cluster, grid, target, match",
    [
        ((1, 2), 4, "sm_90a", "such clusters run along bx"),
        (32, 32, "sm_90a", "16 blocks in all at most"),
        (2, 3, "sm_90a", "not a multiple of 2"),
        (2, 4, "sm_80", "no thread-block clusters"),
    ],
)
def test_clusters_it_cannot_launch(cluster, grid, target, match):
    def make():
        @T.prim_func
        def k(A: T.Tensor((64,), "float32")):
            with T.ClusterKernel(grid, threads=128, cluster_dims=cluster):
                s = T.alloc_shared((64,), "float32")
                T.copy(A, s)
                T.copy_cluster(s, s, dst_block=1)
                T.cluster_sync()

        return k

    _error(make, match, target=target)


def test_an_eager_function_works_across_its_cluster():
    """TileLang's current style: T.const sizes, T.empty outputs, the cluster's blocks
    reversing their rows through block 0's shared memory."""

    @tilers.jit(target="interp")
    def reverse_pairs(A):
        R = T.const("R")
        A: T.Tensor((R, 32), "float32")
        B = T.empty((R, 32), "float32")
        with T.ClusterKernel(R, cluster_dims=2, threads=128) as bx:
            row = T.alloc_shared((32,), "float32")
            both = T.alloc_shared((2, 32), "float32")
            rank = T.block_rank_in_cluster()
            T.copy(A[bx, :], row)
            T.copy_cluster(row, both[1 - rank, :], dst_block=0)
            T.cluster_sync()
            if rank == 0:
                T.copy(both, B[bx:bx + 2, :])
        return B

    A = np.arange(6 * 32, dtype=np.float32).reshape(6, 32)
    want = A.reshape(3, 2, 32)[:, ::-1].reshape(6, 32)
    np.testing.assert_array_equal(reverse_pairs(A), want)
    with pytest.raises(TileError, match="a grid of 5 blocks along x launched in thread-block clusters of 2"):
        reverse_pairs(np.zeros((5, 32), np.float32))


def test_check_passes_runs_whole_clusters():
    # blocks="edges" (the default) would run blocks 0 and 7 of a cluster of 4 and leave
    # their peers out of its barriers: a clustered kernel runs every block, as it reports
    r = check_passes(gather(4, rows=2), arch="sm_90a", check=True)
    assert r.blocks == "all"


def rank_per_block(n):
    """Each block writes its rank in the cluster, between TileLang-style barriers (an
    arrive/wait pair first, a cluster_sync last; the kernel's default 128 threads)."""

    @T.prim_func
    def k(A: T.Tensor((128,), "int32")):
        with T.ClusterKernel(128, cluster_dims=(n, 1, 1)) as bx:
            T.cluster_arrive()
            T.cluster_wait()
            rank = T.block_rank_in_cluster()
            if T.get_thread_binding() == 0:
                A[bx] = rank
            T.cluster_sync()

    return k


@pytest.mark.parametrize("n", [2, 4, 16])
def test_rank_per_block_between_split_barriers(n):
    A = np.zeros(128, np.int32)
    tilers.compile(rank_per_block(n), target="sm_90a")(A)
    np.testing.assert_array_equal(A, np.arange(128) % n)
    check_passes(rank_per_block(n), arch="sm_90a", check=True)
    src = tilers.compile(rank_per_block(n), target="cuda:sm_90a").get_kernel_source()
    assert src.count("barrier.cluster.arrive.release") == 2 and src.count("barrier.cluster.wait.acquire") == 2
