// LLaMA-style decoder: pre-norm blocks with RMSNorm, rotary embeddings on q and k, grouped-query attention
// (fewer key/value heads than query heads), a SwiGLU MLP, no biases and an untied lm head.
//
// Parameter names, shapes and order are Hugging Face's LlamaForCausalLM's (PyTorch twin:
// tests/reference/models.py), with C = embd, d = C / heads, F = hidden:
//   model.embed_tokens.weight (V, C),
//   model.layers.i.self_attn.{q_proj (H d, C), k_proj (Hkv d, C), v_proj (Hkv d, C), o_proj (C, H d)}.weight,
//   model.layers.i.mlp.{gate_proj (F, C), up_proj (F, C), down_proj (C, F)}.weight,
//   model.layers.i.input_layernorm.weight (C), model.layers.i.post_attention_layernorm.weight (C),
//   model.norm.weight (C), lm_head.weight (V, C).
// Rotary embedding in the rotate-half form (ops::rotary), RMSNorm eps 1e-5 by default.
#pragma once

#include "framework/nn/embedding.h"
#include "framework/nn/linear.h"
#include "framework/nn/rms_norm.h"
#include "models/model.h"

namespace minidp::models {

struct LlamaConfig {
  int64_t vocab = 256;
  int64_t context = 128;
  int64_t layers = 4;
  int64_t heads = 4;    // query heads
  int64_t kvHeads = 2;  // key/value heads, dividing heads
  int64_t embd = 128;
  int64_t hidden = 352;  // SwiGLU width: LLaMA takes about 8/3 embd, rounded up
  double ropeTheta = 10000;
  double normEps = 1e-5;
  DType compute = DType::F32;  // activations over fp32 parameters: F32, or BF16 (CUDA); fp64 runs compute in fp64
};

/// The shape problems of `c` as one line naming the flags (--embd, --heads, --kv-heads), a bf16 head dim
/// without a flash attention kernel included; empty when fine.
std::string llamaConfigProblem(const LlamaConfig& c);

class Llama : public Model {
 public:
  /// N(0, 0.02) weights and embeddings, o_proj and down_proj N(0, 0.02 / sqrt(2 layers)), norms 1.
  Llama(const LlamaConfig& config, uint64_t seed);
  /// inputs int32 tokens (B, T), T <= context -> logits (B*T, V).
  Variable forward(const Tensor& inputs) const override;
  /// The lm head and the cross-entropy as one op (ops::linearCrossEntropy), as GPT's.
  Variable loss(const Tensor& inputs, const Tensor& targets) const override;
  const LlamaConfig& config() const { return config_; }

 private:
  struct Attention;
  struct Mlp;
  struct Block;
  /// tokens (B, T) -> the final RMSNorm's output (B, T, C), the lm head's input.
  Variable features(const Tensor& tokens) const;
  LlamaConfig config_;
  std::shared_ptr<nn::Embedding> embed_;
  std::vector<std::shared_ptr<Block>> blocks_;
  std::shared_ptr<nn::RMSNorm> norm_;
  std::shared_ptr<nn::Linear> lmHead_;
};

}  // namespace minidp::models
