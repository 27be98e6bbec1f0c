// A small CUDA program for the GPU check: two "ops" with NVTX ranges in the naming mpress's
// analyser reads (docs/event-format.md), four steps, and allocations whose fate is known:
//   param:layer0.a  2 MiB, never freed                       -> param_bytes of layer0.a
//   fwd:layer0.a    4 MiB freed in bwd:layer0.a              -> a saved tensor of layer0.a
//                   1 MiB freed inside fwd:layer0.a          -> workspace of layer0.a
//   fwd:layer0.b    8 MiB freed in bwd:layer0.b              -> a saved tensor of layer0.b
//   bwd:layer0.b    512 KiB, allocated in step 0, never freed -> grad_bytes of layer0.b
// layer0.b's forward spins about 4x as long as layer0.a's. With "crash" as argument it aborts
// in the middle of step 2, to check that the trace up to there survives.
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <cuda_runtime.h>
#include <nvtx3/nvToolsExt.h>

#define CK(x)                                                                                  \
    do {                                                                                       \
        cudaError_t e_ = (x);                                                                  \
        if (e_ != cudaSuccess) {                                                               \
            fprintf(stderr, "sample: %s: %s\n", #x, cudaGetErrorString(e_));                   \
            exit(1);                                                                           \
        }                                                                                      \
    } while (0)

// out is (n,) floats; spins `cycles` clock cycles per thread so the kernel's length is known
// relative to the other op's.
__global__ void spin(float *out, size_t n, long long cycles)
{
    size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
    long long t0 = clock64();
    while (clock64() - t0 < cycles) {
    }
    if (i < n)
        out[i] = (float)i;
}

static void run(float *p, size_t bytes, long long cycles)
{
    size_t n = bytes / sizeof(float);
    spin<<<(unsigned)((n + 255) / 256), 256>>>(p, n, cycles);
    CK(cudaGetLastError());
}

int main(int argc, char **argv)
{
    int crash = argc > 1 && strcmp(argv[1], "crash") == 0;
    // CUDA first: the tracer is loaded when CUDA initialises, and ranges pushed before that
    // are not seen.
    CK(cudaFree(0));
    const size_t MiB = 1 << 20;
    float *param, *grad = nullptr;
    nvtxRangePushA("param:layer0.a");
    CK(cudaMalloc(&param, 2 * MiB));
    nvtxRangePop();
    for (int step = 0; step < 4; step++) {
        char name[32];
        snprintf(name, sizeof(name), "step %d", step);
        nvtxRangePushA(name);
        float *a, *ws, *b;
        nvtxRangePushA("fwd:layer0.a");
        CK(cudaMalloc(&a, 4 * MiB));
        run(a, 4 * MiB, 200000);
        CK(cudaMalloc(&ws, 1 * MiB));
        run(ws, 1 * MiB, 1000);
        CK(cudaDeviceSynchronize());
        CK(cudaFree(ws));
        nvtxRangePop();
        nvtxRangePushA("fwd:layer0.b");
        CK(cudaMalloc(&b, 8 * MiB));
        run(b, 8 * MiB, 800000);
        CK(cudaDeviceSynchronize());
        nvtxRangePop();
        if (crash && step == 2)
            abort();
        nvtxRangePushA("bwd:layer0.b");
        if (!grad)
            CK(cudaMalloc(&grad, 512 * 1024));
        run(grad, 512 * 1024, 100000);
        CK(cudaDeviceSynchronize());
        CK(cudaFree(b));
        nvtxRangePop();
        nvtxRangePushA("bwd:layer0.a");
        run(param, 2 * MiB, 100000);
        CK(cudaDeviceSynchronize());
        CK(cudaFree(a));
        nvtxRangePop();
        nvtxRangePop();
    }
    CK(cudaFree(param));
    CK(cudaFree(grad));
    printf("sample: done\n");
    return 0;
}
