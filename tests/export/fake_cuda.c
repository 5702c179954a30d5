/* A stand-in for libcuda for the export tests (tests/test_export.py): the driver functions
 * the exported C launchers call, recording what they are given, with failures on request.
 * Built with -DFAKE_NO_LAUNCH (no cuLaunchKernel) or -DFAKE_NO_TENSOR_MAP (no
 * cuTensorMapEncodeTiled) for drivers that lack a function. Not thread-safe beyond what
 * the tests need: counters are atomic. */
#include <stdatomic.h>
#include <stdint.h>
#include <string.h>

#define CONTEXT_0 ((void *)0x1000)
#define CONTEXT_1 ((void *)0x2000)
#define STREAM_ON_1 ((void *)0x5000)

typedef struct {
    void *function;
    unsigned grid[3], block[3], shared_bytes;
    void *stream;
    void *context;
    int params;
    unsigned char bytes[64][128];
    int dependent; /* launched by cuLaunchKernelEx with programmatic stream serialization */
} fake_launch_record;

typedef struct {
    unsigned data_type, rank;
    void *address;
    uint64_t dims[5], strides[4];
    uint32_t box[5], element_strides[5];
    unsigned interleave, swizzle, l2_promotion, oob_fill;
} fake_encode_record;

static struct {
    int fail_init, fail_load, fail_launch, fail_encode;
    int cc_major, cc_minor, multiprocessors;
    int max_clusters; /* what cuOccupancyMaxActiveClusters answers (0: it fails) */
    unsigned cluster_query_block[3], cluster_query_shared;
    void *stack[8];
    int depth;
    int param_sizes[64];
    int param_count;
    atomic_int loads, launches, encodes, pushes, attributes_set, nonportable_clusters;
    int attribute_value;
    char entry[128];
    char entries[8][128]; /* the names of the functions asked for, in order (since the reset) */
    int functions, module_functions;
    unsigned char image[16];
    void *load_context;
    fake_launch_record launch;
    fake_launch_record history[8]; /* the first launches since the reset */
    fake_encode_record encode[8];
} fake;

/* ---- the tests' controls ---- */

void fake_reset(void) {
    memset(&fake, 0, sizeof fake);
    fake.cc_major = 9;
    fake.multiprocessors = 132;
    fake.stack[0] = CONTEXT_0;
    fake.depth = 1;
}
__attribute__((constructor)) static void fake_start(void) { fake_reset(); }

/* which call fails, and with what status (0: none) */
void fake_fail(const char *call, int status) {
    if (!strcmp(call, "cuInit")) fake.fail_init = status;
    if (!strcmp(call, "cuModuleLoadData")) fake.fail_load = status;
    if (!strcmp(call, "cuLaunchKernel")) fake.fail_launch = status;
    if (!strcmp(call, "cuTensorMapEncodeTiled")) fake.fail_encode = status;
}
void fake_set_device(int major, int minor, int multiprocessors) {
    fake.cc_major = major;
    fake.cc_minor = minor;
    fake.multiprocessors = multiprocessors;
}
void fake_set_max_clusters(int clusters) { fake.max_clusters = clusters; }
unsigned fake_cluster_query(int i) {
    return i < 3 ? fake.cluster_query_block[i] : fake.cluster_query_shared;
}
/* no context current on the calling thread */
void fake_set_no_context(void) { fake.depth = 0; }
/* the byte size of each kernel parameter of the next launches, so the record copies them */
void fake_expect_params(int count, const int *sizes) {
    fake.param_count = count;
    for (int i = 0; i < count && i < 64; i++) fake.param_sizes[i] = sizes[i];
}
int fake_count(const char *what) {
    if (!strcmp(what, "loads")) return fake.loads;
    if (!strcmp(what, "launches")) return fake.launches;
    if (!strcmp(what, "encodes")) return fake.encodes;
    if (!strcmp(what, "pushes")) return fake.pushes;
    if (!strcmp(what, "attributes_set")) return fake.attributes_set;
    if (!strcmp(what, "nonportable_clusters")) return fake.nonportable_clusters;
    return -1;
}
int fake_depth(void) { return fake.depth; }
int fake_attribute_value(void) { return fake.attribute_value; }
const char *fake_entry(void) { return fake.entry; }
const unsigned char *fake_image(void) { return fake.image; }
void *fake_load_context(void) { return fake.load_context; }
const fake_launch_record *fake_last_launch(void) { return &fake.launch; }
const fake_launch_record *fake_launch_at(int i) { return &fake.history[i]; }
const char *fake_entry_at(int i) { return fake.entries[i]; }
const fake_encode_record *fake_encoded(int i) { return &fake.encode[i]; }

/* ---- the driver ---- */

int cuInit(unsigned flags) {
    (void)flags;
    return fake.fail_init;
}

int cuGetErrorName(int status, const char **name) {
    switch (status) {
    case 1: *name = "CUDA_ERROR_INVALID_VALUE"; return 0;
    case 100: *name = "CUDA_ERROR_NO_DEVICE"; return 0;
    case 200: *name = "CUDA_ERROR_INVALID_IMAGE"; return 0;
    case 701: *name = "CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES"; return 0;
    default: *name = NULL; return 1;
    }
}

int cuCtxGetCurrent(void **context) {
    *context = fake.depth ? fake.stack[fake.depth - 1] : NULL;
    return 0;
}
int cuCtxPushCurrent_v2(void *context) {
    fake.stack[fake.depth++] = context;
    fake.pushes++;
    return 0;
}
int cuCtxPopCurrent_v2(void **context) {
    if (fake.depth == 0) return 201;
    *context = fake.stack[--fake.depth];
    return 0;
}
int cuCtxGetDevice(int *device) {
    if (fake.depth == 0) return 201;
    *device = fake.stack[fake.depth - 1] == CONTEXT_1 ? 1 : 0;
    return 0;
}
int cuStreamGetCtx(void *stream, void **context) {
    if (stream == STREAM_ON_1) *context = CONTEXT_1;
    else *context = fake.depth ? fake.stack[fake.depth - 1] : NULL;
    return 0;
}
int cuDeviceGetAttribute(int *value, int attribute, int device) {
    (void)device;
    switch (attribute) {
    case 75: *value = fake.cc_major; return 0;
    case 76: *value = fake.cc_minor; return 0;
    case 16: *value = fake.multiprocessors; return 0;
    default: return 1;
    }
}
int cuModuleLoadData(void **module, const void *image) {
    if (fake.fail_load) return fake.fail_load;
    memcpy(fake.image, image, sizeof fake.image);
    fake.load_context = fake.depth ? fake.stack[fake.depth - 1] : NULL;
    *module = (void *)(uintptr_t)(0xA000 + 16 * ++fake.loads);
    fake.module_functions = 0;
    return 0;
}
int cuModuleGetFunction(void **function, void *module, const char *name) {
    strncpy(fake.entry, name, sizeof fake.entry - 1);
    if (fake.functions < 8) strncpy(fake.entries[fake.functions], name, sizeof fake.entries[0] - 1);
    fake.functions++;
    /* the module's first function is module + 1, its next module + 2, ... */
    *function = (void *)((uintptr_t)module + 1 + (uintptr_t)fake.module_functions++);
    return 0;
}
int cuFuncSetAttribute(void *function, int attribute, int value) {
    (void)function;
    /* CU_FUNC_ATTRIBUTE_NON_PORTABLE_CLUSTER_SIZE_ALLOWED */
    if (attribute == 14 && value == 1) {
        fake.nonportable_clusters++;
        return 0;
    }
    if (attribute != 8) return 1;
    fake.attribute_value = value;
    fake.attributes_set++;
    return 0;
}
#ifndef FAKE_NO_LAUNCH
static int fake_record_launch(void *function, unsigned gx, unsigned gy, unsigned gz, unsigned bx,
                              unsigned by, unsigned bz, unsigned shared_bytes, void *stream,
                              void **params, int dependent);
int cuLaunchKernel(void *function, unsigned gx, unsigned gy, unsigned gz, unsigned bx,
                   unsigned by, unsigned bz, unsigned shared_bytes, void *stream,
                   void **params, void **extra) {
    (void)extra;
    return fake_record_launch(function, gx, gy, gz, bx, by, bz, shared_bytes, stream, params, 0);
}
/* CUlaunchAttribute and CUlaunchConfig as cuda.h lays them out */
typedef struct {
    unsigned id, pad;
    uint64_t value[8];
} fake_attribute;
typedef struct {
    unsigned grid[3], block[3], shared_bytes;
    void *stream;
    fake_attribute *attrs;
    unsigned num_attrs;
} fake_config;
int cuOccupancyMaxActiveClusters(int *clusters, void *function, const fake_config *config) {
    (void)function;
    if (fake.max_clusters == 0 || config->num_attrs != 0) return 1;
    memcpy(fake.cluster_query_block, config->block, sizeof fake.cluster_query_block);
    fake.cluster_query_shared = config->shared_bytes;
    *clusters = fake.max_clusters;
    return 0;
}
#ifndef FAKE_NO_LAUNCH_EX
int cuLaunchKernelEx(const fake_config *config, void *function, void **params, void **extra) {
    (void)extra;
    int dependent = 0;
    for (unsigned i = 0; i < config->num_attrs; i++) {
        /* CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION; any other is refused */
        if (config->attrs[i].id != 6) return 1;
        dependent = (int)(config->attrs[i].value[0] & 0xffffffffu);
    }
    return fake_record_launch(function, config->grid[0], config->grid[1], config->grid[2],
                              config->block[0], config->block[1], config->block[2],
                              config->shared_bytes, config->stream, params, dependent);
}
#endif
static int fake_record_launch(void *function, unsigned gx, unsigned gy, unsigned gz, unsigned bx,
                              unsigned by, unsigned bz, unsigned shared_bytes, void *stream,
                              void **params, int dependent) {
    if (fake.fail_launch) return fake.fail_launch;
    fake_launch_record *r = &fake.launch;
    r->dependent = dependent;
    r->function = function;
    r->grid[0] = gx, r->grid[1] = gy, r->grid[2] = gz;
    r->block[0] = bx, r->block[1] = by, r->block[2] = bz;
    r->shared_bytes = shared_bytes;
    r->stream = stream;
    r->context = fake.depth ? fake.stack[fake.depth - 1] : NULL;
    r->params = fake.param_count;
    for (int i = 0; i < fake.param_count && i < 64; i++)
        memcpy(r->bytes[i], params[i], (size_t)fake.param_sizes[i]);
    if (fake.launches < 8) fake.history[fake.launches] = *r;
    fake.launches++;
    return 0;
}
#endif
#ifndef FAKE_NO_TENSOR_MAP
int cuTensorMapEncodeTiled(void *map, unsigned data_type, uint32_t rank, void *address,
                           const uint64_t *dims, const uint64_t *strides, const uint32_t *box,
                           const uint32_t *element_strides, unsigned interleave,
                           unsigned swizzle, unsigned l2_promotion, unsigned oob_fill) {
    if (fake.fail_encode) return fake.fail_encode;
    if ((uintptr_t)map % 64 != 0) return 1;
    int i = fake.encodes++;
    if (i < 8) {
        fake_encode_record *r = &fake.encode[i];
        r->data_type = data_type, r->rank = rank, r->address = address;
        for (uint32_t d = 0; d < rank; d++) {
            r->dims[d] = dims[d], r->box[d] = box[d], r->element_strides[d] = element_strides[d];
            if (d + 1 < rank) r->strides[d] = strides[d];
        }
        r->interleave = interleave, r->swizzle = swizzle;
        r->l2_promotion = l2_promotion, r->oob_fill = oob_fill;
    }
    /* a map the test can recognize: the address, then the encoding's number */
    uint64_t words[16] = {(uint64_t)(uintptr_t)address, (uint64_t)i + 1};
    memcpy(map, words, sizeof words);
    return 0;
}
#endif
