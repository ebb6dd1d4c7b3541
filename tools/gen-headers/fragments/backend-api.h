// GGML_BACKEND_API: how a backend library marks the symbols it exports (ggml_backend_init,
// ggml_backend_score, its own API). Static builds need nothing; shared builds export with
// default visibility, or dllexport/dllimport on Windows depending on GGML_BACKEND_BUILD.
#if !defined(GGML_BACKEND_SHARED)
#    define GGML_BACKEND_API extern
#elif defined(_WIN32) && !defined(__MINGW32__)
#    if defined(GGML_BACKEND_BUILD)
#        define GGML_BACKEND_API __declspec(dllexport) extern
#    else
#        define GGML_BACKEND_API __declspec(dllimport) extern
#    endif
#else
#    define GGML_BACKEND_API __attribute__((visibility("default"))) extern
#endif
