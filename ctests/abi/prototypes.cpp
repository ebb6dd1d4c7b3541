// abi_prototypes: upstream's headers and ours in one C++ translation unit.
//
// Upstream's ggml-backend.h, ggml-backend-impl.h and (ggml 0.9.11) ggml-ext.h come first and define every
// type. Ours follow with GGML_BACKEND_RS_PROTOTYPES_ONLY, which hides their macros, constants,
// enums and structs (C++ forbids defining a struct twice) but keeps their typedefs and
// function prototypes. C++ accepts a repeated typedef only if it names the same type, and a
// repeated extern "C" function only with the same type ("conflicting declaration of C
// function"), so every typedef and prototype of ours is checked against upstream's by the
// compiler. Struct and enum contents are checked by abi_layout.
//
// Include paths: upstream's ggml/include and ggml/src only; ours are included by the
// absolute paths GGML_RS_BACKEND_H, GGML_RS_BACKEND_IMPL_H and GGML_RS_EXT_H.

#include "ggml-backend.h"
#include "ggml-backend-impl.h"
#if __has_include("ggml-ext.h") // 0.9.11; from 0.26 on the meta API is in ggml-backend.h
#    include "ggml-ext.h"
#endif

#ifdef GGML_BACKEND_RS_HEADERS
#    error "upstream's headers must come first: check the include paths"
#endif

#define GGML_BACKEND_RS_PROTOTYPES_ONLY
#include GGML_RS_BACKEND_H
#include GGML_RS_BACKEND_IMPL_H
#include GGML_RS_EXT_H

#ifndef GGML_BACKEND_RS_HEADERS
#    error "our headers were not read"
#endif

// The two meta functions (ggml 0.9.11: ggml-ext.h, C++ linkage; from 0.26 on: ggml-backend.h,
// C linkage). With C++ linkage a different parameter list would declare an overload instead of
// clashing. Taking their address is ambiguous, an error, if there are two; the types must also
// be upstream's.
#include <type_traits>
static_assert(std::is_same<decltype(&ggml_backend_meta_device),
                           ggml_backend_dev_t (*)(ggml_backend_dev_t *, size_t,
                                                  ggml_backend_meta_get_split_state_t, void *)>::value,
              "ggml_backend_meta_device");
static_assert(std::is_same<decltype(&ggml_backend_meta_split_axis_name),
                           const char * (*)(enum ggml_backend_meta_split_axis)>::value,
              "ggml_backend_meta_split_axis_name");

int main() { return 0; }
