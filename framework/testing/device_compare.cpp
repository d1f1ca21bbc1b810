#include "framework/testing/device_compare.h"

#include "framework/runtime/device.h"
#include "framework/testing/gradcheck.h"

namespace minidp::testing {

DeviceComparison compareDevices(const std::function<Variable(const std::vector<Variable>&)>& f,
                                const std::vector<Tensor>& inputs, DType dtype, double upstreamLo, double upstreamHi) {
  std::vector<Variable> onCpu, onCuda;
  for (const Tensor& t : inputs) {
    Tensor converted = t.toDType(dtype);
    onCpu.emplace_back(converted, true);
    onCuda.emplace_back(converted.to(Device::CUDA), true);
  }
  Variable cpuOut = f(onCpu), cudaOut = f(onCuda);
  Tensor g = randomTensor(cpuOut.shape(), 31, upstreamLo, upstreamHi, dtype);
  cpuOut.backward(g);
  cudaOut.backward(g.to(Device::CUDA));
  DeviceComparison result;
  result.output = relativeError(cudaOut.data(), cpuOut.data());
  for (size_t i = 0; i < inputs.size(); ++i) {
    result.grads.push_back(relativeError(onCuda[i].grad(), onCpu[i].grad()));
  }
  return result;
}

double roundingEps(DType dtype) { return dtype == DType::F32 ? 6e-8 : 1.2e-16; }

double sumTolerance(DType dtype, int64_t terms) { return 2.0 * static_cast<double>(terms + 4) * roundingEps(dtype); }

void CudaVsCpuTest::SetUp() {
  if (!runtime::cudaAvailable()) GTEST_SKIP() << "no CUDA device";
}

void CudaVsCpuTest::expectClose(const DeviceComparison& c, double tolerance) {
  EXPECT_LE(c.output, tolerance) << "forward";
  for (size_t i = 0; i < c.grads.size(); ++i) EXPECT_LE(c.grads[i], tolerance) << "gradient of input " << i;
}

}  // namespace minidp::testing
