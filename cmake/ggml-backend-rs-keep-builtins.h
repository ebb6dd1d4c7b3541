// Forced into the compile of ggml.c when ggml-base is a static library (cmake/ggml-backend-rs.cmake).
//
// libggml.a holds one object, the list of compiled-in backends (ggml-backend-rs-builtins.c), and
// nothing a program calls refers to it: the Rust registry takes the list when that object's
// constructor hands it over. A linker given the archives by path (cargo's llama-cpp-sys-2, Meson,
// a Makefile) would therefore drop the object, and the program would find no backends. ggml.c's
// object is in every program that uses ggml; this reference makes the linker keep the list.

#include <stddef.h>

struct ggml_backend_reg;

size_t ggml_backend_rs_builtin_regs(struct ggml_backend_reg ** regs, size_t capacity);

__attribute__((used)) static size_t (*const ggml_backend_rs_keep_builtins)(struct ggml_backend_reg **, size_t) =
    ggml_backend_rs_builtin_regs;
