// custom-train: minidp-train with the rms-mlp model registered; every minidp-train flag works.
//   mpirun -np 2 custom-train --model rms-mlp --steps 200
#include "rms_mlp.h"
#include "train/training_loop.h"

int main(int argc, char** argv) {
  custom::registerRmsMlp();
  return minidp::train::runTraining(argc, argv, "custom-train");
}
