// LayeredExecutor: runs forward steps with one kernel per op (src/gpu/ops/)
// on a borrowed DeviceModel. The prefill engine, and the decode path wherever
// the megakernel does not run (and its baseline).
//
// Precision: bf16 weights and KV cache (the device model), bf16 activations
// into every matmul, fp32 accumulation, fp32 residual stream, norm weights,
// biases, router input and logits.
//
// A step is split into sub-steps of at most max_step_tokens tokens and
// max_seqs sequences (a long prefill chunk runs as consecutive pieces). A
// decode step (every sequence one token, batch 1..kMaxDecodeRows) replays a
// CUDA graph captured once per batch size: the graph reads its per-step
// metadata (tokens, positions, KV slots, block tables) from fixed device
// buffers that are refreshed by one host-to-device copy before each replay.
// Other steps run the same launch sequence eagerly.
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
#include "gpu/device_model.h"
#include "gpu/ops/elementwise.h"

namespace ms::gpu {

struct MoePlan;  // gpu/ops/moe.h

enum class MoePrefillPath { kGrouped, kKernel };
// "grouped", "kernel": the MEGASERVE_MOE_PREFILL values.
inline const char* moe_prefill_name(MoePrefillPath p) {
  return p == MoePrefillPath::kGrouped ? "grouped" : "kernel";
}

struct LayeredOptions {
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

// Decode rows one captured decode graph takes.
constexpr int kMaxDecodeRows = 8;

class LayeredExecutor {
 public:
  // Model shapes the layered kernels do not take, named (before any upload).
  static Status check_supported(const ModelConfig& cfg);
  // Allocates the activations and metadata for `model` (whose KV pool may
  // be allocated afterwards: the executor reads its layout at each step).
  static Result<std::unique_ptr<LayeredExecutor>> create(DeviceModel& model, const LayeredOptions& opt);
  ~LayeredExecutor();

  // Called with the device logits (rows x vocab fp32) after each forward
  // pass; batch_of_row[r] is the batch entry of logits row r.
  using LogitsFn = std::function<Status(const float* logits, const std::vector<int>& batch_of_row)>;
  // Runs the batch (decode graph or eager sub-steps) and hands each
  // sub-step's logits rows to `on_logits` before the next sub-step reuses
  // the buffer.
  Status forward(const std::vector<SeqWork>& batch, const LogitsFn& on_logits);
  // forward() with every logits row copied to the host.
  Status step(const std::vector<SeqWork>& batch, StepResult* out);
  bool is_decode_batch(const std::vector<SeqWork>& batch) const;

  // Decode step with greedy sampling on the device: only token ids and their
  // log-probabilities come back. Every SeqWork must hold one token; batch <=
  // kMaxDecodeRows.
  Status decode_greedy(const std::vector<SeqWork>& batch, std::vector<int32_t>* tokens,
                       std::vector<float>* logprobs);
  // Benchmark hook: enqueues the metadata upload and the decode graph (with
  // greedy sampling) on stream() and returns without synchronising.
  Status enqueue_decode(const std::vector<SeqWork>& batch);
  cudaStream_t stream() const { return stream_; }
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
  const LayeredOptions& options() const { return opt_; }
  int max_blocks() const { return max_blocks_; }

 private:
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

  explicit LayeredExecutor(DeviceModel& model) : model_(model), cfg_(model.config()) {}
  Status init_common(const LayeredOptions& opt);
  Status alloc_runtime();
  Status stage_metadata(const std::vector<SeqWork>& batch, const std::vector<Piece>& pieces, bool decode,
                        StepShape* shape);
  Status run_forward(const StepShape& s);
  // MoE layers with `deferred`: the combine is left to the next add_norm
  // (*deferred set) and `out` is not written.
  // Launches on `st` (cuBLAS calls through `blas`, bound to st by launch_linear).
  Status ffn(int li, int T, float* out, MoeSum* deferred, cudaStream_t st, cublasHandle_t blas);
  Status run_decode_graph(const StepShape& s);
  // Packs the batch's tokens into sub-steps of <= max_step_tokens tokens and
  // <= max_seqs pieces (a long prompt runs as consecutive pieces) and calls
  // run on each, in order.
  Status for_each_substep(const std::vector<SeqWork>& batch,
                          const std::function<Status(const std::vector<Piece>&)>& run) const;

  DeviceModel& model_;
  const ModelConfig& cfg_;
  LayeredOptions opt_;
  int max_blocks_ = 0;   // block-table width per sequence
  int sm_count_ = 0;
  int ws_rowsplits_ = 0; // attention workspace capacity, rows * splits
  int last_T_ = 0;       // token rows of the last forward (last_routing)

  cudaStream_t stream_ = nullptr;
  cublasHandle_t cublas_ = nullptr;
  // Second branch of parallel blocks (opt_.concurrent_branches): its own
  // stream and cuBLAS handle (a handle's workspace must not be shared by two
  // GEMMs running at once), forked from / joined to stream_ by the events.
  cudaStream_t aux_stream_ = nullptr;
  cublasHandle_t cublas_aux_ = nullptr;
  cudaEvent_t fork_ev_ = nullptr, join_ev_ = nullptr;

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

  // profile_step: when set, run_forward() records a timed event after each op.
  struct ProfMark {
    const char* op;
    cudaEvent_t ev;
  };
  std::vector<ProfMark>* prof_ = nullptr;
  std::vector<cudaEvent_t> prof_pool_;  // created before capture; mark() takes the next one
  Status mark(const char* op);

  // Decode graphs by (batch size, block-table row stride).
  std::map<std::pair<int, int>, cudaGraphExec_t> graphs_;
};

}  // namespace ms::gpu
