// custom-bench: minidp-bench with the rms-mlp model registered; its step timed with overlap off and on.
//   mpirun -np 2 custom-bench --model rms-mlp --hidden 512 --bucket-mb-list 0.5,2
#include "rms_mlp.h"
#include "train/bench.h"

int main(int argc, char** argv) {
  custom::registerRmsMlp();
  return minidp::train::runBench(argc, argv, "custom-bench");
}
