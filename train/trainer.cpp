#include "train/trainer.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <optional>
#include <random>

#include "framework/nn/checkpoint.h"
#include "framework/ops/ops.h"
#include "models/registry.h"
#include "train/sampling.h"
#include "train/usage_rules.h"

namespace minidp::train {

namespace {

std::string defaultDir(DataSet data) { return data == DataSet::FashionMnist ? kFashionMnistDir : kFortunesDir; }

}  // namespace

Trainer::Trainer(const Options& o, Session& session)
    : opts_(o), session_(session), timer_(session.device), entry_(models::findModel(o.model)) {
  if (const std::string problem = usageProblem(o); !problem.empty()) throw Error(problem);  // checkUsage's rules
  const models::ModelEntry& entry = entry_;
  const DataSet data = o.dataSet();
  const std::string dir = o.dataDir.empty() ? defaultDir(data) : o.dataDir;
  const int rank = session.rank(), world = session.world();
  std::unique_ptr<BatchSource> source;
  if (entry.data == models::DataKind::Images) {
    trainImages_ = loadFashionMnist(dir, "train");
    testImages_ = loadFashionMnist(dir, "test");
    args_ = train::modelArgs(o, trainImages_.rows * trainImages_.cols, 10);
    source = imageBatches(trainImages_, o.batchSize, rank, world, o.seed, session.dtype);
  } else {
    corpus_ = data == DataSet::Llmc ? loadLlmcTokens(o.llmcTrain, o.llmcVal) : loadFortunes(dir);
    args_ = train::modelArgs(o, 0, std::max<int64_t>(corpus_.vocab, 1));
    source = windowBatches(corpus_.train, o.batchSize, static_cast<int>(args_.context), rank, world, o.seed);
  }
  args_.compute = session.compute;
  args_.device = session.device;
  // The usage check ran before the data was read: a token model's vocabulary is known only now.
  if (std::string refused = entry.refuse(args_); !refused.empty()) throw Error(refused);
  model_ = entry.make(args_);
  model_->to(session.device, session.dtype);
  // Into the parameters' own dtype: an F64 file keeps every bit in an fp64 run.
  std::string converted;
  try {
    if (!o.load.empty()) converted = nn::loadCheckpoint(*model_, o.load);
  } catch (const Error& e) {
    throw Error("--load " + std::string(e.what()));
  }
  if (!converted.empty() && rank == 0) std::printf("--load %s: %s\n", o.load.c_str(), converted.c_str());
  distributed::DdpOptions ddpOptions = o.ddp;
  if (o.sparseEmbeddingGrad) ddpOptions.rowSparseParameter = entry.rowSparseParameter;
  ddp_ = std::make_unique<distributed::DistributedDataParallel>(model_->namedParameters(), session.comm, ddpOptions);
  ddp_->observe(timer_);
  if (o.sparseEmbeddingGrad && rank == 0) {
    std::printf("sparse embedding gradient: %s's rows all-gathered (a bucket of its own)\n",
                entry.rowSparseParameter.c_str());
  }
  const std::string optName = o.optimizer.empty() ? entry.defaultOptimizer : o.optimizer;
  const double lr = o.lr > 0 ? o.lr : entry.defaultLr;
  if (o.ddp.zeroStage >= 1) {
    const std::optional<DType> paramDType =
        o.zeroParamDType == ZeroParamDType::Bf16 ? std::optional<DType>(DType::BF16) : std::nullopt;
    auto sharded = std::make_unique<distributed::ShardedOptimizer>(*ddp_, optName, lr, o.weightDecay, o.zeroGather,
                                                                   o.zeroPrefetch, o.zeroKeepGathered, paramDType);
    if (session.rank() == 0) {
      const double bytes = static_cast<double>(dtypeSize(session.dtype));
      std::printf("ZeRO-%d: optimizer state %.2f MB per rank (%.2f MB unsharded), gradients %.2f MB and "
                  "parameters %.2f MB between steps\n",
                  o.ddp.zeroStage, sharded->stateElements() * bytes / 1e6,
                  sharded->unshardedStateElements() * bytes / 1e6, ddp_->gradientElements() * bytes / 1e6,
                  sharded->parameterElements() * bytes / 1e6);
    }
    // ZeRO-3 gathering in bf16: the ops' bf16 copies are views of the gathered units (none made, none kept).
    if (session.compute == DType::BF16 && !o.castWeights) copySource_ = sharded->weightCopies();
    optimizer_ = std::move(sharded);
  } else {
    optimizer_ = optim::makeOptimizer(optName, model_->namedParameters(), lr, o.weightDecay);
  }
  if (session.compute == DType::BF16 && o.ddp.zeroStage == 0 && !o.castWeights) {
    std::vector<Tensor> params;
    for (const Variable& p : model_->parameters()) params.push_back(p.data());
    copies_ = std::make_unique<ops::ComputeCopies>(params);
    optimizer_->setComputeCopies([copies = copies_.get()](const Tensor& param) { return copies->find(param); });
    copySource_ = copies_.get();
  }
  schedule_ = LrSchedule{o.lrSchedule, lr, o.warmupSteps, o.steps, o.minLrFrac};
  clipper_ = std::make_unique<optim::GradClipper>(o.clipGradNorm, model_->parameters().front().dtype(), session.device);
  if (o.clipGradNorm > 0) optimizer_->setGradScale(clipper_->scale());
  batches_ = std::make_unique<Prefetcher>(std::move(source), session.device);
  batches_->setTimer(&timer_);
}

int64_t Trainer::samplesPerStep() const { return opts_.batchSize * opts_.gradAccum * session_.world(); }

double Trainer::flopsPerItem() const { return entry_.flopsPerItem(args_, *model_); }

Tensor Trainer::step() {
  const ops::WeightCopySource::Installed copies(copySource_);
  if (opts_.cudaGraph) {
    if (graphWarmup_ == 0) return graphStep();
    --graphWarmup_;
  }
  timer_.beginStep(runtime::Phase::Forward);
  ddp_->prepareStep();
  Tensor last;
  for (int64_t micro = 0; micro < opts_.gradAccum; ++micro) {
    if (micro > 0) timer_.phase(runtime::Phase::Forward);
    Batch batch = batches_->next();
    ddp_->beginMicroBatch(batch.inputs, micro + 1 == opts_.gradAccum);
    Variable loss = model_->loss(batch.inputs, batch.targets);
    // Micro-batch means, averaged over the step: the gradient equals one batch of gradAccum x batchSize.
    Variable scaled = opts_.gradAccum > 1 ? ops::scale(loss, 1.0 / static_cast<double>(opts_.gradAccum)) : loss;
    timer_.phase(runtime::Phase::Backward);
    scaled.backward();
    last = loss.data();
    timer_.phase(runtime::Phase::Prefetch);
    batches_->prefetch();  // the host gathers the next batch while the device runs this one
  }
  // The finalize phase (opened by DDP's timer observer) is the compute stream's wait on the buckets, nothing
  // else: exposed communication (and, in the first step with --rebuild-buckets, the rebuild).
  ddp_->finalize();
  timer_.phase(runtime::Phase::Optimizer);
  // Clipping reads the averaged gradients in the buckets: the same bits, so the same norm, on every rank.
  normMeasured_ = opts_.clipGradNorm > 0 || opts_.skipNonFinite;
  if (normMeasured_) computeGradNorm();
  // --skip-nonfinite: the norm (the same bits on every rank) is read on the host; a step it skips keeps the
  // parameters, the optimizer's state and its step count.
  if (opts_.skipNonFinite && !std::isfinite(clipper_->norm())) {
    ++skippedSteps_;
    optimizer_->skipStep();
  } else {
    lr_ = schedule_.at(optimizer_->stepCount());
    optimizer_->setLr(lr_);
    optimizer_->step();
  }
  timer_.endStep();
  // The automatic bucket cap chosen after the first step, or the plan rebuilt from the ready order.
  if (const std::string report = ddp_->endStep(); !report.empty() && session_.rank() == 0) {
    std::printf("%s", report.c_str());
  }
  return last;
}

double Trainer::globalLoss(const Tensor& loss) {
  Tensor mean = loss.clone();
  session_.comm->allReduce(mean, distributed::ReduceOp::Avg, "loss")->wait();
  return mean.dtype() == DType::F32 ? mean.toVector<float>()[0] : mean.toVector<double>()[0];
}

void Trainer::computeGradNorm() { ddp_->computeGradNorm(*clipper_); }

double Trainer::gradNorm() {
  if (!normMeasured_) computeGradNorm();  // the buckets still hold the last step's gradients
  normMeasured_ = true;
  return clipper_->norm();
}

bool Trainer::hasValidation() const { return entry_.data != models::DataKind::Tokens || opts_.evalBatches > 0; }

Evaluation Trainer::evaluate() {
  if (!hasValidation()) return {NAN, NAN};  // the same on every rank: no collective
  NoGradGuard noGrad;
  const ops::WeightCopySource::Installed copies(copySource_);
  const int rank = session_.rank(), world = session_.world();
  // Sums over this rank's shard, then averaged over the ranks: [loss sum, correct, count].
  std::vector<double> sums(3, 0.0);
  const auto add = [&sums](const models::EvalSums& s) {
    sums[0] += s.loss;
    sums[1] += s.correct;
    sums[2] += s.count;
  };
  // A tiny collective after each batch, as many on every rank: a rank that stops mid-evaluation is found by the
  // watchdog within its timeout of the next batch, not after every other rank's whole share.
  const Tensor beat = Tensor::zeros({1}, DType::F32, session_.device);
  const auto heartbeat = [&] { session_.comm->allReduce(beat, distributed::ReduceOp::Sum, "validation batch")->wait(); };
  if (entry_.data == models::DataKind::Images) {
    const int64_t chunk = 1000, pixels = testImages_.rows * testImages_.cols;
    const int64_t first = testImages_.count * rank / world, end = testImages_.count * (rank + 1) / world;
    const int64_t batches = ((testImages_.count + world - 1) / world + chunk - 1) / chunk;  // the largest share's
    for (int64_t b = 0, start = first; b < batches; ++b, start += chunk) {
      heartbeat();
      if (start >= end) continue;
      const int64_t n = std::min(chunk, end - start);
      Tensor x = Tensor::fromHost(testImages_.images.data() + start * pixels, {n, pixels}, DType::F32, Device::CPU);
      std::vector<int32_t> labels(testImages_.labels.begin() + start, testImages_.labels.begin() + start + n);
      add(entry_.score(*model_, x.toDType(session_.dtype).to(session_.device),
                       Tensor::fromVector(labels, {n}, session_.device)));
    }
  } else {
    // Validation windows drawn with a fixed seed, each rank its rows of the global batch: the same windows
    // for every run with the same global batch.
    const int context = static_cast<int>(args_.context);
    auto source = windowBatches(corpus_.val, opts_.batchSize, context, rank, world, 7);
    std::vector<int32_t> inputs(opts_.batchSize * context), targets(inputs.size());
    for (int64_t b = 0; b < opts_.evalBatches; ++b) {
      heartbeat();
      source->fill(inputs.data(), targets.data());
      add(entry_.score(*model_, Tensor::fromVector(inputs, {opts_.batchSize, context}, session_.device),
                       Tensor::fromVector(targets, {opts_.batchSize, context}, session_.device)));
    }
  }
  Tensor total = Tensor::fromVector(sums, {3}, session_.device);
  session_.comm->allReduce(total, distributed::ReduceOp::Avg, "validation")->wait();
  const std::vector<double> mean = total.toVector<double>();
  const double count = mean[2];  // 0: nothing scored, no loss (NaN)
  return {count > 0 ? mean[0] / count : NAN,
          entry_.evaluation == models::Evaluation::Accuracy && count > 0 ? mean[1] / count : NAN};
}

std::string Trainer::sample(int64_t count) {
  NoGradGuard noGrad;
  const ops::WeightCopySource::Installed copies(copySource_);
  MINIDP_CHECK(entry_.data == models::DataKind::Tokens, "sample: --model " << opts_.model << " does not read tokens");
  const int64_t context = args_.context, vocab = std::max<int64_t>(corpus_.vocab, 1);
  const bool bytes = opts_.dataSet() != DataSet::Llmc;  // fortunes: one token per byte
  const std::string prompt = "The ";
  std::vector<int32_t> tokens =
      bytes ? std::vector<int32_t>(prompt.begin(), prompt.end()) : std::vector<int32_t>{vocab > 50256 ? 50256 : 0};
  std::mt19937_64 rng(opts_.seed);
  std::string out;
  for (int64_t i = 0; i < count; ++i) {
    const int64_t start = std::max<int64_t>(0, static_cast<int64_t>(tokens.size()) - context);
    std::vector<int32_t> window(tokens.begin() + start, tokens.end());
    const int64_t t = static_cast<int64_t>(window.size());
    const std::vector<double> last =
        entry_.nextTokenLogits(*model_, Tensor::fromVector(window, {1, t}, session_.device))
            .toDType(DType::F64)
            .toVector<double>();
    MINIDP_CHECK(static_cast<int64_t>(last.size()) == vocab, "sample: --model "
                                                                 << opts_.model << " gave " << last.size()
                                                                 << " logits for a vocabulary of " << vocab);
    // 53 random bits: the same draw on every platform (std::uniform_real_distribution is not specified).
    const double u = static_cast<double>(rng() >> 11) * 0x1.0p-53;
    const int32_t next = sampleToken(last, opts_.temperature, opts_.topK, u);
    tokens.push_back(next);
    if (bytes) {
      out.push_back(static_cast<char>(next));
    } else {
      out += (out.empty() ? "" : " ") + std::to_string(next);
    }
  }
  return out;
}

}  // namespace minidp::train
