// A minimal ggml backend in a shared library, for the dynamic-loading tests: one registry
// named TEST_PLUGIN_NAME with one device "<name>_DEV" that has no compute of its own.
// Built several times with different names and scores (see ctests/CMakeLists.txt).

#include "ggml-backend-impl.h"

#include <stddef.h>

#ifndef TEST_PLUGIN_NAME
#define TEST_PLUGIN_NAME "TESTPLUGIN"
#endif
#ifndef TEST_PLUGIN_SCORE
#define TEST_PLUGIN_SCORE 1
#endif
#ifndef TEST_PLUGIN_API_VERSION
#define TEST_PLUGIN_API_VERSION GGML_BACKEND_API_VERSION
#endif

static const char * dev_name(ggml_backend_dev_t dev) { (void) dev; return TEST_PLUGIN_NAME "_DEV"; }
static const char * dev_description(ggml_backend_dev_t dev) { (void) dev; return "test plugin device"; }
static void dev_memory(ggml_backend_dev_t dev, size_t * free, size_t * total) { (void) dev; *free = 1; *total = 2; }
static enum ggml_backend_dev_type dev_type(ggml_backend_dev_t dev) { (void) dev; return GGML_BACKEND_DEVICE_TYPE_ACCEL; }
static void dev_props(ggml_backend_dev_t dev, struct ggml_backend_dev_props * props) {
    props->name = dev_name(dev);
    props->description = dev_description(dev);
    props->type = dev_type(dev);
    dev_memory(dev, &props->memory_free, &props->memory_total);
}
static ggml_backend_t dev_init(ggml_backend_dev_t dev, const char * params) { (void) dev; (void) params; return NULL; }
// No memory of its own; the plugin references no ggml symbol, so it loads into static builds too.
static ggml_backend_buffer_type_t dev_buft(ggml_backend_dev_t dev) { (void) dev; return NULL; }
static bool dev_supports_op(ggml_backend_dev_t dev, const struct ggml_tensor * op) { (void) dev; (void) op; return false; }
static bool dev_supports_buft(ggml_backend_dev_t dev, ggml_backend_buffer_type_t buft) { (void) dev; (void) buft; return false; }

static struct ggml_backend_reg plugin_reg;

static struct ggml_backend_device plugin_dev = {
    /* .iface = */ {
        /* .get_name             = */ dev_name,
        /* .get_description      = */ dev_description,
        /* .get_memory           = */ dev_memory,
        /* .get_type             = */ dev_type,
        /* .get_props            = */ dev_props,
        /* .init_backend         = */ dev_init,
        /* .get_buffer_type      = */ dev_buft,
        /* .get_host_buffer_type = */ NULL,
        /* .buffer_from_host_ptr = */ NULL,
        /* .supports_op          = */ dev_supports_op,
        /* .supports_buft        = */ dev_supports_buft,
        /* .offload_op           = */ NULL,
        /* .event_new            = */ NULL,
        /* .event_free           = */ NULL,
        /* .event_synchronize    = */ NULL,
    },
    /* .reg     = */ &plugin_reg,
    /* .context = */ NULL,
};

static const char * reg_name(ggml_backend_reg_t reg) { (void) reg; return TEST_PLUGIN_NAME; }
static size_t reg_dev_count(ggml_backend_reg_t reg) { (void) reg; return 1; }
static ggml_backend_dev_t reg_dev_get(ggml_backend_reg_t reg, size_t index) { (void) reg; return index == 0 ? &plugin_dev : NULL; }
static int plugin_answer(void) { return 42; }
static void * reg_proc_address(ggml_backend_reg_t reg, const char * name) {
    (void) reg;
    return name && name[0] == 'a' ? (void *) plugin_answer : NULL;
}

static struct ggml_backend_reg plugin_reg = {
    /* .api_version = */ TEST_PLUGIN_API_VERSION,
    /* .iface       = */ { reg_name, reg_dev_count, reg_dev_get, reg_proc_address },
    /* .context     = */ NULL,
};

__attribute__((visibility("default"))) ggml_backend_reg_t ggml_backend_init(void) { return &plugin_reg; }

#ifndef TEST_PLUGIN_NO_SCORE
__attribute__((visibility("default"))) int ggml_backend_score(void) { return TEST_PLUGIN_SCORE; }
#endif
