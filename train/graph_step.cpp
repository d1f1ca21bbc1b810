// --cuda-graph: the step of Trainer::step (forward, backward with its grad-ready hooks' bucket launches,
// finalize, clipping, optimizer) captured once and replayed. A replay runs the eager step's kernels in the
// eager order on the same buffers, so the parameters stay byte-identical to eager training.
#include "train/trainer.h"

namespace minidp::train {

Tensor Trainer::graphStep() {
  Batch batch = batches_->next();
  if (!graph_) {
    // The prefetcher's slots alternate; the graph reads fixed tensors, refilled before each replay. So are
    // the optimizer's scalars: capturing enqueues nothing that runs.
    graphInputs_ = {Tensor::empty(batch.inputs.shape(), batch.inputs.dtype(), batch.inputs.device()),
                    Tensor::empty(batch.targets.shape(), batch.targets.dtype(), batch.targets.device())};
    optimizer_->setScalarsOnDevice(true);
    // The optimizer's table of compute copies is captured with the step: no copy may be made or moved after.
    if (copies_) copies_->freeze();
    // The step timer is closed meanwhile: a mark recorded into a graph cannot be read back.
    graph_ = std::make_unique<runtime::CapturedGraph>([this] {
      ddp_->prepareStep();
      ddp_->setRequireSync(true);
      Variable loss = model_->loss(graphInputs_.inputs, graphInputs_.targets);
      loss.backward();
      ddp_->finalize();
      if (opts_.clipGradNorm > 0) ddp_->computeGradNorm(*clipper_);
      optimizer_->step();
      graphLoss_ = loss.data();
    });
  }
  // One phase, "replay", from the input copy to the end of the replay (the buckets are not timed).
  timer_.beginStep(runtime::Phase::Replay);
  graphInputs_.inputs.copyFrom(batch.inputs);
  graphInputs_.targets.copyFrom(batch.targets);
  batches_->prefetch();
  lr_ = schedule_.at(optimizer_->stepCount());
  optimizer_->setLr(lr_);
  optimizer_->stageStep();
  normMeasured_ = opts_.clipGradNorm > 0;
  graph_->replay();
  session_.comm->watchReplay("cuda graph replay of step " + std::to_string(optimizer_->stepCount()));
  timer_.endStep();
  return graphLoss_;
}

}  // namespace minidp::train
