// CHECK(cond, fmt, ...): a test program's assertion. When `cond` is false it prints the program's
// name (CHECK_PROGRAM, defined before this header), the line, the condition and the message, and
// exits with status 1.
#pragma once

#include <stdio.h>
#include <stdlib.h>

#define CHECK(cond, ...)                                                                    \
    do {                                                                                    \
        if (!(cond)) {                                                                      \
            fprintf(stderr, "%s: FAILED at line %d: %s: ", CHECK_PROGRAM, __LINE__, #cond); \
            fprintf(stderr, __VA_ARGS__);                                                   \
            fprintf(stderr, "\n");                                                          \
            exit(1);                                                                        \
        }                                                                                   \
    } while (0)
