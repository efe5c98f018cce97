// Stand-in that prints the string its build defines as GREETING, to show
// what a flag from lessons.yaml became by the time the compiler saw it.
#include <cstdio>

int main() {
    std::puts(GREETING);
    return 0;
}
