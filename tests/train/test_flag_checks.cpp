// The flags of minidp-train, each checked once where it is registered: every number flag refuses NaN,
// infinities and values outside its range, in a short message; the range --help prints parses (its ends
// included, "1e+09" for an integer flag too); path flags refuse an empty string.
#include <gtest/gtest.h>

#include <CLI/CLI.hpp>
#include <limits>
#include <regex>

#include "framework/distributed/gradient/comm_hook.h"
#include "models/registry.h"
#include "train/run_checks.h"
#include "train/trainer.h"
#include "train/usage_rules.h"

namespace minidp {
namespace {

/// Parses `args` into `o` with minidp-train's flags (and records them, as parseCommandLine does); the CLI11
/// error's text, or "" when it parsed.
std::string parse(const std::vector<std::string>& args, train::Options& o) {
  CLI::App app;
  for (size_t i = 0; i + 1 < args.size(); ++i) {
    if (args[i] == "--model") o.model = args[i + 1];  // its flags join the others
  }
  train::addOptions(app, o);
  train::addLoopOptions(app, o);
  train::addResumeOptions(app, o);
  std::vector<std::string> reversed(args.rbegin(), args.rend());  // CLI11 takes argv reversed
  try {
    app.parse(reversed);
  } catch (const CLI::ParseError& e) {
    return e.what();
  }
  train::recordParsedFlags(app, o);
  return "";
}

std::string parse(const std::vector<std::string>& args) {
  train::Options o;
  return parse(args, o);
}

/// Every flag whose value is a number, with the range its help shows ("[1, 1e+09]"; empty for model flags,
/// which the model's registry entry checks).
std::vector<std::pair<std::string, std::string>> numberFlags() {
  train::Options o;
  CLI::App app;
  train::addOptions(app, o);
  train::addLoopOptions(app, o);
  train::addResumeOptions(app, o);
  std::vector<std::pair<std::string, std::string>> out;
  for (const CLI::Option* option : app.get_options()) {
    const std::string type = option->get_type_name();
    if (type.rfind("INT", 0) != 0 && type.rfind("UINT", 0) != 0 && type.rfind("FLOAT", 0) != 0) continue;
    if (type.find('{') != std::string::npos) continue;  // a choice of words or numbers (--zero {0,1})
    std::smatch range;
    const std::string text = type;
    out.emplace_back(option->get_name(), std::regex_search(text, range, std::regex(R"([\[(][^\])]*\])")) ? range.str()
                                                                                                         : "");
  }
  return out;
}

TEST(FlagChecks, EveryNumberFlagRefusesNaNInfinityAndHugeValuesInAShortLine) {
  const auto flags = numberFlags();
  ASSERT_GT(flags.size(), 25u);
  for (const auto& [flag, range] : flags) {
    for (const std::string bad : {"nan", "-nan", "inf", "-inf", "1e400", "-1e300", "x"}) {
      const std::string error = parse({flag, bad});
      EXPECT_NE(error.find(flag), std::string::npos) << flag << " " << bad << ": " << error;
      EXPECT_LT(error.size(), 200u) << flag << " " << bad << ": " << error;
      EXPECT_FALSE(std::regex_search(error, std::regex("[0-9]{21}"))) << flag << " " << bad << ": " << error;
    }
  }
}

TEST(FlagChecks, TheRangeHelpPrintsParses) {
  for (const auto& [flag, range] : numberFlags()) {
    if (range.empty()) continue;
    const std::string inner = range.substr(1, range.size() - 2);
    const std::string lo = inner.substr(0, inner.find(',')), hi = inner.substr(inner.find(", ") + 2);
    EXPECT_EQ(parse({flag, hi}), "") << flag << " " << hi << " is the top of " << range;
    if (range[0] == '[') EXPECT_EQ(parse({flag, lo}), "") << flag << " " << lo << " is the bottom of " << range;
    if (range[0] == '(') EXPECT_NE(parse({flag, lo}), "") << flag << " " << lo << " lies outside " << range;
  }
}

TEST(FlagChecks, IntegersInExponentNotationAndTheWholeSeedRange) {
  train::Options o;
  ASSERT_EQ(parse({"--log-every", "1e9", "--steps", "2.5e3", "--seed", "18446744073709551615"}, o), "");
  EXPECT_EQ(o.logEvery, 1000000000);
  EXPECT_EQ(o.steps, 2500);
  EXPECT_EQ(o.seed, std::numeric_limits<uint64_t>::max());
  for (const std::string seed : {"-1", "18446744073709551616", "1e20", "0.5"}) {
    EXPECT_NE(parse({"--seed", seed}), "") << seed;
  }
  EXPECT_NE(parse({"--log-every", "1.5"}).find("must be an integer in [1, 1e+09]"), std::string::npos);
  EXPECT_NE(parse({"--bucket-mb", "-1"}), "");
  EXPECT_NE(parse({"--bucket-mb", "1e-9"}).find("at least one byte"), std::string::npos);
  ASSERT_EQ(parse({"--bucket-mb", "auto"}, o), "");
  EXPECT_EQ(o.ddp.bucketCapBytes, 0u);
}

TEST(FlagChecks, PathFlagsRefuseAnEmptyString) {
  for (const std::string flag : {"--save", "--load", "--resume", "--metrics", "--trace", "--data-dir", "--llmc-train",
                                 "--llmc-val"}) {
    EXPECT_NE(parse({flag, ""}).find("empty"), std::string::npos) << flag;
  }
}

TEST(FlagChecks, RulesBetweenFlagsAreUsageProblems) {
  const auto problem = [](const std::vector<std::string>& args) {
    train::Options o;
    EXPECT_EQ(parse(args, o), "");
    return train::usageProblem(o);
  };
  EXPECT_NE(problem({"--resume", "a", "--load", "b"}).find("not with --load"), std::string::npos);
  EXPECT_NE(problem({"--save-every", "2"}).find("--save"), std::string::npos);
  EXPECT_NE(problem({"--data", "fortunes"}).find("--data"), std::string::npos);
  EXPECT_NE(problem({"--dtype", "bf16"}).find("--device cuda"), std::string::npos);
  EXPECT_NE(problem({"--bucket-mb", "auto", "--rebuild-buckets"}).find("--rebuild-buckets"), std::string::npos);
  // The automatic cap is refused under every ZeRO stage, naming the stage given (not "--zero 1, 2").
  for (const std::string stage : {"1", "2", "3"}) {
    const std::string refused = problem({"--bucket-mb", "auto", "--zero", stage});
    EXPECT_NE(refused.find("--bucket-mb auto"), std::string::npos) << refused;
    EXPECT_NE(refused.find("--zero " + stage), std::string::npos) << refused;
    EXPECT_EQ(refused.find("--rebuild-buckets"), std::string::npos) << refused;
  }
  // --rebuild-buckets re-plans after the first step; ZeRO keeps its first plan (DDP refused it at run time, exit 1).
  for (const std::string stage : {"1", "2", "3"}) {
    EXPECT_EQ(problem({"--rebuild-buckets", "--zero", stage}),
              "--rebuild-buckets re-plans after the first step: not with --zero " + stage +
                  " (ZeRO keeps its first plan's buckets)");
  }
  EXPECT_EQ(problem({"--save-every", "2", "--save", "x"}), "");
}

// A flag given (at any value) where nothing reads it is a usage problem naming it: files of another --data,
// sampling of a model that cannot sample (its registry entry says), settings of another --zero, comm hook or
// communicator, TF32 off CUDA, periodic validation without batches, one file for two outputs.
TEST(FlagChecks, FlagsGivenWhereNothingReadsThemAreUsageProblems) {
  const auto problem = [](const std::vector<std::string>& args) {
    train::Options o;
    EXPECT_EQ(parse(args, o), "");
    return train::usageProblem(o);
  };
  const std::vector<std::string> gpt = {"--model", "gpt"};
  const auto with = [&gpt](std::vector<std::string> args) {
    args.insert(args.begin(), gpt.begin(), gpt.end());
    return args;
  };
  EXPECT_EQ(problem({"--llmc-train", "a.bin"}),
            "--llmc-train is a file of --data llmc; this run's data is fashion-mnist");
  EXPECT_EQ(problem(with({"--llmc-val", "a.bin"})), "--llmc-val is a file of --data llmc; this run's data is fortunes");
  EXPECT_EQ(problem(with({"--data", "llmc", "--llmc-train", "a", "--llmc-val", "b"})), "");
  for (const std::string flag : {"--sample", "--top-k", "--temperature"}) {
    EXPECT_EQ(problem({flag, "1"}), flag + ": --model mlp does not generate tokens");
    EXPECT_EQ(problem(with({flag, "1"})), "");
  }
  EXPECT_EQ(problem({"--zero-gather", "end"}),
            "--zero-gather end gathers ZeRO-1/2's parameter shards: it needs --zero 1 or 2");
  EXPECT_EQ(problem({"--zero-gather", "overlap", "--zero", "1"}), "");
  EXPECT_EQ(problem({"--zero-prefetch", "2", "--zero", "2"}), "--zero-prefetch is a setting of --zero 3");
  EXPECT_EQ(problem({"--zero-keep-gathered"}), "--zero-keep-gathered is a setting of --zero 3");
  EXPECT_EQ(problem({"--zero-prefetch", "2", "--zero-keep-gathered", "--zero", "3"}), "");
  EXPECT_EQ(problem({"--zero-param-dtype", "bf16", "--zero", "2"}), "--zero-param-dtype is a setting of --zero 3");
  EXPECT_EQ(problem({"--zero-param-dtype", "bf16", "--zero", "3"}), "");
  EXPECT_EQ(problem({"--bucket-mb", "1", "--zero", "3"}),
            "--bucket-mb caps the gradient buckets; --zero 3 has one per unit (a block), its gather's");
  EXPECT_EQ(problem({"--zero-gather", "end", "--zero", "3"}),
            "--zero-gather end gathers ZeRO-1/2's parameter shards: it needs --zero 1 or 2");
  EXPECT_EQ(problem({"--powersgd-rank", "4"}),
            "--powersgd-rank is a setting of --comm-hook powersgd; this run's hook is allreduce");
  EXPECT_EQ(problem({"--powersgd-start-iter", "0", "--comm-hook", "bf16"}),
            "--powersgd-start-iter is a setting of --comm-hook powersgd; this run's hook is bf16");
  EXPECT_EQ(problem({"--comm-hook", "powersgd", "--powersgd-rank", "4"}), "");
  EXPECT_EQ(problem({"--emulated-gbps", "100"}),
            "--emulated-gbps is a setting of --comm emulated; this run's communicator is single");
  EXPECT_EQ(problem({"--comm", "emulated", "--emulated-world", "8"}), "");
  // At their defaults too (the value cannot tell), and --nccl-max-ctas, which the emulated link reads as well.
  EXPECT_EQ(problem({"--nccl-buffers", "plain"}),
            "--nccl-buffers is a setting of --comm nccl; this run's communicator is single");
  EXPECT_EQ(problem({"--nccl-max-ctas", "0"}),
            "--nccl-max-ctas is a setting of --comm nccl or emulated; this run's communicator is single");
  EXPECT_EQ(problem({"--comm", "emulated", "--nccl-max-ctas", "4"}), "");
  EXPECT_EQ(problem({"--tf32"}), "--tf32 needs --device cuda (TF32 is a mode of CUDA's fp32 GEMMs)");
  EXPECT_EQ(problem(with({"--eval-every", "5", "--eval-batches", "0"})),
            "--eval-every 5 validates on --eval-batches batches: not with --eval-batches 0");
  EXPECT_EQ(problem(with({"--eval-batches", "0"})), "");
  EXPECT_EQ(problem({"--save", "x", "--metrics", "./x"}),
            "--save and --metrics both write ./x: give each its own file");
  EXPECT_EQ(problem({"--save", "a/../x", "--trace", "x"}), "--save and --trace both write x: give each its own file");
  EXPECT_EQ(problem({"--metrics", "m", "--trace", "m"}), "--metrics and --trace both write m: give each its own file");
  train::Options o;
  ASSERT_EQ(parse({"--trace", "t.json"}, o), "");
  EXPECT_EQ(train::usageProblem(o, {{"--json", "t.json"}}),
            "--trace and --json both write t.json: give each its own file");
  EXPECT_EQ(train::usageProblem(o, {{"--json", "b.json"}}), "");
}

// The device comes before the model's refusals: bf16 on the CPU says so, not that the head dim has no bf16 kernel.
TEST(FlagChecks, TheDeviceIsCheckedBeforeTheModel) {
  train::Options o;
  ASSERT_EQ(parse({"--model", "gpt", "--embd", "32", "--heads", "2", "--dtype", "bf16"}, o), "");
  EXPECT_EQ(train::usageProblem(o), "--dtype bf16 needs --device cuda (bf16 kernels are CUDA-only)");
}

// Mode flags take their names only, and a wrong one is listed against them.
TEST(FlagChecks, TheScheduleTakesItsNamesOnly) {
  train::Options o;
  EXPECT_EQ(parse({"--lr-schedule", "cosine"}, o), "");
  EXPECT_EQ(o.lrSchedule, train::LrScheduleKind::Cosine);
  EXPECT_NE(parse({"--lr-schedule", "2"}), "");
  const std::string error = parse({"--lr-schedule", "foo"});
  EXPECT_NE(error.find("--lr-schedule"), std::string::npos) << error;
  EXPECT_NE(error.find("constant"), std::string::npos) << error;
  EXPECT_EQ(error.find("->"), std::string::npos) << error;
  EXPECT_EQ(error.find("FAILED"), std::string::npos) << error;
}

// The NCCL-only flags: parsed into their named modes, the defaults changing nothing; refused, in one line
// naming the flag, on any other communicator (here no launcher: auto is single), given at their defaults
// too, above --nccl-max-ctas, and registered or symmetric buffers with ZeRO-1.
TEST(FlagChecks, NcclSettingsParseAndAreRefusedOffNccl) {
  train::Options o;
  EXPECT_EQ(parse({"--nccl-cta-policy", "zero", "--nccl-buffers", "symmetric", "--nccl-min-ctas", "4"}, o), "");
  EXPECT_EQ(o.comm.ncclCtaPolicy, distributed::NcclCtaPolicy::Zero);
  EXPECT_EQ(o.comm.ncclBuffers, distributed::CommBuffers::Symmetric);
  EXPECT_EQ(o.comm.ncclMinCtas, 4);
  train::Options defaults;
  EXPECT_EQ(parse({}, defaults), "");
  EXPECT_EQ(defaults.comm.ncclCtaPolicy, distributed::NcclCtaPolicy::Default);
  EXPECT_EQ(defaults.comm.ncclBuffers, distributed::CommBuffers::Plain);
  EXPECT_NE(parse({"--nccl-cta-policy", "1"}, o), "");  // names only, not the enum's numbers
  EXPECT_NE(parse({"--nccl-buffers", "pinned"}, o), "");
  const auto problem = [](const std::vector<std::string>& args) {
    train::Options o;
    EXPECT_EQ(parse(args, o), "");
    return train::usageProblem(o);
  };
  EXPECT_EQ(problem({"--comm", "mpi", "--nccl-cta-policy", "efficiency"}),
            "--nccl-cta-policy efficiency is a setting of the nccl communicator; this run's is mpi");
  EXPECT_EQ(problem({"--nccl-buffers", "registered"}),
            "--nccl-buffers registered is a setting of the nccl communicator; this run's is single");
  EXPECT_EQ(problem({"--device", "cuda", "--nccl-min-ctas", "2"}),
            "--nccl-min-ctas 2 is a setting of the nccl communicator; this run's is single");
  EXPECT_EQ(problem({"--comm", "nccl", "--device", "cuda", "--nccl-max-ctas", "2", "--nccl-min-ctas", "4"}),
            "--nccl-min-ctas 4 exceeds --nccl-max-ctas 2");
  EXPECT_EQ(problem({"--comm", "nccl", "--device", "cuda", "--zero", "1", "--nccl-buffers", "symmetric"}),
            "--nccl-buffers symmetric with --zero 1 is not supported (its in-place reduce-scatter and all-gather "
            "address each rank's shard at another offset; registered and symmetric NCCL buffers want the same "
            "offset on every rank)");
  EXPECT_EQ(problem({"--comm", "nccl", "--device", "cuda", "--nccl-cta-policy", "zero", "--nccl-buffers", "symmetric",
                     "--nccl-min-ctas", "1"}),
            "");
  EXPECT_EQ(problem({"--comm", "mpi", "--nccl-cta-policy", "default", "--nccl-buffers", "plain"}),
            "--nccl-cta-policy is a setting of --comm nccl; this run's communicator is mpi");
  // The backend's own refusal of the device: a usage problem too.
  EXPECT_EQ(problem({"--comm", "nccl"}), "--comm nccl averages CUDA tensors; use mpi for --device cpu");
  // mpi stages CUDA tensors through pinned host buffers: several ranks on one GPU.
  EXPECT_EQ(problem({"--comm", "mpi", "--device", "cuda"}), "");
}

TEST(FlagChecks, TheChosenCommHooksRefusalIsTheUsageProblem) {
  // A registered hook that refuses every run, in a line that spells what the trainer told it.
  distributed::registerCommHook({"test-says-its-usage", "refuses every run, naming it",
                                 [](const distributed::CommHookOptions&) { return distributed::makeCommHook({}); },
                                 [](const distributed::HookUsage& u) {
                                   return "zero " + std::to_string(u.zeroStage) + " graph " +
                                          std::to_string(u.cudaGraph) + " " + dtypeName(u.gradDType) + " " +
                                          (u.device == Device::CUDA ? "cuda" : "cpu") + " rows " +
                                          std::to_string(u.rowSparse);
                                 }});
  const auto problem = [](const std::vector<std::string>& args) {
    train::Options o;
    EXPECT_EQ(parse(args, o), "");
    return train::usageProblem(o);
  };
  const std::string hook[] = {"--comm-hook", "test-says-its-usage"};
  EXPECT_EQ(problem({hook[0], hook[1]}), "zero 0 graph 0 F32 cpu rows 0");
  EXPECT_EQ(problem({hook[0], hook[1], "--zero", "1", "--dtype", "fp64"}), "zero 1 graph 0 F64 cpu rows 0");
  EXPECT_EQ(problem({hook[0], hook[1], "--device", "cuda", "--cuda-graph", "--dtype", "bf16"}),
            "zero 0 graph 1 F32 cuda rows 0");
  EXPECT_EQ(problem({hook[0], hook[1], "--model", "gpt", "--sparse-embedding-grad"}), "zero 0 graph 0 F32 cpu rows 1");
  // PowerSGD's, in its own words.
  EXPECT_EQ(problem({"--comm-hook", "powersgd", "--zero", "1"}),
            "--comm-hook powersgd with --zero 1 is not supported (its factors are all-reduced, not sharded)");
  EXPECT_EQ(problem({"--comm-hook", "powersgd", "--zero", "3"}),
            "--comm-hook powersgd with --zero 3 is not supported (its factors are all-reduced, not sharded)");
  EXPECT_EQ(problem({"--comm-hook", "powersgd", "--dtype", "fp64"}),
            "--comm-hook powersgd needs fp32 gradients: not with --dtype fp64");
  EXPECT_EQ(problem({"--comm-hook", "powersgd"}), "");
}

// A model's refusal sees the shape of the data it will train on, before the data is read: an image model the
// Fashion-MNIST images' pixels and classes (it saw 0 and 0 before), a token model its --context.
TEST(FlagChecks, RefuseSeesTheInputShape) {
  models::ModelArgs seen;
  models::ModelEntry images;
  images.defaultData = "fashion-mnist";
  images.make = [](const models::ModelArgs&) -> std::unique_ptr<models::Model> { return nullptr; };
  images.refuse = [&seen](const models::ModelArgs& a) {
    seen = a;
    return a.inputs % 7 == 0 ? std::string() : "--model refuse-probe wants a multiple of 7 pixels";
  };
  models::registerModel("refuse-probe", images);
  train::Options o;
  o.model = "refuse-probe";
  EXPECT_EQ(train::usageProblem(o), "");
  EXPECT_EQ(seen.inputs, 28 * 28);
  EXPECT_EQ(seen.classes, 10);
  EXPECT_EQ(seen.context, 0);

  models::ModelEntry tokens = images;
  tokens.data = models::DataKind::Tokens;
  tokens.defaultData = "fortunes";
  tokens.flags = {{"context", models::FlagKind::Integer, "12", "window length"}};
  models::registerModel("refuse-probe-tokens", tokens);
  o.model = "refuse-probe-tokens";
  EXPECT_EQ(train::usageProblem(o), "");
  EXPECT_EQ(seen.inputs, 0);
  EXPECT_EQ(seen.context, 12);
}

}  // namespace
}  // namespace minidp
