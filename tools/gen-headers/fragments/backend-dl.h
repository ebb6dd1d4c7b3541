// GGML_BACKEND_DL_IMPL(reg_fn) / GGML_BACKEND_DL_SCORE_IMPL(score_fn): in a backend built as a
// loadable module (GGML_BACKEND_DL), define the C entry points ggml_backend_init (returns
// reg_fn()) and ggml_backend_score (returns score_fn()) that ggml_backend_load looks up.
// Without GGML_BACKEND_DL they expand to nothing.
#if !defined(GGML_BACKEND_DL)
#    define GGML_BACKEND_DL_IMPL(reg_fn)
#    define GGML_BACKEND_DL_SCORE_IMPL(score_fn)
#elif defined(__cplusplus)
#    define GGML_BACKEND_DL_IMPL(reg_fn)                                   \
        extern "C" {                                                       \
        GGML_BACKEND_API ggml_backend_reg_t ggml_backend_init(void);       \
        }                                                                  \
        ggml_backend_reg_t ggml_backend_init(void) { return reg_fn(); }
#    define GGML_BACKEND_DL_SCORE_IMPL(score_fn)                           \
        extern "C" {                                                       \
        GGML_BACKEND_API int ggml_backend_score(void);                     \
        }                                                                  \
        int ggml_backend_score(void) { return score_fn(); }
#else
#    define GGML_BACKEND_DL_IMPL(reg_fn)                                   \
        GGML_BACKEND_API ggml_backend_reg_t ggml_backend_init(void);       \
        ggml_backend_reg_t ggml_backend_init(void) { return reg_fn(); }
#    define GGML_BACKEND_DL_SCORE_IMPL(score_fn)                           \
        GGML_BACKEND_API int ggml_backend_score(void);                     \
        int ggml_backend_score(void) { return score_fn(); }
#endif
