#include "train/output_clash.h"

#include <sys/stat.h>

#include <filesystem>

#include "data/fashion_mnist.h"
#include "data/text.h"
#include "models/registry.h"

namespace minidp::train {

namespace {

namespace fs = std::filesystem;

/// A file named by a flag, with its device and inode when it exists.
struct Named {
  std::string flag, path;
  dev_t device = 0;
  ino_t inode = 0;
};

/// `files` that exist (stat follows links), with their identity.
std::vector<Named> existing(const std::vector<OutputFile>& files) {
  std::vector<Named> out;
  for (const OutputFile& f : files) {
    struct stat st {};
    if (!f.path.empty() && ::stat(f.path.c_str(), &st) == 0) out.push_back({f.flag, f.path, st.st_dev, st.st_ino});
  }
  return out;
}

/// What the run reads: its files, and the regular files of its dataset folder (the given one, else the package's).
std::vector<OutputFile> inputFiles(const Options& o) {
  std::vector<OutputFile> files = {{"--load", o.load}, {"--resume", o.resume}};
  const DataSet data = o.dataSet();
  if (data == DataSet::Llmc) {
    files.push_back({"--llmc-train", o.llmcTrain});
    files.push_back({"--llmc-val", o.llmcVal});
    return files;
  }
  const std::string dir = !o.dataDir.empty() ? o.dataDir : data == DataSet::FashionMnist ? kFashionMnistDir : kFortunesDir;
  const std::string flag = o.dataDir.empty() ? "the default data folder" : "--data-dir";
  std::error_code ec;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    if (it->is_regular_file(ec)) files.push_back({flag, it->path().string()});
  }
  return files;
}

}  // namespace

std::string outputClashProblem(const Options& o, const std::vector<OutputFile>& more) {
  const std::vector<Named> outputs = existing(outputFiles(o, more)), inputs = existing(inputFiles(o));
  for (size_t i = 0; i < outputs.size(); ++i) {
    const Named& out = outputs[i];
    for (const Named& in : inputs) {
      if (in.device == out.device && in.inode == out.inode)
        return out.flag + " " + out.path + " is the file " + in.flag + " reads (" + in.path +
               "): an output never replaces an input; give " + out.flag + " another file";
    }
    for (size_t j = i + 1; j < outputs.size(); ++j) {
      if (outputs[j].device == out.device && outputs[j].inode == out.inode)
        return out.flag + " and " + outputs[j].flag + " both write one file (" + out.path + ", " + outputs[j].path +
               "): give each its own file";
    }
  }
  return {};
}

}  // namespace minidp::train
