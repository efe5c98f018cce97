// Stand-in for a lesson that prints garbage: one good line, then every byte
// value 0x00-0xff and sequences that are not UTF-8.
#include <cstdio>

int main() {
    std::printf("GPU: NVIDIA H200 (compute capability 9.0)\n");
    for (int value = 0; value < 256; ++value) std::putchar(value);
    std::fputs("\xc3\x28 \xa0\xa1 \xe2\x28\xa1 \xf0\x28\x8c\xbc \xff\xfe\n", stdout);
    return 0;
}
