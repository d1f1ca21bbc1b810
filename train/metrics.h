// What a logged step reports: one JSON line per logged step in the --metrics file (written by rank 0,
// each line in one write and flushed, so a reader or a crash never sees half a line) and the terminal line.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <string>

#include <nlohmann/json.hpp>

namespace minidp::train {

/// The numbers of one logged step; NaN (or a negative count) where not measured.
struct LogPoint {
  int64_t step = 0, totalSteps = 0;
  double loss = NAN, valLoss = NAN, valAccuracy = NAN;
  double lr = NAN, gradNorm = NAN;
  double stepMs = NAN;     // mean over the steps since the last log point
  double itemsPerS = NAN;  // tokens/s (token models) or samples/s (image models), all ranks together
  bool tokens = false;     // itemsPerS counts tokens
  double mfu = NAN;        // model FLOPs utilisation per device, against the stated peak (CUDA only)
  double commMs = NAN, exposedCommMs = NAN;
  int64_t skippedSteps = -1;  // --skip-nonfinite: the steps skipped so far (then a non-finite norm is printed too)

  /// {"step", "loss", "val_loss"?, "val_accuracy"?, "lr", "grad_norm"?, "step_ms", "tokens_per_s" or
  /// "samples_per_s", "mfu"?, "comm_ms"?, "exposed_comm_ms"?, "skipped_steps"?}: measured values only, except under
  /// --skip-nonfinite, where a non-finite loss or norm is written as null and named in "nonfinite".
  nlohmann::ordered_json toJson() const;
  /// "step 100/400  loss 2.1234  val 2.2345  lr 3.00e-04  norm 0.812  12.3 ms  5.2k tok/s  MFU 41.2%  ETA 3m12s"
  std::string terminalLine() const;
};

/// Appends one JSON line per call to `path`, a regular file (or a new one) created, or emptied, by the first
/// line: a run that fails before its first line leaves no file, and an earlier one untouched. A device,
/// FIFO, link or folder at `path` is refused, never written.
class MetricsFile {
 public:
  explicit MetricsFile(const std::string& path);
  ~MetricsFile();
  MetricsFile(const MetricsFile&) = delete;
  MetricsFile& operator=(const MetricsFile&) = delete;
  /// Writes `line` and a newline in one write. An error names the file and the cause ("no space left on
  /// device"); when the first line fails, the file it created or emptied is removed.
  void append(const nlohmann::ordered_json& line);

 private:
  std::string path_;
  int fd_ = -1;
};

}  // namespace minidp::train
