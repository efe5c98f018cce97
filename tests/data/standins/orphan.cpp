// Stand-in for a lesson that exits but leaves a child behind holding its
// stdout: prints the transcript recorded on the GPU machine (argv[1]), forks
// a child that sleeps for a minute with stdout still open, writes the
// child's pid into the file argv[2] when given, and exits 0.
#include <cstdio>
#include <unistd.h>

int main(int argc, char** argv) {
    if (argc < 2) {
        std::fprintf(stderr, "usage: %s TRANSCRIPT [PID_FILE]\n", argv[0]);
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
    std::fflush(stdout);
    pid_t child = fork();
    if (child == 0) {
        sleep(60);
        return 0;
    }
    if (argc > 2) {
        std::FILE* out = std::fopen(argv[2], "w");
        if (out != nullptr) {
            std::fprintf(out, "%d\n", static_cast<int>(child));
            std::fclose(out);
        }
    }
    return 0;
}
