#include "data/fashion_mnist.h"

#include <filesystem>

#include "base/check.h"
#include "data/idx.h"

namespace minidp {

ImageDataset loadFashionMnist(const std::string& dir, const std::string& split) {
  MINIDP_CHECK(split == "train" || split == "test",
               "Fashion-MNIST split must be \"train\" or \"test\", got \"" << split << "\"");
  const std::string prefix = split == "train" ? "train" : "t10k";
  const std::filesystem::path imagePath = std::filesystem::path(dir) / (prefix + "-images-idx3-ubyte.gz");
  const std::filesystem::path labelPath = std::filesystem::path(dir) / (prefix + "-labels-idx1-ubyte.gz");
  for (const auto& p : {imagePath, labelPath}) {
    MINIDP_CHECK(std::filesystem::exists(p),
                 "missing Fashion-MNIST file " << p.string() << ": install the Debian package dataset-fashion-mnist");
  }

  const IdxArray images = readIdx(imagePath.string());
  const IdxArray labels = readIdx(labelPath.string());
  MINIDP_CHECK(images.dims.size() == 3,
               imagePath.string() << ": expected 3 dimensions (count, rows, cols), got " << images.dims.size());
  MINIDP_CHECK(labels.dims.size() == 1, labelPath.string()
                                            << ": expected 1 dimension (count), got " << labels.dims.size());
  MINIDP_CHECK(images.dims[0] == labels.dims[0],
               "Fashion-MNIST " << split << ": " << images.dims[0] << " images but " << labels.dims[0] << " labels");

  ImageDataset ds;
  ds.count = images.dims[0];
  ds.rows = images.dims[1];
  ds.cols = images.dims[2];
  ds.images.resize(images.data.size());
  for (size_t i = 0; i < images.data.size(); ++i) ds.images[i] = images.data[i] / 255.0f;
  ds.labels.assign(labels.data.begin(), labels.data.end());
  return ds;
}

}  // namespace minidp
