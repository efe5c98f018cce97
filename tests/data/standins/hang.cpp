// Stand-in for a lesson that never finishes: prints a partial line, forks a
// child that sleeps as well, then sleeps forever. Only killing the whole
// process group ends both. The child's pid goes to stderr, and also into the
// file argv[1] when given, so a test can look for the child afterwards.
#include <cstdio>
#include <unistd.h>

int main(int argc, char** argv) {
    pid_t child = fork();
    if (child == 0) {
        for (;;) pause();
    }
    if (argc > 1) {
        std::FILE* out = std::fopen(argv[1], "w");
        if (out != nullptr) {
            std::fprintf(out, "%d\n", static_cast<int>(child));
            std::fclose(out);
        }
    }
    std::fprintf(stderr, "child %d\n", static_cast<int>(child));
    std::fflush(stderr);
    std::printf("GPU: NVIDIA H200 (compute capability 9.0)\nMatrix: 2003 x 3001 floats, 22.9 MiB");
    std::fflush(stdout);
    for (;;) pause();
}
