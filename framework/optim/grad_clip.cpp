#include "framework/optim/grad_clip.h"

#include "framework/ops/dispatch.h"
#include "kernels/optimizer.h"

namespace minidp::optim {

GradClipper::GradClipper(double maxNorm, DType dtype, Device device)
    : maxNorm_(maxNorm), dtype_(dtype), device_(device), norm_(Tensor::zeros({1}, DType::F64, device)) {
  MINIDP_DISPATCH_FLOAT(dtype, T, scale_ = Tensor::fromVector(std::vector<T>{T(1)}, {1}, device));
}

void GradClipper::compute(const std::vector<Tensor>& buffers) {
  const int64_t count = static_cast<int64_t>(buffers.size()) * kernels::kNormPartials;
  if (!partials_.defined() || partials_.numel() != count) partials_ = Tensor::zeros({count}, DType::F64, device_);
  double* partials = partials_.data<double>();
  MINIDP_DISPATCH_FLOAT(dtype_, T, {
    for (size_t b = 0; b < buffers.size(); ++b) {
      const Tensor& x = buffers[b];
      MINIDP_CHECK(x.dtype() == dtype_ && x.device() == device_,
                   "gradient clipping: buffer " << b << " differs in dtype or device");
      MINIDP_LAUNCH(partials_, sumSquaresPartials<T>, x.data<T>(), x.numel(), partials + b * kernels::kNormPartials);
    }
    MINIDP_LAUNCH(partials_, clipCoefficient<T>, partials, count, maxNorm_, norm_.data<double>(), scale_.data<T>());
  });
}

double GradClipper::norm() const { return norm_.toVector<double>()[0]; }

}  // namespace minidp::optim
