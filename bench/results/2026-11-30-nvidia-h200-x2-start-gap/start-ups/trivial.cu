// Phases of one short CUDA program, as CLOCK_REALTIME nanoseconds on stdout.
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <vector>
#include <cuda_runtime.h>
static long long now() { timespec t; clock_gettime(CLOCK_REALTIME, &t); return t.tv_sec * 1000000000LL + t.tv_nsec; }
__global__ void touch(float* p, size_t n) { size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; if (i < n) p[i] += 1.0f; }
int main() {
  long long t0 = now();
  cudaFree(0);
  long long t1 = now();
  size_t n = 64 << 20;  // 256 MiB of floats
  std::vector<float> h(n, 1.0f);
  float* d; cudaMalloc(&d, n * sizeof(float));
  cudaMemcpy(d, h.data(), n * sizeof(float), cudaMemcpyHostToDevice);
  long long t2 = now();
  touch<<<(n + 255) / 256, 256>>>(d, n);
  cudaDeviceSynchronize();
  cudaMemcpy(h.data(), d, n * sizeof(float), cudaMemcpyDeviceToHost);
  long long t3 = now();
  cudaFree(d);
  long long t4 = now();
  printf("%lld %lld %lld %lld %lld %d\n", t0, t1, t2, t3, t4, h[7] == 2.0f);
  return 0;
}
