// The mixtrain command line (placeholder until the subcommands land).
#include <cstdio>

int main(int argc, char** argv) {
  std::fprintf(stderr, "usage: mixtrain <dump|run|grad|train|bench> ...\n");
  return 2;
}
