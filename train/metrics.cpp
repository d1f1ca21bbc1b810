#include "train/metrics.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "base/check.h"
#include "framework/io/atomic_file.h"

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
  if (skippedSteps >= 0) {
    j["skipped_steps"] = skippedSteps;
    nlohmann::ordered_json nonFinite = nlohmann::ordered_json::array();
    if (!std::isfinite(loss)) nonFinite.push_back("loss");
    if (!std::isfinite(gradNorm)) nonFinite.push_back("grad_norm");
    if (!nonFinite.empty()) {
      j["grad_norm"] = nullptr;
      j["nonfinite"] = nonFinite;
    }
  }
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
  if (std::isfinite(gradNorm) || skippedSteps >= 0) add("  norm %.3f", gradNorm);
  if (skippedSteps > 0) add("  skipped %lld", static_cast<long long>(skippedSteps));
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

MetricsFile::MetricsFile(const std::string& path) : path_(path) {}

MetricsFile::~MetricsFile() {
  if (fd_ >= 0) ::close(fd_);
}

void MetricsFile::append(const nlohmann::ordered_json& line) {
  const std::string text = line.dump() + "\n";
  const bool first = fd_ < 0;
  if (first) {
    const std::string kind = notARegularFile(path_);
    MINIDP_CHECK(kind.empty(), "the metrics file " << path_ << " is " << kind << ", not a regular file");
    // Not following a link, not waiting for a FIFO's reader; emptied only once known to be a regular file.
    fd_ = ::open(path_.c_str(), O_WRONLY | O_CREAT | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC, 0666);
    const int error = fd_ < 0 ? errno : 0;
    MINIDP_CHECK(fd_ >= 0, "cannot write the metrics file " << path_ << ": " << errnoText(error));
    struct stat st {};
    if (::fstat(fd_, &st) != 0 || !S_ISREG(st.st_mode) || ::ftruncate(fd_, 0) != 0) {
      ::close(fd_);
      fd_ = -1;
      throwError("cannot write the metrics file " + path_ + ": not a regular file", __FILE__, __LINE__);
    }
  }
  int error = 0;
  for (size_t done = 0; done < text.size() && error == 0;) {
    const ssize_t n = ::write(fd_, text.data() + done, text.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) error = n < 0 ? errno : EIO;
    done += n > 0 ? static_cast<size_t>(n) : 0;
  }
  if (error != 0 && first) {  // nothing of this run's in it: no empty file stays behind
    ::close(fd_);
    fd_ = -1;
    ::unlink(path_.c_str());
  }
  MINIDP_CHECK(error == 0, "cannot write the metrics file " << path_ << ": " << errnoText(error));
}

}  // namespace minidp::train
