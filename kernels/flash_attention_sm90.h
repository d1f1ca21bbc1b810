// Hopper-native (sm_90a) flash attention forward, bf16: the tiles of q, k and v copied by the tensor
// memory accelerator (TMA) into a two-stage shared-memory ring guarded by mbarriers, one producer warp
// issuing the copies and two consumer warpgroups (64 query rows each) multiplying with wgmma (S = q k^T with
// both operands in shared memory, O += P v with P from registers) and keeping the online softmax in
// registers. Same inputs and outputs as flashAttentionForward<bf16> (kernels/flash_attention.h): y (B, T,
// H d) bf16 and the natural-log logsumexp (B, H, T) of the scaled scores; causal or not; grouped-query heads;
// any sequence length (TMA zero-fills rows past the end; key columns >= T are masked).
//
// Head dims 64, 80, 96, 128 and 256: 80 and 96 run as 128, the copy engine filling the columns past d with
// zeros (their products add nothing, and the output columns past d are not stored).
//
// Built only for sm_90a (kernels/CMakeLists.txt compiles kernels/flash_attention_sm90.cu with
// -gencode=arch=compute_90a,code=sm_90a alone); on any other device hopperAttentionAvailable is false.
//
// Which kernels flashAttentionForward<bf16> and flashAttentionBackward<bf16> (causal) take is the process's
// AttentionMode (below): by default, on a device where hopperAttentionAvailable holds, this forward in the
// ping-pong schedule and, at head dims of 128 and more, the Hopper backward; the cp.async kernels of
// kernels/flash_attention.cu otherwise (other GPUs, operands the tensor maps cannot describe, and the
// backward at smaller head dims, where the two run at the same speed). The environment variable
// MINIDP_ATTENTION (read once) names another mode; tests and benches set one for a scope.
#pragma once

#include <cstdint>
#include <string>

#include "base/bf16.h"
#include "base/stream.h"
#include "kernels/attention_operands.h"

namespace minidp::kernels::cuda {

/// Head dims the Hopper kernel is built for: 64, 80, 96, 128, 256.
bool hopperAttentionSupportsHeadDim(int64_t d);

/// True where hopperAttentionForward can run head dim d on the current device: a compute capability 9.0
/// GPU whose driver loads the sm_90a kernel, and a supported head dim.
bool hopperAttentionAvailable(int64_t d);

/// hopperAttentionAvailable(d), and operands the tensor maps can describe: q, k, v 16-byte aligned, row
/// strides multiples of 16 bytes (8 elements), group dividing H, B <= 65535, H <= 65535.
bool hopperAttentionAvailable(int64_t d, const AttentionOperands<bf16>& in, int64_t B, int64_t H);

/// How a consumer warpgroup orders its work per key tile. Serial: s = q k^T, softmax, o += p v, each
/// product waited for. Overlapped (FlashAttention-3's intra-warpgroup overlap): the scores of tile j are
/// issued with o += p v of tile j - 1, and the softmax of tile j runs while the tensor cores do the latter.
/// PingPong: Overlapped, the two consumer warpgroups taking turns to issue their products (named barriers),
/// so that one's softmax runs under the other's products.
enum class HopperSchedule { Serial = 0, Overlapped = 1, PingPong = 2 };

/// y = softmax(q k^T / sqrt(d) [causal mask]) v for query head h reading key/value head h / in.group;
/// out (B, T, H d), lse (B, H, T) natural log. Requires hopperAttentionAvailable(d, in, B, H) (else an
/// error). out needs no alignment (two columns are stored at once where it is 4-byte aligned).
void hopperAttentionForward(AttentionOperands<bf16> in, bf16* out, float* lse, int64_t B, int64_t seqLen, int64_t H,
                            int64_t d, bool causal, cudaStream_t stream,
                            HopperSchedule schedule = HopperSchedule::Serial);

/// The attention kernels of flashAttentionForward<bf16> / flashAttentionBackward<bf16>, and MINIDP_ATTENTION's
/// names for them: Auto (unset or `auto`: the Hopper forward, ping-pong, and the Hopper backward at head dims
/// >= 128), CpAsync (`cp.async`: the cp.async kernels, the sm80 path), Serial / Overlapped / PingPong (`sm90`,
/// `sm90-overlap`, `sm90-pingpong`: that Hopper forward schedule, the cp.async backward), HopperBackward
/// (`sm90-bwd`: the serial Hopper forward and the Hopper backward at every head dim). Each Hopper kernel only
/// where it is available; the cp.async kernel otherwise.
enum class AttentionMode { Auto, CpAsync, Serial, Overlapped, PingPong, HopperBackward };

/// The mode `name` names (`auto`, `cp.async`, `sm90`, `sm90-overlap`, `sm90-pingpong`, `sm90-bwd`); another
/// name is an error "<source>=<name>: not an attention mode (<the names>)".
AttentionMode parseAttentionMode(const std::string& name, const std::string& source = "attention mode");
/// The name of `mode`, as parseAttentionMode takes it.
const char* attentionModeName(AttentionMode mode);
/// The mode in force: the one set last (setAttentionMode), else MINIDP_ATTENTION's (read once; another value
/// is parseAttentionMode's error).
AttentionMode attentionMode();
/// Sets the mode for the process from now on and returns the previous one (tests and benches: the cp.async
/// kernels as a reference beside the Hopper ones). Not for use while kernels are being launched on other threads.
AttentionMode setAttentionMode(AttentionMode mode);
/// setAttentionMode for a scope: the previous mode comes back at its end.
class ScopedAttentionMode {
 public:
  explicit ScopedAttentionMode(AttentionMode mode) : previous_(setAttentionMode(mode)) {}
  ~ScopedAttentionMode() { setAttentionMode(previous_); }
  ScopedAttentionMode(const ScopedAttentionMode&) = delete;
  ScopedAttentionMode& operator=(const ScopedAttentionMode&) = delete;

 private:
  AttentionMode previous_;
};

/// Whether the mode asks flashAttentionForward<bf16> for the Hopper forward, and in which schedule (written
/// to *schedule where given: Auto's is PingPong, HopperBackward's Serial).
bool hopperAttentionRequested(HopperSchedule* schedule = nullptr);

// ---- backward (kernels/flash_attention_sm90_backward.cu) ----

/// Head dims the Hopper backward is built for: 64, 80, 96, 128, 256 (80 and 96 run as 128).
bool hopperAttentionBackwardSupportsHeadDim(int64_t d);

/// hopperAttentionAvailable(d) and a head dim of hopperAttentionBackwardSupportsHeadDim: the device and head dim
/// alone (the operands are checked by the overload below).
bool hopperAttentionBackwardAvailable(int64_t d);
/// hopperAttentionAvailable(d, in, B, H) and a head dim of hopperAttentionBackwardSupportsHeadDim.
bool hopperAttentionBackwardAvailable(int64_t d, const AttentionOperands<bf16>& in, int64_t B, int64_t H);

/// The gradients of hopperAttentionForward (causal or not), with flashAttentionBackward<bf16>'s contract:
/// dout and out (B, T, H d), 16-byte aligned; lse (B, H, T) natural log; rowDot (B, H, T) scratch for
/// D = rowsum(dout * out); dq per query head, dk and dv per key/value head summed over its group's query heads,
/// every row < T fully written (no alignment needed), nothing else. Deterministic: a key pass (dk, dv in
/// registers over the group's heads and all query tiles) and a query pass (dq), no atomics. Requires
/// hopperAttentionBackwardAvailable(d, in, B, H) (else an error).
void hopperAttentionBackward(const bf16* dout, AttentionOperands<bf16> in, const bf16* out, const float* lse,
                             float* rowDot, AttentionGradients<bf16> grads, int64_t B, int64_t seqLen, int64_t H,
                             int64_t d, bool causal, cudaStream_t stream);

/// Whether the mode asks flashAttentionBackward<bf16> for the Hopper backward at head dim d: HopperBackward at
/// every head dim, Auto at d >= 128.
bool hopperAttentionBackwardRequested(int64_t d);

}  // namespace minidp::kernels::cuda
