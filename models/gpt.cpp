#include "models/gpt.h"

#include <cmath>

#include "framework/nn/embedding.h"
#include "framework/nn/module_list.h"
#include "framework/ops/ops.h"
#include "kernels/flash_attention.h"

namespace minidp::models {

namespace {

bool endsWith(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

}  // namespace

/// Causal self-attention: c_attn (C -> 3C: q, k, v), the attention core, c_proj (C -> C).
struct GPT::Attention : nn::Module {
  std::shared_ptr<nn::Linear> cAttn, cProj;
  int64_t heads;
  Attention(const GptConfig& c, nn::Rng& rng) : heads(c.heads) {
    cAttn = registerModule("c_attn", std::make_shared<nn::Linear>(c.embd, 3 * c.embd, true, rng));
    cProj = registerModule("c_proj", std::make_shared<nn::Linear>(c.embd, c.embd, true, rng));
  }
  // x (B, T, C) -> (B, T, C); with a residual, residual + that (added by c_proj's GEMM).
  Variable forward(const Variable& x, const Variable& residual = Variable()) const {
    return cProj->forward(ops::causalSelfAttention(cAttn->forward(x), heads), residual);
  }
};

/// The MLP: c_fc (C -> 4C), GELU, c_proj (4C -> C), as one op (fused on the bf16 CUDA path).
struct GPT::Mlp : nn::Module {
  std::shared_ptr<nn::Linear> cFc, cProj;
  Mlp(const GptConfig& c, nn::Rng& rng) {
    cFc = registerModule("c_fc", std::make_shared<nn::Linear>(c.embd, 4 * c.embd, true, rng));
    cProj = registerModule("c_proj", std::make_shared<nn::Linear>(4 * c.embd, c.embd, true, rng));
  }
  // x (B, T, C) -> (B, T, C); with a residual, residual + that (added by c_proj's GEMM).
  Variable forward(const Variable& x, const Variable& residual = Variable()) const {
    return ops::geluMlp(x, cFc->weight, cFc->bias, cProj->weight, cProj->bias, residual);
  }
};

/// A transformer block, pre-norm: x + attn(ln_1(x)), then h + mlp(ln_2(h)).
struct GPT::Block : nn::Module {
  std::shared_ptr<nn::LayerNorm> ln1, ln2;
  std::shared_ptr<Attention> attn;
  std::shared_ptr<Mlp> mlp;

  Block(const GptConfig& c, nn::Rng& rng) {
    ln1 = registerModule("ln_1", std::make_shared<nn::LayerNorm>(c.embd));
    attn = registerModule("attn", std::make_shared<Attention>(c, rng));
    ln2 = registerModule("ln_2", std::make_shared<nn::LayerNorm>(c.embd));
    mlp = registerModule("mlp", std::make_shared<Mlp>(c, rng));
  }

  // x (B, T, C) -> (B, T, C), in x's dtype; attention and the MLP compute in `compute` (the residual
  // stream x may be wider: then cast, and added on its own).
  Variable forward(const Variable& x, DType compute) const {
    const DType stream = x.dtype();
    if (stream == compute) {  // each residual addition in its projection's GEMM
      Variable h = attn->forward(ln1->forward(x), x);
      return mlp->forward(ln2->forward(h), h);
    }
    Variable h = ops::add(x, ops::cast(attn->forward(ops::cast(ln1->forward(x), compute)), stream));
    return ops::add(h, ops::cast(mlp->forward(ops::cast(ln2->forward(h), compute)), stream));
  }
};

GPT::GPT(const GptConfig& c, uint64_t seed) : config_(c) {
  MINIDP_CHECK(c.vocab > 0 && c.context > 0 && c.layers > 0 && c.heads > 0 && c.embd > 0, "GPT sizes must be positive");
  MINIDP_CHECK(c.embd % c.heads == 0, "GPT width " << c.embd << " is not divisible by " << c.heads << " heads");
  // bf16 attention runs on the CUDA flash kernels alone: a head dim without one is refused here, when the
  // model is built (minidp-train: before the banner and any step), not at the first forward.
  MINIDP_CHECK(c.compute != DType::BF16 || kernels::flashAttentionSupportsHeadDim(c.embd / c.heads),
               "GPT head dim " << c.embd / c.heads << " (--embd " << c.embd << " / --heads " << c.heads
                               << ") has no bf16 attention kernel; choose --embd and --heads for a head dim of "
                               << kernels::flashAttentionHeadDims() << ", or --dtype fp32");
  nn::Rng rng(seed);
  wte_ = registerModule("wte", std::make_shared<nn::Embedding>(nn::normal({c.vocab, c.embd}, 0.02, rng)))->weight;
  wpe_ = registerModule("wpe", std::make_shared<nn::Embedding>(nn::normal({c.context, c.embd}, 0.02, rng)))->weight;
  auto h = registerModule("h", std::make_shared<nn::ModuleList>());
  for (int64_t i = 0; i < c.layers; ++i) blocks_.push_back(h->append(std::make_shared<Block>(c, rng)));
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
  // The residual stream: in the compute dtype, or in the parameters' dtype (fp32Residual).
  const DType stream = config_.fp32Residual ? wte_.dtype() : compute;
  Variable x = ops::embedding(wte_, wpe_, tokens, stream);  // (B, T, C)
  for (const auto& block : blocks_) x = block->forward(x, compute);
  return ops::cast(lnF_->forward(x), compute);
}

Variable GPT::forward(const Tensor& tokens) const {
  Variable logits = lmHead_->forward(features(tokens));  // (B, T, V)
  return ops::reshape(logits, {-1, config_.vocab});
}

Variable GPT::loss(const Tensor& inputs, const Tensor& targets) const {
  return ops::linearCrossEntropy(features(inputs), lmHead_->weight, targets.view({-1}));
}

}  // namespace minidp::models
