// minidp-train: trains a model of the registry (the MLP on Fashion-MNIST, the GPT on fortunes or llm.c
// tokens) data-parallel over the ranks mpirun started (or alone). The loop is train::runTraining.
#include "train/training_loop.h"

int main(int argc, char** argv) { return minidp::train::runTraining(argc, argv); }
