// Stand-in for a lesson on a machine without a GPU: prints the transcript
// recorded on the GPU machine (argv[1]) and exits with argv[2] (default 0).
// Host code only (a .cpp file, which nvcc hands to the host compiler), so nvcc
// builds it in a tenth of a second and the CPU runs it.
//
// For tests of how runs share the GPUs, three environment variables, and one for retries:
//   STANDIN_LOG    append "PID start T CUDA_VISIBLE_DEVICES CUDA_DEVICE_ORDER"
//                  before the run and "PID end T ..." after it, T in seconds of
//                  CLOCK_MONOTONIC (Python's time.monotonic), one write() each
//   STANDIN_SLEEP  take this many seconds before printing
//   STANDIN_GATE   ...or less: stop waiting as soon as this file exists
//   STANDIN_CRASH_ONCE  if this file does not exist: create it, then abort()
//                  (SIGABRT); the first run crashes, the runs after it replay
//   STANDIN_ROTATE a counter file: the run it counts as the k-th (from 0) prints
//                  TRANSCRIPT.k instead, where that file exists (runs that differ)
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fcntl.h>
#include <time.h>
#include <unistd.h>

static double now() {
    timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) * 1e-9;
}

static void log_event(const char* what) {
    const char* path = std::getenv("STANDIN_LOG");
    if (path == nullptr) return;
    const char* visible = std::getenv("CUDA_VISIBLE_DEVICES");
    const char* order = std::getenv("CUDA_DEVICE_ORDER");
    char line[512];
    int length = std::snprintf(line, sizeof line, "%d %s %.6f %s %s\n", static_cast<int>(getpid()), what,
                               now(), visible ? visible : "-", order ? order : "-");
    // O_APPEND and one write(): lines of runs in other processes never interleave.
    int fd = open(path, O_WRONLY | O_APPEND | O_CREAT, 0644);
    if (fd < 0) return;
    if (write(fd, line, static_cast<std::size_t>(length)) != length) std::perror(path);
    close(fd);
}

static void take_time() {
    const char* seconds = std::getenv("STANDIN_SLEEP");
    if (seconds == nullptr) return;
    const char* gate = std::getenv("STANDIN_GATE");
    double deadline = now() + std::atof(seconds);
    while (now() < deadline) {
        if (gate != nullptr && access(gate, F_OK) == 0) return;
        usleep(10000);
    }
}

int main(int argc, char** argv) {
    if (argc < 2) {
        std::fprintf(stderr, "usage: %s TRANSCRIPT [EXIT_STATUS]\n", argv[0]);
        return 2;
    }
    log_event("start");
    const char* once = std::getenv("STANDIN_CRASH_ONCE");
    if (once != nullptr && access(once, F_OK) != 0) {
        int fd = open(once, O_WRONLY | O_CREAT, 0644);
        if (fd >= 0) close(fd);
        std::abort();
    }
    take_time();
    const char* path = argv[1];
    char rotated[4096];
    const char* rotate = std::getenv("STANDIN_ROTATE");
    if (rotate != nullptr) {
        int k = 0;
        if (std::FILE* counter = std::fopen(rotate, "r")) {
            if (std::fscanf(counter, "%d", &k) != 1) k = 0;
            std::fclose(counter);
        }
        if (std::FILE* counter = std::fopen(rotate, "w")) {
            std::fprintf(counter, "%d\n", k + 1);
            std::fclose(counter);
        }
        std::snprintf(rotated, sizeof rotated, "%s.%d", argv[1], k);
        if (access(rotated, F_OK) == 0) path = rotated;
    }
    std::FILE* in = std::fopen(path, "rb");
    if (in == nullptr) {
        std::perror(path);
        return 2;
    }
    char buffer[65536];
    std::size_t count;
    while ((count = std::fread(buffer, 1, sizeof buffer, in)) > 0) {
        std::fwrite(buffer, 1, count, stdout);
    }
    std::fclose(in);
    std::fflush(stdout);
    log_event("end");
    return argc > 2 ? std::atoi(argv[2]) : 0;
}
