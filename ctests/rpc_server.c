// rpc_server.c — serves this build's CPU backend to ggml-rpc clients on one TCP endpoint: the
// server the rpc/* tests start on the loopback address (ctests/rpc_run.py). Built twice, as
// `rpc_server` against this library and `rpc_server_ref` against upstream's pristine build, so
// each side of a differential test computes on servers of its own build.
//
// Usage: rpc_server --port N [--host ADDR (127.0.0.1)] [--threads N (2)] [--lifetime S (0)]
//                   [--device cpu|test (cpu)] [--fail RULES]
//
//   --port      the TCP port to listen on (1..65535). ggml_backend_rpc_start_server binds the
//               port it is given and cannot report one the system picks, so the caller picks a
//               free port (rpc_run.py binds port 0 to find one).
//   --threads   CPU threads of the served backend (ggml_backend_set_n_threads through the
//               CPU registry, as the server does for every device it serves).
//   --lifetime  exit after S seconds whatever happens (SIGALRM); 0: no limit.
//   --device    the device served: the CPU, or TESTGPU0 (ctests/doubles/test_device.c: the CPU
//               backend behind a test device), whose faults on demand apply:
//   --fail      sets GGML_BACKEND_RS_TESTGPU_FAIL=RULES for this server (e.g. exit:20 ends the
//               server at its 20th graph compute, hang:20 stops it there; see test_device.c),
//               so that one server of a test fails while the client and the others do not.
//
// Once the server listens (a helper thread looks for a listening socket of this process on the
// port), prints the line
//   rpc_server: ready ADDR:PORT threads=N
// The server then runs until it is killed; ggml_backend_rpc_start_server returns only when it
// cannot listen (e.g. the port is taken), and then the program exits with status 1.
// On Linux the program also exits when its parent process does (PR_SET_PDEATHSIG), so a test
// harness that dies leaves no server behind.

#define _POSIX_C_SOURCE 200809L // nanosleep, sysconf, getsockopt under -std=c11

#include "ggml-backend.h"
#include "ggml-rpc.h"
#include "test_device.h"

#include <errno.h>
#include <netinet/in.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>
#ifdef __linux__
#include <sys/prctl.h>
#endif

struct endpoint {
    char host[64];
    int port;
    int threads;
};

static long parse_long(const char * s, const char * flag, long min, long max) {
    char * end = NULL;
    errno = 0;
    const long v = strtol(s, &end, 10);
    if (!end || *end || errno || v < min || v > max) {
        fprintf(stderr, "rpc_server: %s needs an integer in [%ld, %ld], got '%s'\n", flag, min, max, s);
        exit(2);
    }
    return v;
}

// Whether a socket of this process listens on `port` (the server's, once it has bound and
// listens; a listener of another process on that port is not one of ours).
static int listening_here(int port) {
    long max_fd = sysconf(_SC_OPEN_MAX);
    if (max_fd < 0 || max_fd > 4096) {
        max_fd = 4096;
    }
    for (int fd = 0; fd < (int) max_fd; fd++) {
        int accepting = 0;
        socklen_t len = sizeof(accepting);
        if (getsockopt(fd, SOL_SOCKET, SO_ACCEPTCONN, &accepting, &len) != 0 || !accepting) {
            continue;
        }
        struct sockaddr_in addr;
        socklen_t alen = sizeof(addr);
        if (getsockname(fd, (struct sockaddr *) &addr, &alen) == 0 && addr.sin_family == AF_INET &&
            ntohs(addr.sin_port) == port) {
            return 1;
        }
    }
    return 0;
}

// Prints the ready line once the server listens: looks every 10 ms, for at most 10 s.
static void * announce_when_listening(void * arg) {
    const struct endpoint * ep = arg;
    for (int attempt = 0; attempt < 1000; attempt++) {
        if (listening_here(ep->port)) {
            printf("rpc_server: ready %s:%d threads=%d\n", ep->host, ep->port, ep->threads);
            fflush(stdout);
            return NULL;
        }
        const struct timespec pause = {0, 10 * 1000 * 1000};
        nanosleep(&pause, NULL);
    }
    fprintf(stderr, "rpc_server: not listening on %s:%d after 10 s\n", ep->host, ep->port);
    return NULL;
}

int main(int argc, char ** argv) {
    struct endpoint ep = {"127.0.0.1", 0, 2};
    long lifetime = 0;
    int test_device = 0;
    for (int i = 1; i < argc; i++) {
        const char * a = argv[i];
        if (i + 1 >= argc) {
            fprintf(stderr, "rpc_server: %s: missing value\n", a);
            return 2;
        }
        const char * v = argv[++i];
        if (strcmp(a, "--port") == 0) {
            ep.port = (int) parse_long(v, a, 1, 65535);
        } else if (strcmp(a, "--host") == 0) {
            if (strlen(v) >= sizeof(ep.host)) {
                fprintf(stderr, "rpc_server: --host too long\n");
                return 2;
            }
            strcpy(ep.host, v);
        } else if (strcmp(a, "--threads") == 0) {
            ep.threads = (int) parse_long(v, a, 1, 1024);
        } else if (strcmp(a, "--lifetime") == 0) {
            lifetime = parse_long(v, a, 0, 86400);
        } else if (strcmp(a, "--device") == 0 && (strcmp(v, "cpu") == 0 || strcmp(v, "test") == 0)) {
            test_device = strcmp(v, "test") == 0;
        } else if (strcmp(a, "--fail") == 0) {
            setenv("GGML_BACKEND_RS_TESTGPU_FAIL", v, 1);
        } else {
            fprintf(stderr, "usage: rpc_server --port N [--host ADDR] [--threads N] [--lifetime S] "
                            "[--device cpu|test] [--fail RULES]\n");
            return 2;
        }
    }
    if (ep.port == 0) {
        fprintf(stderr, "usage: rpc_server --port N [--host ADDR] [--threads N] [--lifetime S]\n");
        return 2;
    }
#ifdef __linux__
    const pid_t parent = getppid();
    prctl(PR_SET_PDEATHSIG, SIGTERM);
    if (getppid() != parent) {
        return 1; // the parent is already gone
    }
#endif
    if (lifetime > 0) {
        alarm((unsigned) lifetime);
    }
    // Upstream's server prints with printf; line buffering lets a harness read it as it comes.
    setvbuf(stdout, NULL, _IOLBF, 0);

    if (test_device) {
        test_device_register(ep.threads);
    }
    ggml_backend_dev_t cpu = test_device ? ggml_backend_dev_by_name("TESTGPU0")
                                         : ggml_backend_dev_by_type(GGML_BACKEND_DEVICE_TYPE_CPU);
    if (!cpu) {
        fprintf(stderr, "rpc_server: no %s device\n", test_device ? "TESTGPU0" : "CPU");
        return 1;
    }
    char name[96];
    snprintf(name, sizeof(name), "%s:%d", ep.host, ep.port);

    pthread_t announcer;
    if (pthread_create(&announcer, NULL, announce_when_listening, &ep) != 0) {
        fprintf(stderr, "rpc_server: cannot start a thread\n");
        return 1;
    }
    pthread_detach(announcer);
    ggml_backend_rpc_start_server(name, NULL, (size_t) ep.threads, 1, &cpu);
    fprintf(stderr, "rpc_server: the server on %s stopped (is the port taken?)\n", name);
    return 1;
}
