// LayeredBackend: the CUDA backend with one kernel per op (src/gpu/ops/).
// The strong baseline the megakernel must beat, and the prefill engine.
//
// Precision: bf16 weights (f16 / f32 checkpoints are converted on upload),
// bf16 KV cache, bf16 activations into every matmul, fp32 accumulation, fp32
// residual stream, norm weights, biases, router input and logits.
//
// A step is split into sub-steps of at most max_step_tokens tokens and
// max_seqs sequences (a long prefill chunk runs as consecutive pieces). A
// decode step (every sequence one token, batch 1..8) replays a CUDA graph
// captured once per batch size: the graph reads its per-step metadata
// (tokens, positions, KV slots, block tables) from fixed device buffers that
// are refreshed by one host-to-device copy before each replay. Other steps
// run the same launch sequence eagerly.
#pragma once

#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "engine/backend.h"
#include "gpu/common/device_buffer.h"
#include "gpu/ops/elementwise.h"
#include "model/weights.h"

namespace ms::gpu {

struct MoePlan;  // gpu/ops/moe.h

enum class MoePrefillPath { kGrouped, kKernel };
// "grouped", "kernel": the MEGASERVE_MOE_PREFILL values.
inline const char* moe_prefill_name(MoePrefillPath p) {
  return p == MoePrefillPath::kGrouped ? "grouped" : "kernel";
}

struct LayeredBackendOptions {
  int block_size = 64;
  // KV cache budget in bytes (bf16 K and V, all layers); 0: 90% of the device
  // memory left after weights and activations.
  size_t kv_bytes = size_t(1) << 30;
  int max_context = 0;         // longest sequence (tokens); 0: min(max_position, 262144)
  int max_step_tokens = 2048;  // tokens per sub-step (sizes the activation buffers)
  int max_seqs = 64;           // sequences per sub-step
  bool use_graphs = true;      // capture decode steps in CUDA graphs
  // Parallel attention + FFN blocks (cohere2_moe): the FFN/MoE branch runs on
  // a second stream, forked after the block's input norm and joined before
  // the next one, so the two branches' kernels share the SMs (and, in a
  // captured graph, become two concurrent chains per layer). The environment
  // variable MEGASERVE_CONCURRENT_BRANCHES=0 turns it off (A/B benchmarks).
  bool concurrent_branches = true;
  // Prefill sub-steps (more than 8 tokens) of MoE layers: how the routed
  // experts run (MEGASERVE_MOE_PREFILL=grouped|kernel overrides).
  //   kGrouped: grouped tensor-core GEMMs over all routed experts, one launch
  //     per projection, reading the plan on the device (moe_mma.cu); NMC on
  //     the H200: ~170 TFLOP/s, 2K-token prompt in 66 ms;
  //   kKernel: the CUDA-core grouped expert kernels (weights read once per 8
  //     members; ~7 TFLOP/s on NMC), the independent check in the tests.
  // (A third path, one cuBLAS GEMM per routed expert after a host sync on the
  // plan, measured 2.3x slower than kGrouped at 2K tokens and was removed.)
  MoePrefillPath moe_prefill = MoePrefillPath::kGrouped;
};

class LayeredBackend final : public Backend {
 public:
  // Uploads a checkpoint's weights (converted to bf16).
  static Result<std::unique_ptr<LayeredBackend>> create(const ModelConfig& cfg, const ModelWeights& w,
                                                        const LayeredBackendOptions& opt);
  // Random bf16 weights of the full shape generated on the device (no host
  // copy): matrices U(-a, a) with std 0.02, norm weights 1.
  static Result<std::unique_ptr<LayeredBackend>> create_random(const ModelConfig& cfg, uint64_t seed,
                                                               const LayeredBackendOptions& opt);
  ~LayeredBackend() override;

  const char* name() const override { return "layered"; }
  const ModelConfig& config() const override { return cfg_; }
  const KvSpec& kv_spec() const override { return kv_; }
  Status step(const std::vector<SeqWork>& batch, StepResult* out) override;
  // Device sampling (layered_sampling.cpp): the forward of step(), then the
  // sampler kernel (gpu/ops/sampling.h) on the logits rows left on the
  // device; only tokens and logprobs are copied back.
  bool supports_sampling() const override;
  Status step_sample(const std::vector<SeqWork>& batch, const std::vector<const SampleSpec*>& specs,
                     std::vector<SampleResult>* out) override;

  // Decode step with greedy sampling on the device: only token ids and their
  // log-probabilities come back. Every SeqWork must hold one token; batch <= 8.
  Status decode_greedy(const std::vector<SeqWork>& batch, std::vector<int32_t>* tokens,
                       std::vector<float>* logprobs);
  // Benchmark hook: enqueues the metadata upload and the decode graph (with
  // greedy sampling) on stream() and returns without synchronising.
  Status enqueue_decode(const std::vector<SeqWork>& batch);
  cudaStream_t stream() const { return stream_; }
  // Fills the whole KV cache with random bf16 values (benchmark contexts).
  Status fill_kv_random(uint64_t seed);
  // Distinct experts routed per layer in the last step (0 for dense layers).
  Status routed_experts_per_layer(std::vector<int>* out);
  // Debug: expert ids (top_k per token row, best first) chosen at layer
  // `layer` in the last sub-step (rows in batch order, then position order;
  // a decode step is one sub-step); empty for dense layers.
  Status last_routing(int layer, std::vector<int32_t>* ids);
  // Debug / perf: one step (a decode step, or a prefill of at most
  // max_step_tokens tokens in one sub-step) captured with a timed event after every op
  // (event-record graph nodes) and replayed twice; returns microseconds per
  // op name summed over layers, in first-seen order (the gaps between
  // kernels are charged to the op that follows them).
  Status profile_step(const std::vector<SeqWork>& batch, std::vector<std::pair<std::string, double>>* us_by_op);
  size_t weight_bytes() const { return weight_bytes_; }
  const LayeredBackendOptions& options() const { return opt_; }
  size_t kv_bytes() const { return kv_pool_.bytes(); }

 private:
  struct Layer {
    DeviceBuffer<uint16_t> qkv_w;   // (qw + 2 kvw, H) bf16
    DeviceBuffer<float> qkv_b;      // (qw + 2 kvw) fp32, attention_bias only
    DeviceBuffer<uint16_t> o_w;     // (H, qw) bf16
    DeviceBuffer<float> o_b;        // (H)
    DeviceBuffer<float> attn_norm, ffn_norm;  // (H)
    DeviceBuffer<float> q_norm, k_norm;       // (hd)
    DeviceBuffer<uint16_t> gate_up; // dense (2F, H) bf16: gate rows then up rows
    DeviceBuffer<uint16_t> down;    // dense (H, F)
    DeviceBuffer<uint16_t> router;  // (E, H)
    DeviceBuffer<float> router_f32; // (E, H): the same values widened, for the prefill router GEMM
    DeviceBuffer<uint16_t> experts_gate_up;  // (E, 2I, H)
    DeviceBuffer<uint16_t> experts_down;     // (E, H, I)
    DeviceBuffer<uint16_t> shared_gate_up;   // (2S, H)
    DeviceBuffer<uint16_t> shared_down;      // (H, S)
    size_t k_off = 0, v_off = 0;             // element offsets into kv_pool_
  };
  // One contiguous piece of a sequence's tokens run in a sub-step.
  struct Piece {
    int batch_index = 0;
    int32_t start_pos = 0;
    int first_token = 0, n_tokens = 0;
    bool need_logits = false;
  };
  // Host-side view of one sub-step's metadata, sizes only.
  struct StepShape {
    int T = 0;         // token rows
    int n_seq = 0;     // pieces
    int n_logits = 0;  // logits rows
    int n_tiles = 0;   // attention query tiles
    int rows_per_tile = 1;
    int splits = 1;
    int table_width = 0;  // block-table entries per (sequence, group) row this step
    bool decode = false;
  };

  LayeredBackend() = default;
  Status init_common(const ModelConfig& cfg, const LayeredBackendOptions& opt);
  Status alloc_weights();
  Status upload_weights(const ModelWeights& w);
  Status random_weights(uint64_t seed);
  Status alloc_runtime();
  Status stage_metadata(const std::vector<SeqWork>& batch, const std::vector<Piece>& pieces, bool decode,
                        StepShape* shape);
  Status forward(const StepShape& s);
  // MoE layers with `deferred`: the combine is left to the next add_norm
  // (*deferred set) and `out` is not written.
  // Launches on `st` (cuBLAS calls through `blas`, bound to st by launch_linear).
  Status ffn(int li, int T, float* out, MoeSum* deferred, cudaStream_t st, cublasHandle_t blas);
  // The routed experts of one MoE layer's prefill sub-step as GEMMs (moe_y_).
  Status run_decode_graph(const StepShape& s);
  Status run_pieces(const std::vector<SeqWork>& batch, const std::vector<Piece>& pieces, StepResult* out);
  bool is_decode_batch(const std::vector<SeqWork>& batch) const;
  // Packs the batch's tokens into sub-steps of <= max_step_tokens tokens and
  // <= max_seqs pieces (a long prompt runs as consecutive pieces) and calls
  // run on each, in order.
  Status for_each_substep(const std::vector<SeqWork>& batch,
                          const std::function<Status(const std::vector<Piece>&)>& run) const;

  ModelConfig cfg_;
  LayeredBackendOptions opt_;
  KvSpec kv_;
  int max_blocks_ = 0;   // block-table width per sequence
  int sm_count_ = 0;
  int ws_rowsplits_ = 0; // attention workspace capacity, rows * splits
  int last_T_ = 0;       // token rows of the last forward() (last_routing)
  size_t weight_bytes_ = 0;

  cudaStream_t stream_ = nullptr;
  cublasHandle_t cublas_ = nullptr;
  // Second branch of parallel blocks (opt_.concurrent_branches): its own
  // stream and cuBLAS handle (a handle's workspace must not be shared by two
  // GEMMs running at once), forked from / joined to stream_ by the events.
  cudaStream_t aux_stream_ = nullptr;
  cublasHandle_t cublas_aux_ = nullptr;
  cudaEvent_t fork_ev_ = nullptr, join_ev_ = nullptr;

  DeviceBuffer<uint16_t> embed_;     // (V, H) bf16
  DeviceBuffer<uint16_t> lm_head_;   // (V, H) bf16, empty when tied to embed_
  DeviceBuffer<float> final_norm_;   // (H)
  DeviceBuffer<float> inv_freq_;     // (hd / 2)
  std::vector<Layer> layers_;
  DeviceBuffer<uint16_t> kv_pool_;   // all layers' K and V caches, bf16

  // Activations, Tm = max_step_tokens rows.
  DeviceBuffer<float> x_;            // (Tm, H) residual stream
  DeviceBuffer<uint16_t> h_;         // (Tm, H) normed, bf16
  DeviceBuffer<float> hf_;           // (Tm, H) normed, fp32 (router input)
  DeviceBuffer<float> qkv_;          // (Tm, qw + 2 kvw)
  DeviceBuffer<uint16_t> attn_o_;    // (Tm, qw) bf16
  DeviceBuffer<float> attn_out_;     // (Tm, H)
  DeviceBuffer<float> mlp_out_;      // (Tm, H)
  DeviceBuffer<float> gu_;           // (Tm, 2 Fmax)
  DeviceBuffer<uint16_t> act_;       // (Tm, Fmax) bf16
  DeviceBuffer<float> shared_out_;   // (Tm, H)
  DeviceBuffer<float> router_logits_;  // (Tm, E)
  DeviceBuffer<int32_t> topk_ids_;   // (n_layers, Tm * K): per-layer slices, kept for last_routing()
  DeviceBuffer<float> topk_w_;       // (Tm * K)
  DeviceBuffer<uint16_t> moe_act_;   // (Tm * K, I) bf16
  DeviceBuffer<float> moe_y_;        // (Tm * K, H)
  DeviceBuffer<int32_t> plan_buf_;   // n_active (1), active, offset, count (E each), members (Tm * K)
  DeviceBuffer<int32_t> stat_active_;  // (n_layers)
  DeviceBuffer<float> part_o_;       // (ws_rowsplits, nh, hd)
  DeviceBuffer<float> part_lse_;     // (ws_rowsplits, nh)
  DeviceBuffer<uint16_t> last_h_;    // (max_seqs, H) bf16
  DeviceBuffer<float> logits_;       // (max_seqs, V)
  DeviceBuffer<int32_t> tokens_out_; // (max_seqs)
  DeviceBuffer<float> logprobs_out_; // (max_seqs)

  // Metadata: one int32 array, the same layout on the host (pinned) and the
  // device; offsets in elements.
  struct MetaLayout {
    size_t tokens, pos, row_seq, tiles, logit_rows, slots, tables, total;
  } meta_{};
  PinnedBuffer<int32_t> meta_host_;
  cudaEvent_t meta_copied_ = nullptr;  // the last metadata copy has read meta_host_
  DeviceBuffer<int32_t> meta_dev_;

  // profile_step: when set, forward() records a timed event after each op.
  struct ProfMark {
    const char* op;
    cudaEvent_t ev;
  };
  std::vector<ProfMark>* prof_ = nullptr;
  std::vector<cudaEvent_t> prof_pool_;  // created before capture; mark() takes the next one
  Status mark(const char* op);

  // Decode graphs by (batch size, block-table row stride).
  std::map<std::pair<int, int>, cudaGraphExec_t> graphs_;

  // Device sampling (layered_sampling.cpp): buffers created on first use.
  struct SamplingState;
  struct SamplingStateDeleter {
    void operator()(SamplingState* s) const;
  };
  std::unique_ptr<SamplingState, SamplingStateDeleter> sampling_;
  // Samples logits_ row r for batch entry batch_of_row[r] (-1: skip).
  Status sample_rows(const std::vector<const SampleSpec*>& specs, const std::vector<int>& batch_of_row,
                     std::vector<SampleResult>* out);
};

}  // namespace ms::gpu
