#include "framework/distributed/gradient/ddp.h"

#include <algorithm>
#include <map>
#include <sstream>
#include <utility>

#include "framework/distributed/job/mpi_environment.h"

namespace minidp::distributed {

namespace {

std::vector<std::string> splitLines(const std::string& text) {
  std::vector<std::string> lines;
  std::istringstream is(text);
  for (std::string line; std::getline(is, line);) lines.push_back(line);
  return lines;
}

// The same message on every rank: every rank sees every rank's list. `what` names a line ("parameter").
void checkSameLines(const std::vector<std::string>& signatures, const std::string& what, const std::string& fix) {
  const std::vector<std::string> reference = splitLines(signatures[0]);
  for (size_t r = 1; r < signatures.size(); ++r) {
    if (signatures[r] == signatures[0]) continue;
    const std::vector<std::string> other = splitLines(signatures[r]);
    std::ostringstream os;
    os << "ranks hold different " << what << "s: ";
    for (size_t i = 0; i < std::max(reference.size(), other.size()); ++i) {
      const std::string mine = i < reference.size() ? reference[i] : "(none)";
      const std::string theirs = i < other.size() ? other[i] : "(none)";
      if (mine == theirs) continue;
      os << what << " #" << i << " is '" << theirs << "' on rank " << r << " but '" << mine << "' on rank 0";
      break;
    }
    os << " (rank 0 has " << reference.size() << " " << what << "s, rank " << r << " has " << other.size() << "); "
       << fix;
    throwError(os.str(), __FILE__, __LINE__);
  }
}

// Splits each rank's "parameters \0 options and plan" into the two lists.
std::vector<std::string> part(const std::vector<std::string>& signatures, int index) {
  std::vector<std::string> out;
  for (const std::string& s : signatures) {
    const size_t split = s.find('\0');
    out.push_back(index == 0 ? s.substr(0, split) : s.substr(split + 1));
  }
  return out;
}

}  // namespace

std::string optionsSignature(const DdpOptions& opts) {
  std::ostringstream os;
  os << "overlap " << overlapName(opts.overlap) << " bucket-bytes " << opts.bucketCapBytes << " first-bucket-bytes "
     << opts.firstBucketCapBytes << " rebuild-buckets " << opts.rebuildBuckets << " comm-hook " << commHookSignature(opts.commHook) << " zero " << opts.zeroStage << " row-sparse '" << opts.rowSparseParameter << "'\n";
  return os.str();
}

std::string parameterSignature(const nn::NamedParameters& params) {
  std::ostringstream os;
  for (const auto& [name, p] : params)
    os << name << " " << dtypeName(p.dtype()) << " " << shapeString(p.shape()) << "\n";
  return os.str();
}

DistributedDataParallel::DistributedDataParallel(nn::NamedParameters params, std::shared_ptr<Communicator> comm,
                                                 DdpOptions opts)
    : params_(std::move(params)), comm_(std::move(comm)), opts_(opts), rebuildPending_(opts.rebuildBuckets) {
  MINIDP_CHECK(comm_, "DistributedDataParallel without a communicator");
  std::map<const void*, std::string> seen;  // one gradient view and one hook per Variable
  for (const auto& [name, p] : params_) {
    auto [it, inserted] = seen.emplace(p.id(), name);
    MINIDP_CHECK(inserted,
                 "parameter '" << name << "' is the same Variable as '" << it->second << "': list each parameter once");
  }
  MINIDP_CHECK(opts.zeroStage >= 0 && opts.zeroStage <= 3, "ZeRO stage " << opts.zeroStage << " (0 to 3)");
  MINIDP_CHECK(opts.zeroStage == 0 || !opts.rebuildBuckets,
               "ZeRO shards the first plan's buckets: it cannot be combined with rebuilding the buckets");
  int rowSparse = -1;
  for (const auto& [name, p] : params_) {
    if (name == opts.rowSparseParameter) rowSparse = static_cast<int>(infos_.size());
    infos_.push_back(ParamInfo{name, p.data().numel(), p.dtype(), name == opts.rowSparseParameter});
  }
  MINIDP_CHECK(opts.rowSparseParameter.empty() || rowSparse >= 0,
               "row-sparse parameter '" << opts.rowSparseParameter << "' is not among the parameters");
  if (opts_.bucketCapBytes == 0) {
    MINIDP_CHECK(opts.zeroStage == 0 && !opts.rebuildBuckets,
                 "an automatic bucket cap re-plans after the first step: not with ZeRO or rebuilding the buckets");
    opts_.bucketCapBytes = DdpOptions{}.bucketCapBytes;  // the start plan's
  }
  // ZeRO-3: a bucket per unit (a unit's gather and its reduce-scatter share one layout).
  BucketPlan plan = opts.zeroStage == 3 ? planUnits(infos_)
                                        : planBuckets(infos_, opts_.bucketCapBytes, opts_.firstBucketCapBytes);
  // The options and the plan travel with the parameters: ranks that would launch different buckets stop
  // here with an error instead of hanging (or mixing gradients) in the first all-reduce.
  const ExchangeLabel label("DDP parameter and option check");
  const std::vector<std::string> signatures =
      comm_->allGather(parameterSignature(params_) + '\0' + optionsSignature(opts_) + plan.describe());
  checkSameLines(part(signatures, 0), "parameter", "every rank must build the same model");
  checkSameLines(part(signatures, 1), "DDP setting", "start every rank with the same data-parallel options");
  for (auto& [name, p] : params_) {
    MINIDP_CHECK(p.requiresGrad(), "parameter '" << name << "' does not require grad");
    comm_->broadcast(p.data(), 0);
  }
  std::unique_ptr<CommHook> hook = makeCommHook(opts.commHook);
  if (rowSparse >= 0) {
    auto rows = std::make_unique<RowSparseHook>(std::move(hook), rowSparse);
    rows_ = rows.get();
    hook = std::move(rows);
  }
  const Reduction reduction = opts.zeroStage >= 1 ? Reduction::ReduceScatter : Reduction::AllReduce;
  reducer_ = std::make_unique<Reducer>(params_, std::move(plan), comm_, opts.overlap, reduction, std::move(hook),
                                       opts.zeroStage >= 2);
  if (opts.bucketCapBytes == 0) {
    autoCap_ = std::make_unique<AutoBucketCap>(*comm_, params_.empty() ? Device::CPU : params_[0].second.data().device());
  }
  for (size_t i = 0; i < params_.size(); ++i) {
    Reducer* reducer = reducer_.get();
    gradHooks_.push_back(params_[i].second.addGradReadyHook([reducer, i](Variable&) { reducer->markReady(i); }));
  }
}

DistributedDataParallel::~DistributedDataParallel() {
  for (size_t i = 0; i < params_.size(); ++i) params_[i].second.removeGradReadyHook(gradHooks_[i]);
}

void DistributedDataParallel::observe(runtime::StepTimer& timer) {
  MINIDP_CHECK(!timerObserver_, "observe: DDP already reports to a step timer");
  std::vector<std::string> names;  // the grad-ready marks' indices, grouped into layers
  for (const ParamInfo& p : infos_) names.push_back(p.name);
  timer.setParameterNames(std::move(names));
  timerObserver_ = std::make_shared<StepTimerObserver>(timer);
  timer_ = &timer;
  reducer_->subscribe(timerObserver_);
}

void DistributedDataParallel::prepareStep() {
  if (autoCap_ && timer_) autoCap_->beginProfile(*timer_);
  reducer_->prepareStep();
}

void DistributedDataParallel::beginMicroBatch(const Tensor& inputs, bool requireSync) {
  reducer_->setRequireSync(requireSync);
  if (rows_) rows_->addRowIds(inputs);
}

std::string DistributedDataParallel::endStep() {
  if (autoCap_) {
    MINIDP_CHECK(timer_, "an automatic bucket cap profiles a timed step: call observe(timer) before the first");
    std::vector<Shape> shapes;
    for (const auto& [name, param] : params_) shapes.push_back(param.data().shape());
    std::string report;
    const size_t cap = autoCap_->choose(*timer_, *reducer_, infos_, shapes, rowBucket(), opts_.firstBucketCapBytes,
                                        report);
    replan(cap, std::min(opts_.firstBucketCapBytes, cap));
    autoCap_.reset();
    report_ += report + "\n" + plan().describe();
  }
  return std::exchange(report_, std::string());
}

void DistributedDataParallel::addRowIds(const Tensor& ids) {
  MINIDP_CHECK(rows_, "addRowIds: no parameter is reduced by rows (DdpOptions::rowSparseParameter)");
  rows_->addRowIds(ids);
}

void DistributedDataParallel::computeGradNorm(optim::GradClipper& clipper) {
  std::vector<Tensor> grads;
  const int rank = comm_->rank(), world = comm_->worldSize();
  const bool sharded = reducer_->reduction() == Reduction::ReduceScatter;
  for (size_t b = 0; b < reducer_->plan().buckets.size(); ++b) {
    grads.push_back(sharded ? reducer_->gradShard(b) : reducer_->bucketBuffer(b));
  }
  if (!sharded) {
    clipper.compute(grads);
    return;
  }
  clipper.compute(grads, rank, world,
                  [this](const Tensor& table) { comm_->allGatherShards(table, "grad norm")->wait(); });
}

void DistributedDataParallel::finalize() {
  rebuiltLastStep_ = false;
  reducer_->finalize();
  if (timerObserver_) timerObserver_->addBucketSpans(reducer_->lastStepTimings());
  if (!rebuildPending_) return;
  // Ranks may observe different ready orders; every rank plans with rank 0's, so the plans stay identical.
  std::ostringstream mine;
  for (int i : reducer_->readyOrder()) mine << i << " ";
  const ExchangeLabel label("--rebuild-buckets ready order exchange");
  std::istringstream rank0(comm_->allGather(mine.str()).at(0));
  std::vector<int> order;
  for (int i; rank0 >> i;) order.push_back(i);
  reducer_->rebuild(planBucketsInOrder(infos_, order, opts_.bucketCapBytes, opts_.firstBucketCapBytes));
  rebuildPending_ = false;
  rebuiltLastStep_ = true;
  report_ += "bucket plan rebuilt from the observed ready order:\n" + plan().describe();
}

void DistributedDataParallel::replan(size_t capBytes, size_t firstCapBytes) {
  MINIDP_CHECK(opts_.zeroStage == 0, "ZeRO keeps its first plan: its optimizer holds views of the buckets");
  reducer_->rebuild(planBuckets(infos_, capBytes, firstCapBytes));
  opts_.bucketCapBytes = capBytes;
  opts_.firstBucketCapBytes = firstCapBytes;
}

}  // namespace minidp::distributed
