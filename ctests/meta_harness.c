// The linked meta device as a backend module, for programs that only find devices in the
// registry (upstream's test-backend-ops, loaded with GGML_BACKEND_PATH): one registry "META"
// listing ggml_backend_meta_device(CPU x N, split) of this build, N = GGML_META_HARNESS_N
// (default 2).
//
// The split callback splits what it can: a tensor along the first axis, in the order that
// GGML_META_HARNESS_AXES gives (default "3210": the outermost first), that has at least one
// whole unit (one quantization block along axis 0, one element along the others) per device;
// the units are shared out as evenly as they go, the first devices taking one more where they
// do not divide. A tensor with no such axis is mirrored. The meta device keeps these splits
// where the results computed from a tensor can be derived over them, and places it whole
// where they cannot (src/meta/slices.rs, `settle`).

#include "ggml-backend-impl.h"
#include "ggml-cpu.h"
#if __has_include("ggml-ext.h")
#    include "ggml-ext.h" // the meta API, where ggml-backend.h does not declare it (0.9.11)
#endif

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define HARNESS_MAX_DEVICES 8

static struct ggml_backend_meta_split_state harness_split(const struct ggml_tensor * t, void * ud) {
    const int n = *(const int *) ud;
    struct ggml_backend_meta_split_state s;
    memset(&s, 0, sizeof(s));
    s.axis = GGML_BACKEND_SPLIT_AXIS_MIRRORED;
    s.n_segments = 1;
#if GGML_BACKEND_RS_HAS_SPLIT_NR
    s.nr[0] = 1;
#endif
    const char * order = getenv("GGML_META_HARNESS_AXES");
    if (order == NULL || *order == '\0') {
        order = "3210";
    }
    for (const char * c = order; *c; c++) {
        if (*c < '0' || *c > '3') {
            continue;
        }
        const int axis = *c - '0';
        const int64_t unit = axis == 0 ? ggml_blck_size(t->type) : 1;
        const int64_t units = t->ne[axis] / unit;
        if (t->ne[axis] % unit != 0 || units < n) {
            continue;
        }
        s.axis = (enum ggml_backend_meta_split_axis) axis;
        for (int d = 0; d < n; d++) {
            s.ne[d] = (units / n + (d < units % n ? 1 : 0)) * unit;
        }
        return s;
    }
    return s;
}

static int harness_n = 2;
static ggml_backend_dev_t harness_dev = NULL;
static struct ggml_backend_reg harness_reg;

static const char * reg_name(ggml_backend_reg_t reg) {
    (void) reg;
    return "META";
}

static size_t reg_dev_count(ggml_backend_reg_t reg) {
    (void) reg;
    return harness_dev != NULL ? 1 : 0;
}

static ggml_backend_dev_t reg_dev_get(ggml_backend_reg_t reg, size_t index) {
    (void) reg;
    return index == 0 ? harness_dev : NULL;
}

static void * reg_proc_address(ggml_backend_reg_t reg, const char * name) {
    (void) reg;
    (void) name;
    return NULL;
}

static const struct ggml_backend_reg_i harness_reg_iface = {
    /* .get_name         = */ reg_name,
    /* .get_device_count = */ reg_dev_count,
    /* .get_device       = */ reg_dev_get,
    /* .get_proc_address = */ reg_proc_address,
};

GGML_BACKEND_API ggml_backend_reg_t ggml_backend_init(void) {
    const char * n_env = getenv("GGML_META_HARNESS_N");
    if (n_env != NULL) {
        harness_n = atoi(n_env);
    }
    if (harness_n < 1 || harness_n > HARNESS_MAX_DEVICES) {
        fprintf(stderr, "meta_harness: GGML_META_HARNESS_N must be 1..%d\n", HARNESS_MAX_DEVICES);
        return NULL;
    }
    // the CPU backend's own registry: the global one is busy loading this module
    ggml_backend_dev_t cpu = ggml_backend_reg_dev_get(ggml_backend_cpu_reg(), 0);
    ggml_backend_dev_t devs[HARNESS_MAX_DEVICES];
    for (int i = 0; i < harness_n; i++) {
        devs[i] = cpu;
    }
    harness_dev = ggml_backend_meta_device(devs, (size_t) harness_n, harness_split, &harness_n);
    harness_reg.api_version = GGML_BACKEND_API_VERSION;
    harness_reg.iface = harness_reg_iface;
    harness_reg.context = NULL;
    return &harness_reg;
}
