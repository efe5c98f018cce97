// Stand-in for a lesson on a machine without a GPU: prints the transcript
// recorded on the GPU machine (argv[1]) and exits with argv[2] (default 0).
// Host code only, so nvcc builds it and the CPU runs it.
#include <cstdio>
#include <cstdlib>

int main(int argc, char** argv) {
    if (argc < 2) {
        std::fprintf(stderr, "usage: %s TRANSCRIPT [EXIT_STATUS]\n", argv[0]);
        return 2;
    }
    std::FILE* in = std::fopen(argv[1], "rb");
    if (in == nullptr) {
        std::perror(argv[1]);
        return 2;
    }
    char buffer[65536];
    std::size_t count;
    while ((count = std::fread(buffer, 1, sizeof buffer, in)) > 0) {
        std::fwrite(buffer, 1, count, stdout);
    }
    std::fclose(in);
    return argc > 2 ? std::atoi(argv[2]) : 0;
}
