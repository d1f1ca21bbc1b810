// Fashion-MNIST: 28x28 grey clothing images in 10 classes, read from the IDX files.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace minidp {

/// Where the Debian package dataset-fashion-mnist installs the four .gz files.
inline constexpr const char* kFashionMnistDir = "/usr/share/datasets/fashion-mnist";

/// Pixels per image and classes: the input shape an image model is built and checked for.
inline constexpr int64_t kFashionMnistPixels = 28 * 28;
inline constexpr int64_t kFashionMnistClasses = 10;

/// A labelled image dataset held on the host.
struct ImageDataset {
  int64_t count = 0, rows = 0, cols = 0;
  std::vector<float> images;    // (count, rows*cols), pixel/255 in [0, 1]
  std::vector<int32_t> labels;  // (count)
};

/// Loads split "train" (train-*-ubyte.gz) or "test" (t10k-*-ubyte.gz) from `dir`.
ImageDataset loadFashionMnist(const std::string& dir, const std::string& split);

}  // namespace minidp
