// GPT-2-style decoder: pre-norm transformer blocks over byte tokens.
//
// Parameter names, shapes and order (PyTorch twin: tests/reference/models.py):
//   wte.weight (V, C), wpe.weight (T, C),
//   h.i.ln_1.{weight,bias} (C), h.i.attn.c_attn.weight (3C, C), .bias (3C), h.i.attn.c_proj.weight (C, C), .bias,
//   h.i.ln_2.{weight,bias}, h.i.mlp.c_fc.weight (4C, C), .bias (4C), h.i.mlp.c_proj.weight (C, 4C), .bias (C),
//   ln_f.{weight,bias} (C), lm_head.weight (V, C) (no bias, not tied to wte).
// Linear weights are [out, in] as nn.Linear; GELU is the tanh approximation; LayerNorm eps 1e-5.
#pragma once

#include "framework/nn/layer_norm.h"
#include "framework/nn/linear.h"
#include "models/model.h"

namespace minidp::models {

/// Model size: vocabulary, context length, blocks, heads, width; and the compute dtype of the
/// activations (BF16: mixed precision with the parameters' dtype as master; logits in it, loss fp32).
struct GptConfig {
  int64_t vocab = 256;
  int64_t context = 128;
  int64_t layers = 4;
  int64_t heads = 4;
  int64_t embd = 128;
  DType compute = DType::F32;
  /// Under mixed precision, whether the residual stream (the embedding sum and every block's x + f(x),
  /// and their gradients) stays in fp32 as under PyTorch's autocast, each LayerNorm's output cast to the
  /// compute dtype and each block's output cast back; false keeps it in the compute dtype (as llm.c).
  bool fp32Residual = false;
};

class GPT : public Model {
 public:
  /// GPT-2 initialisation: N(0, 0.02) weights, c_proj weights N(0, 0.02/sqrt(2L)), zero biases.
  GPT(const GptConfig& config, uint64_t seed);
  /// inputs int32 tokens (B, T), T <= context -> logits (B*T, V).
  Variable forward(const Tensor& inputs) const override;
  /// The same value as Model::loss without (B*T, V) logits of its own: the lm head and the cross-entropy
  /// as one op (ops::linearCrossEntropy, aligned logits rows for any vocabulary size).
  Variable loss(const Tensor& inputs, const Tensor& targets) const override;
  const GptConfig& config() const { return config_; }

 private:
  struct Attention;
  struct Mlp;
  struct Block;
  /// tokens (B, T) -> the final LayerNorm's output (B, T, C), the lm head's input.
  Variable features(const Tensor& tokens) const;
  GptConfig config_;
  Variable wte_, wpe_;
  std::vector<std::shared_ptr<Block>> blocks_;
  std::shared_ptr<nn::LayerNorm> lnF_;
  std::shared_ptr<nn::Linear> lmHead_;
};

}  // namespace minidp::models
