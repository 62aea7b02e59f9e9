// LayeredBackend::step_sample: the forward of step() (the decode graph, or
// eager sub-steps for prefill and mixed batches), then the device sampler
// (gpu/ops/sampling.h) on the logits rows where they lie, so a step copies
// back tokens and logprobs (176 bytes a row) instead of vocab_size floats.
// Eager sub-steps reuse the logits buffer, so each one samples its own rows
// before the next runs. Grammar-constrained rows upload their allowed-token
// masks (V/32 words each, only those rows) with the row parameters.
#include <algorithm>

#include "gpu/common/cuda_check.h"
#include "gpu/layered_backend.h"
#include "gpu/ops/sampling.h"

namespace ms::gpu {

struct LayeredBackend::SamplingState {
  DeviceBuffer<float> scratch;               // (rows, V) penalised, scaled rows
  DeviceBuffer<SampleRowParams> rows;        // (rows)
  DeviceBuffer<SamplePenalty> penalties;     // (entries)
  DeviceBuffer<SampleRowOut> out;            // (rows)
  PinnedBuffer<SampleRowParams> rows_host;   // (rows)
  PinnedBuffer<SampleRowOut> out_host;       // (rows)
  std::vector<SamplePenalty> penalties_host;
  DeviceBuffer<uint32_t> masks;              // (constrained rows, V/32) allowed-token bitmaps
  PinnedBuffer<uint32_t> masks_host;         // (constrained rows, V/32)
};

void LayeredBackend::SamplingStateDeleter::operator()(SamplingState* s) const { delete s; }

bool LayeredBackend::supports_sampling() const { return cfg_.vocab_size <= kMaxSampleVocab; }

Status LayeredBackend::sample_rows(const std::vector<const SampleSpec*>& specs, const std::vector<int>& batch_of_row,
                                   std::vector<SampleResult>* out) {
  SamplingState& st = *sampling_;
  const int V = cfg_.vocab_size;
  const size_t cap = batch_of_row.size();
  if (st.rows_host.size() < cap) MS_RETURN_IF_ERROR(st.rows_host.alloc(cap));
  if (st.out_host.size() < cap) MS_RETURN_IF_ERROR(st.out_host.alloc(cap));
  st.penalties_host.clear();
  const int words = sample_mask_words(V);
  size_t n_masks = 0;
  for (int b : batch_of_row) n_masks += b >= 0 && specs[b] && !specs[b]->allowed.empty();
  if (n_masks > 0 && st.masks_host.size() < n_masks * words) MS_RETURN_IF_ERROR(st.masks_host.alloc(n_masks * words));
  n_masks = 0;
  std::vector<int> which;  // batch index of each sampled row
  for (size_t row = 0; row < batch_of_row.size(); ++row) {
    const int b = batch_of_row[row];
    if (b < 0 || !specs[b]) continue;
    const SampleSpec& s = *specs[b];
    SampleRowParams* packed = st.rows_host.get() + which.size();
    pack_sample_row(s.params, s.prompt, s.output, s.seed, static_cast<int>(row), V, packed, &st.penalties_host);
    if (!s.allowed.empty()) {
      uint32_t* dst = st.masks_host.get() + n_masks * words;
      const size_t n = std::min<size_t>(words, s.allowed.size());
      std::copy(s.allowed.begin(), s.allowed.begin() + n, dst);
      std::fill(dst + n, dst + words, 0u);
      packed->mask_row = static_cast<int32_t>(n_masks++);
    }
    which.push_back(b);
  }
  const int R = static_cast<int>(which.size());
  if (R == 0) return Status::ok();
  if (st.scratch.size() < size_t(R) * V) MS_RETURN_IF_ERROR(st.scratch.alloc(size_t(R) * V));
  if (st.rows.size() < size_t(R)) MS_RETURN_IF_ERROR(st.rows.alloc(R));
  if (st.out.size() < size_t(R)) MS_RETURN_IF_ERROR(st.out.alloc(R));
  const size_t n_pen = std::max<size_t>(st.penalties_host.size(), 1);
  if (st.penalties.size() < n_pen) MS_RETURN_IF_ERROR(st.penalties.alloc(n_pen));
  MS_CUDA_RETURN(cudaMemcpyAsync(st.rows.get(), st.rows_host.get(), size_t(R) * sizeof(SampleRowParams),
                                 cudaMemcpyHostToDevice, stream_));
  if (!st.penalties_host.empty())
    MS_CUDA_RETURN(cudaMemcpyAsync(st.penalties.get(), st.penalties_host.data(),
                                   st.penalties_host.size() * sizeof(SamplePenalty), cudaMemcpyHostToDevice, stream_));
  if (n_masks > 0) {
    if (st.masks.size() < n_masks * words) MS_RETURN_IF_ERROR(st.masks.alloc(n_masks * words));
    MS_CUDA_RETURN(cudaMemcpyAsync(st.masks.get(), st.masks_host.get(), n_masks * words * sizeof(uint32_t),
                                   cudaMemcpyHostToDevice, stream_));
  }
  MS_RETURN_IF_ERROR(launch_sample(logits_.get(), V, st.rows.get(), R, st.penalties.get(),
                                   n_masks > 0 ? st.masks.get() : nullptr, st.scratch.get(), st.out.get(), stream_));
  MS_CUDA_RETURN(cudaMemcpyAsync(st.out_host.get(), st.out.get(), size_t(R) * sizeof(SampleRowOut),
                                 cudaMemcpyDeviceToHost, stream_));
  MS_CUDA_RETURN(cudaStreamSynchronize(stream_));
  for (int r = 0; r < R; ++r) (*out)[which[r]] = to_sample_result(st.out_host.get()[r], specs[which[r]]->params.logprobs);
  return Status::ok();
}

Status LayeredBackend::step_sample(const std::vector<SeqWork>& batch, const std::vector<const SampleSpec*>& specs,
                                   std::vector<SampleResult>* out) {
  MS_RETURN_IF_ERROR(validate_batch(kv_, cfg_, batch));
  if (specs.size() != batch.size())
    return invalid_argument("step_sample: " + std::to_string(specs.size()) + " specs for " +
                            std::to_string(batch.size()) + " sequences");
  for (size_t i = 0; i < batch.size(); ++i)
    if (specs[i] && !batch[i].need_logits)
      return invalid_argument("step_sample: sequence " + std::to_string(batch[i].seq_id) +
                              " has a sampling spec but need_logits is false");
  if (!sampling_) sampling_.reset(new SamplingState());
  out->assign(batch.size(), SampleResult{});
  if (is_decode_batch(batch)) {  // the decode graph: logits row i is batch entry i
    std::vector<Piece> pieces;
    std::vector<int> batch_of_row;
    for (size_t i = 0; i < batch.size(); ++i) {
      pieces.push_back({static_cast<int>(i), batch[i].start_pos, 0, 1, batch[i].need_logits});
      batch_of_row.push_back(static_cast<int>(i));
    }
    StepShape s;
    MS_RETURN_IF_ERROR(stage_metadata(batch, pieces, true, &s));
    MS_RETURN_IF_ERROR(run_decode_graph(s));
    return sample_rows(specs, batch_of_row, out);
  }
  // Eager: the same sub-steps as step(); each sub-step's logits
  // rows (pieces with need_logits, in order) are sampled before the next.
  auto run = [&](const std::vector<Piece>& pieces) -> Status {
    StepShape s;
    MS_RETURN_IF_ERROR(stage_metadata(batch, pieces, false, &s));
    MS_RETURN_IF_ERROR(forward(s));
    std::vector<int> batch_of_row;
    for (const Piece& p : pieces)
      if (p.need_logits) batch_of_row.push_back(p.batch_index);
    return sample_rows(specs, batch_of_row, out);
  };
  return for_each_substep(batch, run);
}

}  // namespace ms::gpu
