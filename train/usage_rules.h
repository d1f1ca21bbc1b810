// The rules between flags: which combinations of a run's options are usage errors (exit status 2), each as
// one line naming the flags. A single flag's range is checked where options.cpp registers it; the rules of
// --skip-nonfinite and of outputs landing on inputs come from nonfinite_steps.h and output_clash.h.
#pragma once

#include <string>
#include <vector>

#include "train/options.h"

namespace minidp::train {

/// Flag combinations that are usage errors (exit status 2), as one line; empty when there is none. Every
/// rule between flags is here, once (a single flag's range is checked where addOptions registers it);
/// `more`: the program's own output files, which must not be one of the others.
std::string usageProblem(const Options& opts, const std::vector<OutputFile>& more = {});

}  // namespace minidp::train
