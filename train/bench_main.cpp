// minidp-bench: the overlap benchmark of train/bench.h over the built-in models.
#include "train/bench.h"

int main(int argc, char** argv) { return minidp::train::runBench(argc, argv, "minidp-bench"); }
