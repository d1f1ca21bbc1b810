#include "framework/optim/grad_clip.h"

#include "framework/tensor/dispatch.h"
#include "kernels/optimizer_kernels.h"

namespace minidp::optim {

GradClipper::GradClipper(double maxNorm, DType dtype, Device device)
    : maxNorm_(maxNorm), dtype_(dtype), device_(device), norm_(Tensor::zeros({1}, DType::F64, device)) {
  MINIDP_DISPATCH_FLOAT(dtype, T, scale_ = Tensor::fromVector(std::vector<T>{T(1)}, {1}, device));
}

void GradClipper::compute(const std::vector<Tensor>& buffers) { compute(buffers, 0, 1, nullptr); }

void GradClipper::compute(const std::vector<Tensor>& buffers, int rank, int world, const GatherSlots& gather) {
  MINIDP_CHECK(rank >= 0 && rank < world && (world == 1 || gather),
               "gradient clipping: rank " << rank << " of " << world);
  const int64_t slot = static_cast<int64_t>(buffers.size()) * kernels::kNormPartials, count = slot * world;
  if (!partials_.defined() || partials_.numel() != count) partials_ = Tensor::zeros({count}, DType::F64, device_);
  double* mine = partials_.data<double>() + rank * slot;
  MINIDP_DISPATCH_FLOAT(dtype_, T, {
    for (size_t b = 0; b < buffers.size(); ++b) {
      const Tensor& x = buffers[b];
      MINIDP_CHECK(x.dtype() == dtype_ && x.device() == device_,
                   "gradient clipping: buffer " << b << " differs in dtype or device");
      MINIDP_LAUNCH(partials_, sumSquaresPartials<T>, x.data<T>(), x.numel(), mine + b * kernels::kNormPartials);
    }
  });
  if (world > 1) gather(partials_);
  MINIDP_DISPATCH_FLOAT(dtype_, T,
                        MINIDP_LAUNCH(partials_, clipCoefficient<T>, partials_.data<double>(), count, maxNorm_,
                                      norm_.data<double>(), scale_.data<T>()));
}

double GradClipper::norm() const { return norm_.toVector<double>()[0]; }

}  // namespace minidp::optim
