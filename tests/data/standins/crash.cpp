// Stand-in for a lesson that crashes: one line of output, then SIGABRT.
#include <cstdio>
#include <cstdlib>

int main() {
    std::printf("GPU: NVIDIA H200 (compute capability 9.0)\n");
    std::fflush(stdout);
    std::abort();
}
