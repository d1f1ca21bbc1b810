// The full training state in one safetensors file, for --save, --save-every and --resume: parameters
// under their PyTorch names (so torch and --load read the weights alone), optimizer state under
// "optimizer.<name>.<kind>", and in the "minidp" metadata entry a JSON object with the step, the sampler
// position (micro-batches drawn: the sampler is replayed to it, which restores its RNG) and what must
// match to continue (model, dtype, optimizer, seed, global batch). Trainer::saveState / resume.
#pragma once

#include <string>

#include "train/options.h"

namespace minidp::train {

/// Checks that `path` is a training state this run (`opts` on `world` ranks) can continue: readable,
/// written by saveState, same model flags, dtype, optimizer, seed and global batch, fewer steps than
/// --steps. Errors name the flag that differs.
void checkResumeFile(const Options& opts, const std::string& path, int world);

}  // namespace minidp::train
