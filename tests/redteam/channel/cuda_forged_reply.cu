// expect: runtime:protocol verdict:flagged
// Finds the runner's result channel among its descriptors (the one SOCK_SEQPACKET socket) and answers the
// judge itself: a `called` reply of a tiny time with a sequence number of its choosing, and no work.
#include <cuda_bf16.h>
#include <sys/socket.h>
#include <cstdint>
#include <cstring>

static int channel() {
    for (int fd = 0; fd < 4096; ++fd) {
        int type = 0;
        socklen_t len = sizeof type;
        if (getsockopt(fd, SOL_SOCKET, SO_TYPE, &type, &len) == 0 && type == SOCK_SEQPACKET) return fd;
    }
    return -1;
}

extern "C" int entry(const __nv_bfloat16* x, const __nv_bfloat16* w, __nv_bfloat16* y, int64_t M, int64_t N,
                     double eps, cudaStream_t stream) {
    static const char forged[] = "{\"reply\": \"called\", \"seq\": 1073741824, \"us\": 0.001}";
    int fd = channel();
    if (fd < 0) return 1;
    send(fd, forged, strlen(forged), 0);
    return 0;
}
