// The kiln command line: a straight-line driver over the library layers.
#include <cstdio>
int main() {
  return 0;
}
