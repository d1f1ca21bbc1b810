// custom-hook-train: minidp-train with --comm-hook topk (and its --top-k-fraction) registered; every minidp-train
// flag works.
//   mpirun -np 2 custom-hook-train --model mlp --comm-hook topk --top-k-fraction 0.05 --steps 300
#include "top_k_hook.h"
#include "train/training_loop.h"

int main(int argc, char** argv) {
  custom::registerTopKHook();
  return minidp::train::runTraining(argc, argv, "custom-hook-train");
}
