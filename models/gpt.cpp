#include "models/gpt.h"

#include <cmath>

#include "framework/ops/ops.h"

namespace minidp::models {

namespace {

/// A module holding one (rows, C) table named "weight".
class Table : public nn::Module {
 public:
  explicit Table(Tensor value) { weight = registerParameter("weight", std::move(value)); }
  Variable weight;
};

/// A named container so that children read "h.0", "attn", "mlp".
class Container : public nn::Module {
 public:
  template <typename M>
  std::shared_ptr<M> add(const std::string& name, std::shared_ptr<M> m) {
    return registerModule(name, std::move(m));
  }
};

bool endsWith(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

}  // namespace

struct GPT::Block : nn::Module {
  std::shared_ptr<nn::LayerNorm> ln1, ln2;
  std::shared_ptr<nn::Linear> cAttn, attnProj, cFc, mlpProj;
  int64_t heads;

  Block(const GptConfig& c, nn::Rng& rng) : heads(c.heads) {
    ln1 = registerModule("ln_1", std::make_shared<nn::LayerNorm>(c.embd));
    auto attn = registerModule("attn", std::make_shared<Container>());
    cAttn = attn->add("c_attn", std::make_shared<nn::Linear>(c.embd, 3 * c.embd, true, rng));
    attnProj = attn->add("c_proj", std::make_shared<nn::Linear>(c.embd, c.embd, true, rng));
    ln2 = registerModule("ln_2", std::make_shared<nn::LayerNorm>(c.embd));
    auto mlp = registerModule("mlp", std::make_shared<Container>());
    cFc = mlp->add("c_fc", std::make_shared<nn::Linear>(c.embd, 4 * c.embd, true, rng));
    mlpProj = mlp->add("c_proj", std::make_shared<nn::Linear>(4 * c.embd, c.embd, true, rng));
  }

  // x (B, T, C) -> (B, T, C)
  Variable forward(const Variable& x) const {
    Variable a = attnProj->forward(ops::causalSelfAttention(cAttn->forward(ln1->forward(x)), heads));
    Variable h = ops::add(x, a);
    Variable m = ops::geluMlp(ln2->forward(h), cFc->weight, cFc->bias, mlpProj->weight, mlpProj->bias);
    return ops::add(h, m);
  }
};

GPT::GPT(const GptConfig& c, uint64_t seed) : config_(c) {
  MINIDP_CHECK(c.vocab > 0 && c.context > 0 && c.layers > 0 && c.heads > 0 && c.embd > 0, "GPT sizes must be positive");
  MINIDP_CHECK(c.embd % c.heads == 0, "GPT width " << c.embd << " is not divisible by " << c.heads << " heads");
  nn::Rng rng(seed);
  wte_ = registerModule("wte", std::make_shared<Table>(nn::normal({c.vocab, c.embd}, 0.02, rng)))->weight;
  wpe_ = registerModule("wpe", std::make_shared<Table>(nn::normal({c.context, c.embd}, 0.02, rng)))->weight;
  auto h = registerModule("h", std::make_shared<Container>());
  for (int64_t i = 0; i < c.layers; ++i) blocks_.push_back(h->add(std::to_string(i), std::make_shared<Block>(c, rng)));
  lnF_ = registerModule("ln_f", std::make_shared<nn::LayerNorm>(c.embd));
  lmHead_ = registerModule("lm_head", std::make_shared<nn::Linear>(c.embd, c.vocab, false, rng));
  // GPT-2 initialisation replaces PyTorch's Linear default, in registration order.
  const double projStd = 0.02 / std::sqrt(2.0 * static_cast<double>(c.layers));
  for (auto& [name, param] : namedParameters()) {
    Variable p = param;
    if (endsWith(name, "c_proj.weight")) {
      p.data() = nn::normal(p.shape(), projStd, rng);
    } else if (p.shape().size() == 2 && name.rfind("wte", 0) != 0 && name.rfind("wpe", 0) != 0) {
      p.data() = nn::normal(p.shape(), 0.02, rng);
    } else if (endsWith(name, "bias")) {
      p.data().zero();
    }
  }
}

Variable GPT::features(const Tensor& tokens) const {
  MINIDP_CHECK(tokens.ndim() == 2 && tokens.dtype() == DType::I32,
               "GPT input must be int32 (B, T), got " << dtypeName(tokens.dtype()) << shapeString(tokens.shape()));
  MINIDP_CHECK(tokens.size(1) <= config_.context,
               "sequence length " << tokens.size(1) << " exceeds the context " << config_.context);
  const DType compute = activationDType(config_.compute, wte_.dtype());
  Variable x = ops::embedding(wte_, wpe_, tokens, compute);  // (B, T, C), in the compute dtype
  for (const auto& block : blocks_) x = block->forward(x);
  return lnF_->forward(x);
}

Variable GPT::forward(const Tensor& tokens) const {
  Variable logits = lmHead_->forward(features(tokens));  // (B, T, V)
  return ops::reshape(logits, {-1, config_.vocab});
}

Variable GPT::loss(const Tensor& inputs, const Tensor& targets) const {
  return ops::linearCrossEntropy(features(inputs), lmHead_->weight, targets.view({-1}));
}

}  // namespace minidp::models
