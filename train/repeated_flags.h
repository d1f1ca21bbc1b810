// Every flag given twice is refused alike, list-valued ones included (`--hidden 32 --hidden 64` would build
// layers [32, 64]; a scalar's second value would replace or join the first), before CLI11 reads any value.
#pragma once

#include <CLI/CLI.hpp>
#include <string>

namespace minidp::train {

/// The first flag of `app` that the command line gives twice (any spelling: "--lr 1 --lr=2"), as one line naming
/// it; empty when each is given at most once. Tokens after "--" are values.
std::string repeatedFlagProblem(const CLI::App& app, int argc, char** argv);

}  // namespace minidp::train
