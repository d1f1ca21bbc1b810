#include "train/metrics.h"

#include <cerrno>
#include <cstring>

#include "base/check.h"

namespace minidp::train {

namespace {
void putIfMeasured(nlohmann::ordered_json& j, const char* key, double v) {
  if (std::isfinite(v)) j[key] = v;
}

std::string duration(double seconds) {
  const long long s = std::llround(std::max(seconds, 0.0));
  char buf[32];
  if (s >= 3600) {
    std::snprintf(buf, sizeof buf, "%lldh%02lldm", s / 3600, s / 60 % 60);
  } else {
    std::snprintf(buf, sizeof buf, "%lldm%02llds", s / 60, s % 60);
  }
  return buf;
}
}  // namespace

nlohmann::ordered_json LogPoint::toJson() const {
  nlohmann::ordered_json j = {{"step", step}, {"loss", loss}};
  putIfMeasured(j, "val_loss", valLoss);
  putIfMeasured(j, "val_accuracy", valAccuracy);
  putIfMeasured(j, "lr", lr);
  putIfMeasured(j, "grad_norm", gradNorm);
  putIfMeasured(j, "step_ms", stepMs);
  putIfMeasured(j, tokens ? "tokens_per_s" : "samples_per_s", itemsPerS);
  putIfMeasured(j, "mfu", mfu);
  putIfMeasured(j, "comm_ms", commMs);
  putIfMeasured(j, "exposed_comm_ms", exposedCommMs);
  return j;
}

std::string LogPoint::terminalLine() const {
  std::string out;
  char buf[96];
  const auto add = [&](const char* fmt, auto... v) {
    std::snprintf(buf, sizeof buf, fmt, v...);
    out += buf;
  };
  add("step %lld/%lld  loss %.4f", static_cast<long long>(step), static_cast<long long>(totalSteps), loss);
  if (std::isfinite(valLoss)) add("  val %.4f", valLoss);
  if (std::isfinite(valAccuracy)) add("  acc %.4f", valAccuracy);
  add("  lr %.2e", lr);
  if (std::isfinite(gradNorm)) add("  norm %.3f", gradNorm);
  add("  %.2f ms", stepMs);
  if (itemsPerS >= 1e6) {
    add("  %.2fM %s/s", itemsPerS / 1e6, tokens ? "tok" : "samples");
  } else {
    add("  %.1fk %s/s", itemsPerS / 1e3, tokens ? "tok" : "samples");
  }
  if (std::isfinite(mfu)) add("  MFU %.1f%%", 100 * mfu);
  if (std::isfinite(exposedCommMs)) add("  comm %.2f ms, exposed %.2f ms", commMs, exposedCommMs);
  if (step < totalSteps && std::isfinite(stepMs)) out += "  ETA " + duration((totalSteps - step) * stepMs / 1000);
  return out;
}

MetricsFile::MetricsFile(const std::string& path) : path_(path), file_(std::fopen(path.c_str(), "w")) {
  MINIDP_CHECK(file_, "cannot write the metrics file " << path << ": " << std::strerror(errno));
}

MetricsFile::~MetricsFile() {
  if (file_) std::fclose(file_);
}

void MetricsFile::append(const nlohmann::ordered_json& line) {
  const std::string text = line.dump() + "\n";
  MINIDP_CHECK(std::fwrite(text.data(), 1, text.size(), file_) == text.size() && std::fflush(file_) == 0,
               "cannot write the metrics file " << path_ << ": " << std::strerror(errno));
}

}  // namespace minidp::train
