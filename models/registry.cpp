#include "models/registry.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <mutex>
#include <sstream>

#include "framework/ops/ops.h"
#include "kernels/flash_attention.h"
#include "models/gpt.h"
#include "models/llama.h"
#include "models/mlp.h"

namespace minidp::models {

namespace {

const ModelFlag* declared(const ModelEntry& entry, const std::string& name) { return findFlag(entry.flags, name); }

// ---- the built-in models' knowledge ----

ModelFlag integerFlag(const std::string& name, const std::string& value, const std::string& help) {
  ModelFlag f;
  f.name = name;
  f.defaultValue = value;
  f.help = help;
  return f;
}

ModelFlag numberFlag(const std::string& name, const std::string& value, const std::string& help, double min,
                     double max) {
  ModelFlag f = integerFlag(name, value, help);
  f.kind = FlagKind::Number;
  f.min = min;
  f.max = max;
  return f;
}

ModelFlag contextFlag() { return integerFlag("context", "128", "Context length: tokens per training window"); }

double asDouble(int64_t v) { return static_cast<double>(v); }

// MFU's count (PaLM's, as tools/torch_bench.py counts): 6 x the parameters that multiply (not the lookup
// tables) + 12 x layers x width x context for the attention scores and weighted values.
double transformerFlops(const Model& model, int64_t lookups, int64_t layers, int64_t width, int64_t context) {
  return 6.0 * asDouble(model.numParameters() - lookups) + 12.0 * asDouble(layers) * asDouble(width) * asDouble(context);
}

// Whether the run's attention takes the flash kernels (CUDA, fp32 or bf16, a head dim with a kernel), which
// keep no (B, H, T, T) probabilities.
bool flashAttentionRuns(const ModelArgs& a, int64_t embd, int64_t heads) {
  return a.device == Device::CUDA && a.compute != DType::F64 &&
         kernels::flashAttentionSupportsHeadDim(heads > 0 ? embd / heads : 0);
}

ModelEntry mlpEntry() {
  ModelEntry e;
  e.description = "MLP with ReLU (--hidden sizes) on Fashion-MNIST images";
  e.data = DataKind::Images;
  e.defaultData = "fashion-mnist";
  e.evaluation = Evaluation::Accuracy;
  e.defaultSteps = 5000;
  e.defaultOptimizer = "sgd";
  e.defaultLr = 0.05;
  ModelFlag hidden = integerFlag("hidden", "256 256", "Hidden layer sizes");
  hidden.kind = FlagKind::Integers;
  hidden.max = 1e6;
  e.flags = {hidden};
  const auto dims = [](const ModelArgs& a) {
    std::vector<int64_t> d{a.inputs};
    for (int64_t h : a.flags.integers("hidden")) d.push_back(h);
    d.push_back(a.classes);
    return d;
  };
  e.make = [dims](const ModelArgs& a) { return std::make_unique<MLP>(dims(a), a.seed, a.compute); };
  // Parameters sum (d_i d_{i+1} + d_{i+1}); activations 4 B sum(d_i): input, pre-activation, activation and
  // gradient of every width.
  e.memory = [dims](const ModelArgs& a, int64_t batch) {
    const std::vector<int64_t> d = dims(a);
    MemoryNeed need;
    double widths = 0;
    for (size_t i = 0; i < d.size(); ++i) {
      widths += asDouble(d[i]);
      if (i + 1 < d.size()) need.parameters += d[i] * d[i + 1] + d[i + 1];
    }
    need.activations = 4 * asDouble(batch) * widths;
    need.flagsToLower = {"--hidden"};
    return need;
  };
  return e;
}

// A decoder on the fortunes (or llm.c tokens) scored by its validation loss: AdamW at 1e-3 for 2000 steps.
ModelEntry decoderEntry(const std::string& description, const std::string& tokenEmbedding) {
  ModelEntry e;
  e.description = description;
  e.data = DataKind::Tokens;
  e.defaultData = "fortunes";
  e.evaluation = Evaluation::MeanLoss;
  e.defaultSteps = 2000;
  e.defaultOptimizer = "adamw";
  e.defaultLr = 1e-3;
  e.rowSparseParameter = tokenEmbedding;
  return e;
}

GptConfig gptConfig(const ModelArgs& a) {
  GptConfig c;
  c.vocab = a.classes;
  c.context = a.context;
  c.layers = a.flags.integer("layers");
  c.heads = a.flags.integer("heads");
  c.embd = a.flags.integer("embd");
  c.compute = a.compute;
  c.fp32Residual = a.flags.text("residual") == "fp32";
  return c;
}

ModelEntry gptEntry() {
  ModelEntry e = decoderEntry("GPT-2-style decoder (LayerNorm, GELU MLP, learned positions) on byte or llm.c tokens",
                              "wte.weight");
  ModelFlag residual;
  residual.name = "residual";
  residual.kind = FlagKind::Text;
  residual.defaultValue = "compute";
  residual.help = "Residual stream under --dtype bf16: compute (bf16, as llm.c) or fp32 (as PyTorch autocast)";
  residual.choices = {"compute", "fp32"};
  residual.checkedOnResume = false;
  e.flags = {integerFlag("layers", "4", "Transformer blocks"), integerFlag("heads", "4", "Attention heads"),
             integerFlag("embd", "128", "Width"), contextFlag(), residual};
  e.make = [](const ModelArgs& a) { return std::make_unique<GPT>(gptConfig(a), a.seed); };
  e.refuse = [](const ModelArgs& a) -> std::string {
    const GptConfig c = gptConfig(a);
    std::ostringstream os;
    if (c.embd % c.heads != 0) {
      os << "GPT width --embd " << c.embd << " is not divisible by --heads " << c.heads;
    } else if (c.compute == DType::BF16 && !kernels::flashAttentionSupportsHeadDim(c.embd / c.heads)) {
      os << "GPT head dim " << c.embd / c.heads << " (--embd " << c.embd << " / --heads " << c.heads
         << ") has no bf16 attention kernel; choose --embd and --heads for a head dim of "
         << kernels::flashAttentionHeadDims() << ", or --dtype fp32";
    }
    return os.str();
  };
  // Parameters 2VC + TC + L (12 C^2 + 13 C) + 2C (untied lm head). Activations of B rows of T tokens:
  // L (32 BTC [+ 2 BHT^2 without flash attention]) + 8 BTC + 2 BTV. A block keeps about 22 BTC for backward
  // (ln_1, qkv, q/k/v, attention and projection outputs, ln_2, the 4C MLP pre- and post-GELU, residuals),
  // backward adds gradients in flight; the materialised attention keeps its (B, H, T, T) scores and backward
  // makes their gradient; the loss makes at most the (BT, V) logits and their gradient. (1.5x the CPU
  // fortunes GPT's measured RSS, 1.8x GPT-2 small's bf16 peak.)
  e.memory = [](const ModelArgs& a, int64_t batch) {
    const GptConfig c = gptConfig(a);
    const double B = asDouble(batch), T = asDouble(c.context), C = asDouble(c.embd);
    MemoryNeed need;
    need.parameters = 2 * c.vocab * c.embd + c.context * c.embd + c.layers * (12 * c.embd * c.embd + 13 * c.embd) +
                      2 * c.embd;
    const double scores = flashAttentionRuns(a, c.embd, c.heads) ? 0 : 2 * B * asDouble(c.heads) * T * T;
    need.activations = asDouble(c.layers) * (32 * B * T * C + scores) + 8 * B * T * C + 2 * B * T * asDouble(c.vocab);
    need.flagsToLower = {"--context", "--embd", "--layers"};
    return need;
  };
  e.flopsPerItem = [](const ModelArgs& a, const Model& m) {
    const GptConfig c = gptConfig(a);
    return transformerFlops(m, (c.vocab + c.context) * c.embd, c.layers, c.embd, c.context);
  };
  return e;
}

LlamaConfig llamaConfig(const ModelArgs& a) {
  LlamaConfig c;
  c.vocab = a.classes;
  c.context = a.context;
  c.layers = a.flags.integer("layers");
  c.heads = a.flags.integer("heads");
  c.kvHeads = a.flags.integer("kv-heads");
  c.embd = a.flags.integer("embd");
  c.hidden = a.flags.integer("hidden");
  c.ropeTheta = a.flags.number("rope-theta");
  c.normEps = a.flags.number("norm-eps");
  c.compute = a.compute;
  return c;
}

ModelEntry llamaEntry() {
  ModelEntry e = decoderEntry(
      "LLaMA-style decoder (RMSNorm, SwiGLU, rotary embeddings, grouped-query attention, no biases)",
      "model.embed_tokens.weight");
  e.flags = {integerFlag("layers", "4", "Transformer blocks"),
             integerFlag("heads", "4", "Query heads"),
             integerFlag("kv-heads", "2", "Key/value heads, dividing --heads (grouped-query attention)"),
             integerFlag("embd", "128", "Width"),
             integerFlag("hidden", "352", "SwiGLU hidden width (LLaMA: about 8/3 x --embd, rounded up)"),
             contextFlag(),
             numberFlag("rope-theta", "10000", "Rotary embedding base: pair i turns by t / theta^(2i/d)", 1, 1e12),
             numberFlag("norm-eps", "1e-5", "RMSNorm epsilon", 1e-12, 1)};
  e.make = [](const ModelArgs& a) { return std::make_unique<Llama>(llamaConfig(a), a.seed); };
  e.refuse = [](const ModelArgs& a) -> std::string {
    LlamaConfig c = llamaConfig(a);
    c.vocab = std::max<int64_t>(c.vocab, 1);  // no data read yet
    return llamaConfigProblem(c);
  };
  // Parameters 2VC + L (2 C^2 + 2 C Hkv d + 3 C F + 2 C) + C. Activations of B rows of T tokens, width C,
  // key/value width K = Hkv d, SwiGLU width F: L (24 BTC + 6 BTF [+ 2 BHT^2 without flash attention]) +
  // 8 BTC + 2 BTV. A block keeps about 16 BTC (two RMSNorms' normalised and scaled outputs, q, k, v before
  // and after the rotary and in the head layout or repeated and packed, attention, projection and residual
  // outputs) and 4 BTF (gate, SiLU, up, product); the materialised attention keeps its (B, H, T, T)
  // probabilities and backward makes the scores' gradient; backward adds the gradients in flight.
  e.memory = [](const ModelArgs& a, int64_t batch) {
    const LlamaConfig c = llamaConfig(a);
    const double B = asDouble(batch), T = asDouble(c.context), C = asDouble(c.embd), F = asDouble(c.hidden);
    const int64_t kv = c.heads > 0 ? c.kvHeads * (c.embd / c.heads) : 0;
    MemoryNeed need;
    need.parameters = 2 * c.vocab * c.embd +
                      c.layers * (2 * c.embd * c.embd + 2 * c.embd * kv + 3 * c.embd * c.hidden + 2 * c.embd) + c.embd;
    const double scores = flashAttentionRuns(a, c.embd, c.heads) ? 0 : 2 * B * asDouble(c.heads) * T * T;
    need.activations =
        asDouble(c.layers) * (24 * B * T * C + 6 * B * T * F + scores) + 8 * B * T * C + 2 * B * T * asDouble(c.vocab);
    need.flagsToLower = {"--context", "--embd", "--hidden", "--layers"};
    return need;
  };
  e.flopsPerItem = [](const ModelArgs& a, const Model& m) {
    const LlamaConfig c = llamaConfig(a);
    return transformerFlops(m, c.vocab * c.embd, c.layers, c.embd, c.context);
  };
  return e;
}

// ---- defaults of an entry's functions ----

EvalSums accuracyScore(const Model& model, const Tensor& inputs, const Tensor& targets) {
  const Variable logits = model.forward(inputs);
  const int64_t n = inputs.size(0);
  EvalSums sums;
  sums.loss = ops::crossEntropy(logits, targets).data().toDType(DType::F64).toVector<double>()[0] * asDouble(n);
  const std::vector<double> v = logits.data().toDType(DType::F64).toVector<double>();  // (n, classes)
  const std::vector<int32_t> labels = targets.toVector<int32_t>();
  const int64_t classes = static_cast<int64_t>(v.size()) / std::max<int64_t>(n, 1);
  for (int64_t i = 0; i < n; ++i) {
    const auto row = v.begin() + i * classes;
    sums.correct += (std::max_element(row, row + classes) - row) == labels[i];
  }
  sums.count = asDouble(n);
  return sums;
}

EvalSums meanLossScore(const Model& model, const Tensor& inputs, const Tensor& targets) {
  EvalSums sums;
  sums.loss = model.loss(inputs, targets).data().toDType(DType::F64).toVector<double>()[0];
  sums.count = 1;
  return sums;
}

Tensor lastRowLogits(const Model& model, const Tensor& window) {
  const std::vector<double> v = model.forward(window).data().toDType(DType::F64).toVector<double>();  // (t, V)
  const int64_t t = window.size(1), vocab = static_cast<int64_t>(v.size()) / std::max<int64_t>(t, 1);
  const std::vector<double> last(v.end() - vocab, v.end());
  return Tensor::fromVector(last, {vocab});
}

void completeEntry(const std::string& name, ModelEntry& e) {
  checkFlags("model " + name, e.flags);
  const ModelFlag* context = declared(e, "context");
  MINIDP_CHECK(e.data != DataKind::Tokens || (context && context->kind == FlagKind::Integer),
               "model " << name << " reads tokens: it must declare an Integer flag \"context\" (the window length)");
  if (!e.refuse) e.refuse = [](const ModelArgs&) { return std::string(); };
  if (!e.memory) {
    std::vector<std::string> sizes;
    for (const ModelFlag& f : e.flags) {
      if (f.kind == FlagKind::Integer || f.kind == FlagKind::Integers) sizes.push_back("--" + f.name);
    }
    auto make = e.make;
    e.memory = [make, sizes](const ModelArgs& a, int64_t) {
      MemoryNeed need;
      need.parameters = make(a)->numParameters();
      need.flagsToLower = sizes;
      return need;
    };
  }
  if (!e.flopsPerItem) e.flopsPerItem = [](const ModelArgs&, const Model& m) { return 6.0 * asDouble(m.numParameters()); };
  if (!e.score) e.score = e.evaluation == Evaluation::Accuracy ? accuracyScore : meanLossScore;
  if (!e.nextTokenLogits && e.data == DataKind::Tokens) e.nextTokenLogits = lastRowLogits;
}

struct Registry {
  std::mutex mutex;
  std::map<std::string, ModelEntry> entries;
};

// Built-ins are added on first use: no static initialisers a static library's linker could drop.
Registry& registry() {
  static Registry* r = [] {
    auto* fresh = new Registry;
    std::vector<std::pair<std::string, ModelEntry>> builtIns;
    builtIns.emplace_back("mlp", mlpEntry());
    builtIns.emplace_back("gpt", gptEntry());
    builtIns.emplace_back("llama", llamaEntry());
    for (auto& [name, entry] : builtIns) {
      completeEntry(name, entry);
      fresh->entries.emplace(name, std::move(entry));
    }
    return fresh;
  }();
  return *r;
}

}  // namespace

FlagValues flagValues(const std::string& model, const ModelEntry& entry, const FlagValues& given) {
  return minidp::flagValues("model " + model, entry.flags, given);
}

void registerModel(const std::string& name, ModelEntry entry) {
  MINIDP_CHECK(!name.empty() && entry.make, "registerModel: a model needs a name and a factory");
  completeEntry(name, entry);
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  r.entries[name] = std::move(entry);
}

const ModelEntry& findModel(const std::string& name) {
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  const auto it = r.entries.find(name);
  if (it == r.entries.end()) {
    std::ostringstream known;
    for (const auto& [n, e] : r.entries) known << " " << n;
    MINIDP_CHECK(false, "unknown model '" << name << "'; registered:" << known.str());
  }
  return it->second;
}

bool hasModel(const std::string& name) {
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  return r.entries.count(name) > 0;
}

std::vector<std::string> registeredModels() {
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  std::vector<std::string> names;
  for (const auto& [n, e] : r.entries) names.push_back(n);
  return names;
}

}  // namespace minidp::models
