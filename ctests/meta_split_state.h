// meta_split_state.h — the meta API for the C++ test and benchmark programs, for every ggml
// version they build against (ours and upstream's): the header that declares it (ggml 0.9.11:
// ggml-ext.h, next to upstream's sources; from 0.26 on: ggml-backend.h, and our ggml-ext.h only
// adds accessors), and an empty split state of the version's layout.
#pragma once

#include "ggml-backend.h"

#if __has_include("ggml-ext.h")
#    include "ggml-ext.h"
#endif

#include <cstring>

// MIRRORED, one segment; where segments repeat (GGML_BACKEND_RS_HAS_SPLIT_NR) every segment
// counted once (nr = 1), as a state without repeats must say.
inline ggml_backend_meta_split_state meta_split_state_mirrored() {
    ggml_backend_meta_split_state s;
    memset(&s, 0, sizeof(s));
    s.axis = GGML_BACKEND_SPLIT_AXIS_MIRRORED;
    s.n_segments = 1;
#if GGML_BACKEND_RS_HAS_SPLIT_NR
    for (uint32_t & r : s.nr) r = 1;
#endif
    return s;
}
