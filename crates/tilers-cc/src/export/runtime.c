/* ---- the tilers export runtime: the CUDA driver opened at run time, errors as messages ----
 * Everything here is static: each exported kernel's .c carries its own copy, so several
 * exports link into one program without clashing. Only libcuda is needed at run time, found
 * as $TILERS_LIBCUDA (a path, e.g. a stand-in driver for tests) or libcuda.so.1. */
#include <dlfcn.h>
#include <math.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* CUresult values the runtime returns itself (cuda.h's numbers) */
#define TL_INVALID_VALUE 1            /* CUDA_ERROR_INVALID_VALUE */
#define TL_INVALID_CONTEXT 201        /* CUDA_ERROR_INVALID_CONTEXT */
#define TL_NO_BINARY_FOR_GPU 209      /* CUDA_ERROR_NO_BINARY_FOR_GPU */
#define TL_SYMBOL_NOT_FOUND 302       /* CUDA_ERROR_SHARED_OBJECT_SYMBOL_NOT_FOUND */
#define TL_LIBRARY_INIT_FAILED 303    /* CUDA_ERROR_SHARED_OBJECT_INIT_FAILED */
#define TL_NOT_SUPPORTED 801          /* CUDA_ERROR_NOT_SUPPORTED */

/* CUdevice_attribute / CUfunction_attribute numbers */
#define TL_ATTR_MULTIPROCESSOR_COUNT 16
#define TL_ATTR_CC_MAJOR 75
#define TL_ATTR_CC_MINOR 76
#define TL_FUNC_MAX_DYNAMIC_SHARED 8
/* CU_FUNC_ATTRIBUTE_NON_PORTABLE_CLUSTER_SIZE_ALLOWED: clusters of more than 8 blocks */
#define TL_FUNC_NON_PORTABLE_CLUSTER 14

/* the most CUDA contexts one kernel is loaded into (one per GPU, usually) */
#define TL_MAX_CONTEXTS 64
/* the kernels one call launches in turn (a prim_func of several T.Kernel) */
#define TL_MAX_LAUNCHES 16

/* every helper is static and may go unused by a kernel (a grid without float scalars) */
#define TL_HELPER static __attribute__((unused))

typedef int tl_result;
typedef void *tl_handle;

/* a CUtensorMap: 128 opaque bytes, 64-byte aligned */
typedef struct { _Alignas(64) uint64_t words[16]; } tl_tensor_map;

typedef tl_result (*tl_init_fn)(unsigned);
typedef tl_result (*tl_error_name_fn)(tl_result, const char **);
typedef tl_result (*tl_ctx_get_fn)(tl_handle *);
typedef tl_result (*tl_ctx_push_fn)(tl_handle);
typedef tl_result (*tl_ctx_pop_fn)(tl_handle *);
typedef tl_result (*tl_ctx_device_fn)(int *);
typedef tl_result (*tl_stream_ctx_fn)(tl_handle, tl_handle *);
typedef tl_result (*tl_attribute_fn)(int *, int, int);
typedef tl_result (*tl_module_load_fn)(tl_handle *, const void *);
typedef tl_result (*tl_module_function_fn)(tl_handle *, tl_handle, const char *);
typedef tl_result (*tl_func_attribute_fn)(tl_handle, int, int);
typedef tl_result (*tl_launch_fn)(tl_handle, unsigned, unsigned, unsigned, unsigned, unsigned,
                                  unsigned, unsigned, tl_handle, void **, void **);
/* CUlaunchAttribute (an id, padding, a 64-byte value union) and CUlaunchConfig */
typedef struct {
    unsigned id;
    unsigned pad;
    uint64_t value[8];
} tl_launch_attribute;
typedef struct {
    unsigned grid[3];
    unsigned block[3];
    unsigned shared_bytes;
    tl_handle stream;
    tl_launch_attribute *attrs;
    unsigned num_attrs;
} tl_launch_config;
typedef tl_result (*tl_launch_ex_fn)(const tl_launch_config *, tl_handle, void **, void **);
typedef tl_result (*tl_max_clusters_fn)(int *, tl_handle, const tl_launch_config *);
typedef tl_result (*tl_encode_tiled_fn)(tl_tensor_map *, unsigned, uint32_t, void *,
                                        const uint64_t *, const uint64_t *, const uint32_t *,
                                        const uint32_t *, unsigned, unsigned, unsigned, unsigned);

static struct {
    tl_result status; /* 0 once opened; else why not, with `why` */
    char why[512];
    void *library;
    tl_error_name_fn error_name;
    tl_ctx_get_fn ctx_get_current;
    tl_ctx_push_fn ctx_push_current;
    tl_ctx_pop_fn ctx_pop_current;
    tl_ctx_device_fn ctx_get_device;
    tl_stream_ctx_fn stream_get_ctx; /* optional (CUDA 9.2) */
    tl_attribute_fn device_get_attribute;
    tl_module_load_fn module_load_data;
    tl_module_function_fn module_get_function;
    tl_func_attribute_fn func_set_attribute;
    tl_launch_fn launch_kernel;
    tl_launch_ex_fn launch_kernel_ex; /* optional (CUDA 12.0): programmatic dependent launch */
    tl_encode_tiled_fn encode_tiled; /* optional (CUDA 12.0): kernels with tensor maps need it */
    tl_max_clusters_fn max_active_clusters; /* optional (CUDA 12.0): clusters that run at once */
} tl_driver;

static pthread_once_t tl_driver_once = PTHREAD_ONCE_INIT;

/* the message of the last failed call on this thread */
static _Thread_local char tl_message[1024];

TL_HELPER tl_result tl_fail(tl_result status, const char *format, ...)
    __attribute__((format(printf, 2, 3)));
TL_HELPER tl_result tl_fail(tl_result status, const char *format, ...) {
    va_list args;
    va_start(args, format);
    vsnprintf(tl_message, sizeof tl_message, format, args);
    va_end(args);
    return status;
}

TL_HELPER void *tl_symbol(const char *name, int required) {
    void *symbol = dlsym(tl_driver.library, name);
    if (symbol == NULL && required && tl_driver.status == 0) {
        tl_driver.status = TL_SYMBOL_NOT_FOUND;
        snprintf(tl_driver.why, sizeof tl_driver.why, "the CUDA driver library lacks %s", name);
    }
    return symbol;
}

TL_HELPER void tl_open_driver(void) {
    const char *path = getenv("TILERS_LIBCUDA");
    if (path == NULL || path[0] == '\0') path = "libcuda.so.1";
    tl_driver.library = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (tl_driver.library == NULL) {
        const char *reason = dlerror();
        tl_driver.status = TL_LIBRARY_INIT_FAILED;
        snprintf(tl_driver.why, sizeof tl_driver.why,
                 "the CUDA driver library %s could not be loaded (%s): is the NVIDIA driver "
                 "installed?", path, reason ? reason : "unknown reason");
        return;
    }
    tl_init_fn init = (tl_init_fn)tl_symbol("cuInit", 1);
    tl_driver.error_name = (tl_error_name_fn)tl_symbol("cuGetErrorName", 1);
    tl_driver.ctx_get_current = (tl_ctx_get_fn)tl_symbol("cuCtxGetCurrent", 1);
    tl_driver.ctx_push_current = (tl_ctx_push_fn)tl_symbol("cuCtxPushCurrent_v2", 1);
    tl_driver.ctx_pop_current = (tl_ctx_pop_fn)tl_symbol("cuCtxPopCurrent_v2", 1);
    tl_driver.ctx_get_device = (tl_ctx_device_fn)tl_symbol("cuCtxGetDevice", 1);
    tl_driver.stream_get_ctx = (tl_stream_ctx_fn)tl_symbol("cuStreamGetCtx", 0);
    tl_driver.device_get_attribute = (tl_attribute_fn)tl_symbol("cuDeviceGetAttribute", 1);
    tl_driver.module_load_data = (tl_module_load_fn)tl_symbol("cuModuleLoadData", 1);
    tl_driver.module_get_function = (tl_module_function_fn)tl_symbol("cuModuleGetFunction", 1);
    tl_driver.func_set_attribute = (tl_func_attribute_fn)tl_symbol("cuFuncSetAttribute", 1);
    tl_driver.launch_kernel = (tl_launch_fn)tl_symbol("cuLaunchKernel", 1);
    tl_driver.launch_kernel_ex = (tl_launch_ex_fn)tl_symbol("cuLaunchKernelEx", 0);
    tl_driver.encode_tiled = (tl_encode_tiled_fn)tl_symbol("cuTensorMapEncodeTiled", 0);
    tl_driver.max_active_clusters = (tl_max_clusters_fn)tl_symbol("cuOccupancyMaxActiveClusters", 0);
    if (tl_driver.status != 0) return;
    tl_result status = init(0);
    if (status != 0) {
        const char *name = NULL;
        if (tl_driver.error_name(status, &name) != 0 || name == NULL) name = "an unknown error";
        tl_driver.status = status;
        snprintf(tl_driver.why, sizeof tl_driver.why, "cuInit failed with %s (%d)", name, status);
    }
}

/* Open the driver once per process (thread-safe); its status, the message set on failure. */
TL_HELPER tl_result tl_driver_ready(const char *kernel) {
    pthread_once(&tl_driver_once, tl_open_driver);
    if (tl_driver.status != 0)
        return tl_fail(tl_driver.status, "%s: no usable CUDA driver: %s", kernel, tl_driver.why);
    return 0;
}

/* A failed driver call as a message: "kernel: call failed with CUDA_ERROR_X (n)". */
/* Launch `function` as a programmatic dependent of the kernel launched just before it on
   `stream` (a kernel of the same call, which it waits for with griddepcontrol.wait), so it
   may start while that one still runs; plainly where the driver lacks cuLaunchKernelEx. */
TL_HELPER tl_result tl_launch_dependent(tl_handle function, const unsigned grid[3], unsigned bx,
                                        unsigned by, unsigned bz, unsigned shared_bytes,
                                        tl_handle stream, void **args) {
    if (tl_driver.launch_kernel_ex == NULL)
        return tl_driver.launch_kernel(function, grid[0], grid[1], grid[2], bx, by, bz, shared_bytes,
                                       stream, args, NULL);
    tl_launch_attribute attribute;
    memset(&attribute, 0, sizeof attribute);
    attribute.id = 6;       /* CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION */
    attribute.value[0] = 1; /* programmaticStreamSerializationAllowed (an int, little-endian) */
    tl_launch_config config = {{grid[0], grid[1], grid[2]}, {bx, by, bz}, shared_bytes, stream, &attribute, 1};
    return tl_driver.launch_kernel_ex(&config, function, args, NULL);
}

TL_HELPER tl_result tl_driver_error(tl_result status, const char *kernel, const char *call) {
    const char *name = NULL;
    if (tl_driver.error_name(status, &name) != 0 || name == NULL) name = "an unknown CUDA error";
    return tl_fail(status, "%s: %s failed with %s (%d)", kernel, call, name, status);
}

/* ---- the kernel in each context it runs in ---- */

typedef struct {
    tl_handle context;
    tl_handle function[TL_MAX_LAUNCHES]; /* one per kernel the call launches, in order */
    int multiprocessors;
    /* per kernel in clusters: how many of its clusters run at once (the driver's
       cuOccupancyMaxActiveClusters), else multiprocessors / cluster size */
    int clusters[TL_MAX_LAUNCHES];
} tl_loaded;

typedef struct {
    /* the tensor map cache: the last encoding of each map, by data pointer, shape, strides */
    int valid;
    uint64_t key[11];
    tl_tensor_map map;
} tl_cached_map;

/* The context a call runs in: the stream's (so a stream of another GPU works), else the
 * thread's current one; pushed when it is not current (`*pushed`). */
TL_HELPER tl_result tl_enter(const char *kernel, tl_handle stream, tl_handle *context, int *pushed) {
    tl_handle current = NULL;
    tl_result status = tl_driver.ctx_get_current(&current);
    if (status != 0) return tl_driver_error(status, kernel, "cuCtxGetCurrent");
    *context = current;
    *pushed = 0;
    /* 0, 1 and 2 are the legacy and per-thread default streams of the current context */
    if ((uintptr_t)stream > 2 && tl_driver.stream_get_ctx != NULL) {
        status = tl_driver.stream_get_ctx(stream, context);
        if (status != 0) return tl_driver_error(status, kernel, "cuStreamGetCtx");
    }
    if (*context == NULL)
        return tl_fail(TL_INVALID_CONTEXT,
                       "%s: no CUDA context is current on this thread (with the runtime API "
                       "call cudaSetDevice and cudaFree(0) first; with the driver API "
                       "cuCtxSetCurrent), and the stream is a default stream", kernel);
    if (*context != current) {
        status = tl_driver.ctx_push_current(*context);
        if (status != 0) return tl_driver_error(status, kernel, "cuCtxPushCurrent");
        *pushed = 1;
    }
    return 0;
}

TL_HELPER void tl_leave(int pushed) {
    tl_handle popped;
    if (pushed) tl_driver.ctx_pop_current(&popped);
}

/* Whether a cubin for sm_<major><minor>[a] runs on a device of compute capability
 * major.minor: the same major at an equal or later minor; an `a` cubin only on its chip. */
TL_HELPER int tl_runs_on(int major, int minor, int exact, int device_major, int device_minor) {
    if (major != device_major) return 0;
    return exact ? device_minor == minor : device_minor >= minor;
}

/* Load the cubin into `context` (current) once, with the function of each of its `launches`
 * entries (`launches` <= TL_MAX_LAUNCHES): the loaded entry of the table. A function whose
 * compiled-in cluster has more than 8 blocks is allowed its non-portable size; how many of
 * a clustered function's clusters run at once is asked once (its block: `blocks[3 k..]`). */
TL_HELPER tl_result tl_load(const char *kernel, tl_loaded *table, int *count, pthread_mutex_t *lock,
                         tl_handle context, const unsigned char *cubin,
                         const char *const *entries, const unsigned *shared_bytes,
                         const unsigned *cluster_blocks, const unsigned *blocks, int launches,
                         const char *arch, int major, int minor, int exact,
                         const tl_loaded **loaded) {
    pthread_mutex_lock(lock);
    for (int i = 0; i < *count; i++) {
        if (table[i].context == context) {
            *loaded = &table[i];
            pthread_mutex_unlock(lock);
            return 0;
        }
    }
    tl_result status = 0;
    int device = 0, device_major = 0, device_minor = 0, sms = 0;
    tl_handle module = NULL, functions[TL_MAX_LAUNCHES] = {0};
    if (*count == TL_MAX_CONTEXTS) {
        status = tl_fail(TL_NOT_SUPPORTED, "%s: loaded in %d CUDA contexts already, the most it "
                         "keeps", kernel, TL_MAX_CONTEXTS);
        goto done;
    }
    if ((status = tl_driver.ctx_get_device(&device)) != 0) {
        tl_driver_error(status, kernel, "cuCtxGetDevice");
        goto done;
    }
    if ((status = tl_driver.device_get_attribute(&device_major, TL_ATTR_CC_MAJOR, device)) != 0 ||
        (status = tl_driver.device_get_attribute(&device_minor, TL_ATTR_CC_MINOR, device)) != 0 ||
        (status = tl_driver.device_get_attribute(&sms, TL_ATTR_MULTIPROCESSOR_COUNT, device)) != 0) {
        tl_driver_error(status, kernel, "cuDeviceGetAttribute");
        goto done;
    }
    if (!tl_runs_on(major, minor, exact, device_major, device_minor)) {
        status = tl_fail(TL_NO_BINARY_FOR_GPU, "%s: compiled for %s, but the device of this "
                         "context (CUDA device %d) is sm_%d%d, which cannot run it: export it "
                         "again for that architecture", kernel, arch, device, device_major,
                         device_minor);
        goto done;
    }
    if ((status = tl_driver.module_load_data(&module, cubin)) != 0) {
        tl_driver_error(status, kernel, "cuModuleLoadData");
        goto done;
    }
    for (int k = 0; k < launches; k++) {
        if ((status = tl_driver.module_get_function(&functions[k], module, entries[k])) != 0) {
            tl_driver_error(status, kernel, "cuModuleGetFunction");
            goto done;
        }
        if (shared_bytes[k] > 48 * 1024 &&
            (status = tl_driver.func_set_attribute(functions[k], TL_FUNC_MAX_DYNAMIC_SHARED,
                                                   (int)shared_bytes[k])) != 0) {
            tl_driver_error(status, kernel, "cuFuncSetAttribute(MAX_DYNAMIC_SHARED_SIZE_BYTES)");
            goto done;
        }
        if (cluster_blocks[k] > 8 &&
            (status = tl_driver.func_set_attribute(functions[k], TL_FUNC_NON_PORTABLE_CLUSTER, 1)) != 0) {
            tl_driver_error(status, kernel, "cuFuncSetAttribute(NON_PORTABLE_CLUSTER_SIZE_ALLOWED)");
            goto done;
        }
    }
    table[*count].context = context;
    table[*count].multiprocessors = sms > 0 ? sms : 1;
    for (int k = 0; k < launches; k++) {
        table[*count].function[k] = functions[k];
        int n = cluster_blocks[k] > 1 ? (int)cluster_blocks[k] : 1, fit = 0;
        /* the cluster size is the function's own (compiled in): no launch attribute */
        tl_launch_config config = {{(unsigned)n, 1, 1}, {blocks[3 * k], blocks[3 * k + 1], blocks[3 * k + 2]},
                                   shared_bytes[k], NULL, NULL, 0};
        if (n > 1 && tl_driver.max_active_clusters != NULL &&
            tl_driver.max_active_clusters(&fit, functions[k], &config) != 0)
            fit = 0;
        table[*count].clusters[k] = fit > 0 ? fit : table[*count].multiprocessors / n;
    }
    *loaded = &table[*count];
    *count += 1;
done:
    pthread_mutex_unlock(lock);
    return status;
}

/* ---- arithmetic of grids and sizes, with Python's meaning and no overflow ---- */

/* tl_bad: 0 fine, 1 a division by zero, 2 overflow, 3 a float that is not finite */
TL_HELPER int64_t tl_add(int64_t a, int64_t b, int *bad) {
    int64_t r;
    if (__builtin_add_overflow(a, b, &r)) { if (!*bad) *bad = 2; return 0; }
    return r;
}
TL_HELPER int64_t tl_sub(int64_t a, int64_t b, int *bad) {
    int64_t r;
    if (__builtin_sub_overflow(a, b, &r)) { if (!*bad) *bad = 2; return 0; }
    return r;
}
TL_HELPER int64_t tl_mul(int64_t a, int64_t b, int *bad) {
    int64_t r;
    if (__builtin_mul_overflow(a, b, &r)) { if (!*bad) *bad = 2; return 0; }
    return r;
}
TL_HELPER int64_t tl_floordiv(int64_t a, int64_t b, int *bad) {
    if (b == 0) { if (!*bad) *bad = 1; return 0; }
    if (a == INT64_MIN && b == -1) { if (!*bad) *bad = 2; return 0; }
    int64_t q = a / b;
    if (a % b != 0 && ((a < 0) != (b < 0))) q -= 1;
    return q;
}
TL_HELPER int64_t tl_ceildiv(int64_t a, int64_t b, int *bad) {
    if (a == INT64_MIN) { if (!*bad) *bad = 2; return 0; }
    return -tl_floordiv(-a, b, bad);
}
TL_HELPER int64_t tl_min(int64_t a, int64_t b) { return a < b ? a : b; }
TL_HELPER int64_t tl_max(int64_t a, int64_t b) { return a > b ? a : b; }
TL_HELPER int64_t tl_unsigned(uint64_t v, int *bad) {
    if (v > (uint64_t)INT64_MAX) { if (!*bad) *bad = 2; return 0; }
    return (int64_t)v;
}
/* a float scalar as the grid reads it: truncated toward zero */
TL_HELPER int64_t tl_trunc(double v, int *bad) {
    if (!isfinite(v)) { if (!*bad) *bad = 3; return 0; }
    if (fabs(v) >= 9.2e18) { if (!*bad) *bad = 2; return 0; }
    return (int64_t)v;
}

/* "(1000, 1000)", as Python writes a shape */
TL_HELPER const char *tl_shape_text(char *text, size_t size, const int64_t *shape, int ndim) {
    size_t used = (size_t)snprintf(text, size, "(");
    for (int d = 0; d < ndim && used < size; d++)
        used += (size_t)snprintf(text + used, size - used, d ? ", %lld" : "%lld",
                                 (long long)shape[d]);
    if (used < size) snprintf(text + used, size - used, ndim == 1 ? ",)" : ")");
    return text;
}

/* Strides equal, except along extents of 1, where a stride is never used. NULL strides are
 * the contiguous ones. */
TL_HELPER int tl_strides_match(const int64_t *strides, const int64_t *want, const int64_t *shape,
                            int ndim) {
    if (strides == NULL) return 1;
    for (int d = 0; d < ndim; d++)
        if (strides[d] != want[d] && shape[d] != 1) return 0;
    return 1;
}

/* Row-major strides of a shape (overflow is checked by the caller's element count). */
TL_HELPER void tl_contiguous(int64_t *strides, const int64_t *shape, int ndim) {
    int64_t step = 1;
    for (int d = ndim - 1; d >= 0; d--) {
        strides[d] = step;
        step *= shape[d] > 1 ? shape[d] : 1;
    }
}

/* ---- TMA tensor maps (cuTensorMapEncodeTiled) ---- */

/* The encode arguments of one map for a tensor of `shape` and (element) `strides`: innermost
 * first, byte strides of dimensions 1..rank-1; an empty tensor gets a one-element map. The
 * message names the parameter when TMA cannot describe the tensor. */
TL_HELPER tl_result tl_encode_map(const char *kernel, const char *param, tl_cached_map *cache,
                               pthread_mutex_t *lock, tl_tensor_map *out, unsigned data_type,
                               uint64_t element_bytes, int rank, void *data,
                               const int64_t *shape, const int64_t *strides,
                               const uint32_t *box_outer_first, unsigned swizzle) {
    uint64_t dims[5] = {1, 1, 1, 1, 1}, byte_strides[4] = {16, 16, 16, 16};
    uint32_t box[5] = {1, 1, 1, 1, 1}, element_strides[5] = {1, 1, 1, 1, 1};
    int empty = 0;
    for (int d = 0; d < rank; d++) {
        box[rank - 1 - d] = box_outer_first[d];
        if (shape[d] == 0) empty = 1;
    }
    if ((uintptr_t)data % 16 != 0)
        return tl_fail(TL_INVALID_VALUE, "%s: parameter '%s': its tensor map needs a 16-byte "
                       "aligned data pointer, got %p", kernel, param, data);
    if (!empty) {
        for (int d = 0; d < rank; d++) {
            if (shape[d] < 1 || (uint64_t)shape[d] > ((uint64_t)1 << 32))
                return tl_fail(TL_INVALID_VALUE, "%s: parameter '%s': dimension %d is %lld; its "
                               "tensor map (TMA) needs 1 to 2^32 elements", kernel, param, d,
                               (long long)shape[d]);
            dims[rank - 1 - d] = (uint64_t)shape[d];
        }
        for (int d = 0; d < rank - 1; d++) {
            uint64_t bytes = (uint64_t)strides[d] * element_bytes;
            if (shape[d] == 1) continue; /* never stepped along: any valid stride */
            if (strides[d] <= 0 || bytes % 16 != 0 || bytes >= ((uint64_t)1 << 40))
                return tl_fail(TL_INVALID_VALUE, "%s: parameter '%s': the stride of dimension "
                               "%d is %lld elements (%llu bytes); its tensor map (TMA) needs a "
                               "positive multiple of 16 bytes below 2^40", kernel, param, d,
                               (long long)strides[d], (unsigned long long)bytes);
            byte_strides[rank - 2 - d] = bytes;
        }
    }
    uint64_t key[11] = {(uint64_t)(uintptr_t)data};
    for (int d = 0; d < 5; d++) key[1 + d] = dims[d];
    for (int d = 0; d < 4; d++) key[6 + d] = byte_strides[d];
    key[10] = (uint64_t)rank;
    pthread_mutex_lock(lock);
    if (cache->valid && memcmp(cache->key, key, sizeof key) == 0) {
        *out = cache->map;
        pthread_mutex_unlock(lock);
        return 0;
    }
    pthread_mutex_unlock(lock);
    if (tl_driver.encode_tiled == NULL)
        return tl_fail(TL_NOT_SUPPORTED, "%s: this CUDA driver has no cuTensorMapEncodeTiled "
                       "(tensor maps need CUDA 12.0 or newer)", kernel);
    /* no interleave, L2 promotion 256B (3), elements past the edge read as zeros */
    tl_result status = tl_driver.encode_tiled(out, data_type, (uint32_t)rank, data, dims,
                                              byte_strides, box, element_strides, 0, swizzle,
                                              3, 0);
    if (status != 0) {
        const char *name = NULL;
        if (tl_driver.error_name(status, &name) != 0 || name == NULL) name = "an unknown error";
        return tl_fail(status, "%s: cuTensorMapEncodeTiled failed with %s (%d) for the tensor "
                       "map of parameter '%s'", kernel, name, status, param);
    }
    pthread_mutex_lock(lock);
    cache->valid = 1;
    memcpy(cache->key, key, sizeof key);
    cache->map = *out;
    pthread_mutex_unlock(lock);
    return 0;
}
/* ---- end of the tilers export runtime ---- */
