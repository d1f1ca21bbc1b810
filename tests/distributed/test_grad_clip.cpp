// Global gradient-norm clipping against torch.nn.utils.clip_grad_norm_ (tests/fixtures/clip_grad_norm,
// written by tests/reference/make_loop_fixtures.py): the gradients go through DDP's buckets (one rank: the
// two fixture ranks' mean; two ranks: one fixture rank each), the norm is computed from the buckets on the
// device, and one SGD step on the clipped gradients must give PyTorch's parameters. CPU on mpi/single,
// CUDA on nccl.
#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>
#include <sstream>

#include "framework/distributed/gradient/ddp.h"
#include "framework/io/safetensors.h"
#include "framework/optim/grad_clip.h"
#include "framework/optim/optimizer.h"
#include "framework/runtime/device.h"
#include "framework/testing/gradcheck.h"
#include "tests/distributed/dist_test_env.h"

namespace minidp {
namespace {

SafeTensorFile fixture() {
  const char* root = std::getenv("MINIDP_SOURCE_DIR");
  return readSafetensors(std::string(root ? root : ".") + "/tests/fixtures/clip_grad_norm.safetensors");
}

Tensor tensorOf(const SafeTensor& t, Device device) {
  const DType dtype = t.dtype == "F64" ? DType::F64 : DType::F32;
  return Tensor::fromHost(t.bytes.data(), t.shape, dtype, Device::CPU).to(device);
}

class GradClip : public ::testing::TestWithParam<Device> {};

TEST_P(GradClip, EqualsTorchClipGradNormThroughTheBuckets) {
  std::string reason;
  auto comm = testing::sharedCommunicator(GetParam(), &reason);
  if (!comm) GTEST_SKIP() << reason;
  if (comm->worldSize() > 2) GTEST_SKIP() << "the fixture holds the gradients of two ranks";
  const Device device = GetParam();
  const SafeTensorFile f = fixture();
  const int count = std::stoi(f.metadata.at("count"));
  const double lr = std::stod(f.metadata.at("lr"));
  std::istringstream norms(f.metadata.at("max_norms"));
  std::string maxNorm;
  int cases = 0;
  while (norms >> maxNorm) {
    ++cases;
    nn::NamedParameters params;
    for (int i = 0; i < count; ++i) {
      params.emplace_back("p" + std::to_string(i),
                          Variable(tensorOf(f.at("param." + std::to_string(i)), device), true));
    }
    // Buckets of a few parameters each: the norm combines several buckets.
    distributed::DistributedDataParallel ddp(params, comm, {distributed::Overlap::DuringBackward, 64, 32});
    ASSERT_GE(ddp.plan().buckets.size(), 2u) << ddp.plan().describe();
    ddp.prepareStep();
    for (int i = count - 1; i >= 0; --i) {
      const std::string k = std::to_string(i);
      Tensor g = comm->worldSize() == 2 ? tensorOf(f.at("grad" + std::to_string(comm->rank()) + "." + k), device)
                                        : tensorOf(f.at("grad0." + k), Device::CPU);
      if (comm->worldSize() == 1) {
        // One rank holds the mean of the two fixture ranks, as torch computed it: (a + b) / 2 in fp32.
        std::vector<float> a = g.toVector<float>(), b = tensorOf(f.at("grad1." + k), Device::CPU).toVector<float>();
        for (size_t j = 0; j < a.size(); ++j) a[j] = (a[j] + b[j]) / 2;
        g = Tensor::fromVector(a, g.shape(), device);
      }
      Tensor view = params[i].second.grad();
      view.copyFrom(g);
      ddp.reducer().markReady(i);
    }
    ddp.finalize();
    std::vector<Tensor> buckets;
    for (size_t b = 0; b < ddp.plan().buckets.size(); ++b) buckets.push_back(ddp.reducer().bucketBuffer(b));
    optim::GradClipper clipper(std::stod(maxNorm), DType::F32, device);
    clipper.compute(buckets);
    optim::Sgd sgd(params, lr);
    sgd.setGradScale(clipper.scale());
    sgd.step();
    const double want = tensorOf(f.at("norm." + maxNorm), Device::CPU).toVector<double>()[0];
    EXPECT_NEAR(clipper.norm(), want, 1e-6 * want) << "max norm " << maxNorm;
    for (int i = 0; i < count; ++i) {
      const Tensor expected = tensorOf(f.at("stepped." + maxNorm + "." + std::to_string(i)), Device::CPU);
      EXPECT_LE(testing::relativeError(params[i].second.data().to(Device::CPU), expected), 1e-6)
          << "max norm " << maxNorm << " parameter " << i;
    }
    // Every rank computed the same norm bits from the same averaged buckets.
    const double mine = clipper.norm();
    std::string bytes(sizeof mine, '\0');
    std::memcpy(bytes.data(), &mine, sizeof mine);
    const std::vector<std::string> all = comm->allGather(bytes);
    for (size_t r = 1; r < all.size(); ++r) EXPECT_EQ(all[r], all[0]) << "rank " << r << "'s norm differs";
  }
  EXPECT_EQ(cases, 2);
}

INSTANTIATE_TEST_SUITE_P(Devices, GradClip, ::testing::Values(Device::CPU, Device::CUDA),
                         [](const auto& info) { return std::string(deviceName(info.param)); });

}  // namespace
}  // namespace minidp
