// Stand-in for a lesson whose output never stops: 100 MiB of lines on stdout.
#include <cstdio>
#include <cstring>

int main() {
    static char block[1 << 20];
    std::memset(block, 'x', sizeof block);
    for (std::size_t i = 63; i < sizeof block; i += 64) block[i] = '\n';
    for (int i = 0; i < 100; ++i) {
        std::fwrite(block, 1, sizeof block, stdout);
    }
    return 0;
}
