#include "models/llama.h"

#include <cmath>
#include <sstream>

#include "framework/nn/module_list.h"
#include "framework/ops/ops.h"
#include "kernels/flash_attention.h"

namespace minidp::models {

namespace {

bool endsWith(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// The container Hugging Face names "model": embeddings, blocks and the final norm (forward is Llama's).
struct Trunk : nn::Module {
  template <typename M>
  std::shared_ptr<M> add(const std::string& name, std::shared_ptr<M> module) {
    return registerModule(name, std::move(module));
  }
};

}  // namespace

std::string llamaConfigProblem(const LlamaConfig& c) {
  std::ostringstream os;
  if (c.vocab <= 0 || c.context <= 0 || c.layers <= 0 || c.heads <= 0 || c.kvHeads <= 0 || c.embd <= 0 ||
      c.hidden <= 0) {
    os << "llama sizes must be positive";
  } else if (c.embd % c.heads != 0) {
    os << "--embd " << c.embd << " is not divisible by --heads " << c.heads;
  } else if ((c.embd / c.heads) % 2 != 0) {
    os << "head dim " << c.embd / c.heads << " (--embd " << c.embd << " / --heads " << c.heads
       << ") is odd; rotary embeddings turn channel pairs";
  } else if (c.heads % c.kvHeads != 0) {
    os << "--kv-heads " << c.kvHeads << " does not divide --heads " << c.heads;
  } else if (c.ropeTheta <= 0 || c.normEps <= 0) {
    os << "--rope-theta and --norm-eps must be positive";
  } else if (c.compute == DType::BF16 && !kernels::flashAttentionSupportsHeadDim(c.embd / c.heads)) {
    // bf16 attention runs on the CUDA flash kernels alone (ops::causalAttention), as GPT's.
    os << "llama head dim " << c.embd / c.heads << " (--embd " << c.embd << " / --heads " << c.heads
       << ") has no bf16 attention kernel; choose --embd and --heads for a head dim of "
       << kernels::flashAttentionHeadDims() << ", or --dtype fp32";
  }
  return os.str();
}

/// Grouped-query attention: q_proj, k_proj, v_proj, rotary on q and k, the causal core, o_proj.
struct Llama::Attention : nn::Module {
  std::shared_ptr<nn::Linear> qProj, kProj, vProj, oProj;
  int64_t heads, kvHeads, headDim;
  double theta;
  Attention(const LlamaConfig& c, nn::Rng& rng)
      : heads(c.heads), kvHeads(c.kvHeads), headDim(c.embd / c.heads), theta(c.ropeTheta) {
    qProj = registerModule("q_proj", std::make_shared<nn::Linear>(c.embd, heads * headDim, false, rng));
    kProj = registerModule("k_proj", std::make_shared<nn::Linear>(c.embd, kvHeads * headDim, false, rng));
    vProj = registerModule("v_proj", std::make_shared<nn::Linear>(c.embd, kvHeads * headDim, false, rng));
    oProj = registerModule("o_proj", std::make_shared<nn::Linear>(heads * headDim, c.embd, false, rng));
  }
  // x (B, T, C) -> residual + attention(x), (B, T, C); the addition in o_proj's GEMM.
  Variable forward(const Variable& x, const Variable& residual) const {
    const int64_t B = x.shape()[0], T = x.shape()[1];
    Variable q = ops::rotary(ops::reshape(qProj->forward(x), {B, T, heads, headDim}), theta);
    Variable k = ops::rotary(ops::reshape(kProj->forward(x), {B, T, kvHeads, headDim}), theta);
    Variable v = ops::reshape(vProj->forward(x), {B, T, kvHeads, headDim});
    return oProj->forward(ops::reshape(ops::causalAttention(q, k, v), {B, T, heads * headDim}), residual);
  }
};

/// SwiGLU: down_proj(silu(gate_proj(x)) * up_proj(x)), the gated product fused into down_proj
/// (ops::swigluLinear: recomputed in backward rather than kept).
struct Llama::Mlp : nn::Module {
  std::shared_ptr<nn::Linear> gateProj, upProj, downProj;
  Mlp(const LlamaConfig& c, nn::Rng& rng) {
    gateProj = registerModule("gate_proj", std::make_shared<nn::Linear>(c.embd, c.hidden, false, rng));
    upProj = registerModule("up_proj", std::make_shared<nn::Linear>(c.embd, c.hidden, false, rng));
    downProj = registerModule("down_proj", std::make_shared<nn::Linear>(c.hidden, c.embd, false, rng));
  }
  // residual + the MLP of x; the addition in down_proj's GEMM.
  Variable forward(const Variable& x, const Variable& residual) const {
    return ops::swigluLinear(gateProj->forward(x), upProj->forward(x), downProj->weight, residual);
  }
};

/// A pre-norm block: h = x + attn(norm(x)), then h + mlp(norm(h)), each addition in the output projection's
/// GEMM. Registered in Hugging Face's order.
struct Llama::Block : nn::Module {
  std::shared_ptr<Attention> attn;
  std::shared_ptr<Mlp> mlp;
  std::shared_ptr<nn::RMSNorm> inputNorm, postNorm;
  Block(const LlamaConfig& c, nn::Rng& rng) {
    attn = registerModule("self_attn", std::make_shared<Attention>(c, rng));
    mlp = registerModule("mlp", std::make_shared<Mlp>(c, rng));
    inputNorm = registerModule("input_layernorm", std::make_shared<nn::RMSNorm>(c.embd, c.normEps));
    postNorm = registerModule("post_attention_layernorm", std::make_shared<nn::RMSNorm>(c.embd, c.normEps));
  }
  Variable forward(const Variable& x) const {
    Variable h = attn->forward(inputNorm->forward(x), x);
    return mlp->forward(postNorm->forward(h), h);
  }
};

Llama::Llama(const LlamaConfig& c, uint64_t seed) : config_(c) {
  const std::string problem = llamaConfigProblem(c);
  MINIDP_CHECK(problem.empty(), problem);
  nn::Rng rng(seed);
  auto trunk = registerModule("model", std::make_shared<Trunk>());
  embed_ = trunk->add("embed_tokens", std::make_shared<nn::Embedding>(nn::normal({c.vocab, c.embd}, 0.02, rng)));
  auto layers = trunk->add("layers", std::make_shared<nn::ModuleList>());
  for (int64_t i = 0; i < c.layers; ++i) blocks_.push_back(layers->append(std::make_shared<Block>(c, rng)));
  norm_ = trunk->add("norm", std::make_shared<nn::RMSNorm>(c.embd, c.normEps));
  lmHead_ = registerModule("lm_head", std::make_shared<nn::Linear>(c.embd, c.vocab, false, rng));
  // GPT-2's initialisation in place of PyTorch's Linear default: the projections into the residual stream
  // scaled by 1 / sqrt(2 layers); in registration order.
  const double projStd = 0.02 / std::sqrt(2.0 * static_cast<double>(c.layers));
  for (auto& [name, param] : namedParameters()) {
    Variable p = param;
    if (endsWith(name, "o_proj.weight") || endsWith(name, "down_proj.weight")) {
      p.data() = nn::normal(p.shape(), projStd, rng);
    } else if (p.shape().size() == 2 && name != "model.embed_tokens.weight") {
      p.data() = nn::normal(p.shape(), 0.02, rng);
    }
  }
}

Variable Llama::features(const Tensor& tokens) const {
  MINIDP_CHECK(tokens.ndim() == 2 && tokens.dtype() == DType::I32,
               "llama input must be int32 (B, T), got " << dtypeName(tokens.dtype()) << shapeString(tokens.shape()));
  MINIDP_CHECK(tokens.size(1) <= config_.context,
               "sequence length " << tokens.size(1) << " exceeds the context " << config_.context);
  // The residual stream in the compute dtype (bf16 under mixed precision, as GPT's default); the embedding
  // gathers the fp32 table's rows and is cast, so the table's gradient comes back fp32.
  const DType compute = activationDType(config_.compute, embed_->weight.dtype());
  Variable x = ops::cast(embed_->forward(tokens), compute);  // (B, T, C)
  for (const auto& block : blocks_) x = block->forward(x);
  return norm_->forward(x);
}

Variable Llama::forward(const Tensor& tokens) const {
  return ops::reshape(lmHead_->forward(features(tokens)), {-1, config_.vocab});
}

Variable Llama::loss(const Tensor& inputs, const Tensor& targets) const {
  return ops::linearCrossEntropy(features(inputs), lmHead_->weight, targets.view({-1}));
}

}  // namespace minidp::models
