#include "gpu/device_sampler.h"

#include <algorithm>

#include "gpu/common/cuda_check.h"

namespace ms::gpu {

Status DeviceSampler::sample(const float* logits, const std::vector<int>& batch_of_row,
                             const std::vector<const SampleSpec*>& specs, cudaStream_t stream,
                             std::vector<SampleResult>* out) {
  const int V = vocab_;
  const size_t cap = batch_of_row.size();
  if (rows_host_.size() < cap) MS_RETURN_IF_ERROR(rows_host_.alloc(cap));
  if (out_host_.size() < cap) MS_RETURN_IF_ERROR(out_host_.alloc(cap));
  penalties_host_.clear();
  const int words = sample_mask_words(V);
  size_t n_masks = 0;
  for (int b : batch_of_row) n_masks += b >= 0 && specs[b] && !specs[b]->allowed.empty();
  if (n_masks > 0 && masks_host_.size() < n_masks * words) MS_RETURN_IF_ERROR(masks_host_.alloc(n_masks * words));
  n_masks = 0;
  std::vector<int> which;  // batch index of each sampled row
  for (size_t row = 0; row < batch_of_row.size(); ++row) {
    const int b = batch_of_row[row];
    if (b < 0 || !specs[b]) continue;
    const SampleSpec& s = *specs[b];
    SampleRowParams* packed = rows_host_.get() + which.size();
    pack_sample_row(s.params, s.prompt, s.output, s.seed, static_cast<int>(row), V, packed, &penalties_host_);
    if (!s.allowed.empty()) {
      uint32_t* dst = masks_host_.get() + n_masks * words;
      const size_t n = std::min<size_t>(words, s.allowed.size());
      std::copy(s.allowed.begin(), s.allowed.begin() + n, dst);
      std::fill(dst + n, dst + words, 0u);
      packed->mask_row = static_cast<int32_t>(n_masks++);
    }
    which.push_back(b);
  }
  const int R = static_cast<int>(which.size());
  if (R == 0) return Status::ok();
  if (scratch_.size() < size_t(R) * V) MS_RETURN_IF_ERROR(scratch_.alloc(size_t(R) * V));
  if (rows_.size() < size_t(R)) MS_RETURN_IF_ERROR(rows_.alloc(R));
  if (out_.size() < size_t(R)) MS_RETURN_IF_ERROR(out_.alloc(R));
  const size_t n_pen = std::max<size_t>(penalties_host_.size(), 1);
  if (penalties_.size() < n_pen) MS_RETURN_IF_ERROR(penalties_.alloc(n_pen));
  MS_CUDA_RETURN(cudaMemcpyAsync(rows_.get(), rows_host_.get(), size_t(R) * sizeof(SampleRowParams),
                                 cudaMemcpyHostToDevice, stream));
  if (!penalties_host_.empty())
    MS_CUDA_RETURN(cudaMemcpyAsync(penalties_.get(), penalties_host_.data(),
                                   penalties_host_.size() * sizeof(SamplePenalty), cudaMemcpyHostToDevice, stream));
  if (n_masks > 0) {
    if (masks_.size() < n_masks * words) MS_RETURN_IF_ERROR(masks_.alloc(n_masks * words));
    MS_CUDA_RETURN(cudaMemcpyAsync(masks_.get(), masks_host_.get(), n_masks * words * sizeof(uint32_t),
                                   cudaMemcpyHostToDevice, stream));
  }
  MS_RETURN_IF_ERROR(launch_sample(logits, V, rows_.get(), R, penalties_.get(), n_masks > 0 ? masks_.get() : nullptr,
                                   scratch_.get(), out_.get(), stream));
  MS_CUDA_RETURN(cudaMemcpyAsync(out_host_.get(), out_.get(), size_t(R) * sizeof(SampleRowOut), cudaMemcpyDeviceToHost,
                                 stream));
  MS_CUDA_RETURN(cudaStreamSynchronize(stream));
  for (int r = 0; r < R; ++r) (*out)[which[r]] = to_sample_result(out_host_.get()[r], specs[which[r]]->params.logprobs);
  return Status::ok();
}

Status check_sample_specs(const std::vector<SeqWork>& batch, const std::vector<const SampleSpec*>& specs) {
  if (specs.size() != batch.size())
    return invalid_argument("step_sample: " + std::to_string(specs.size()) + " specs for " +
                            std::to_string(batch.size()) + " sequences");
  for (size_t i = 0; i < batch.size(); ++i)
    if (specs[i] && !batch[i].need_logits)
      return invalid_argument("step_sample: sequence " + std::to_string(batch[i].seq_id) +
                              " has a sampling spec but need_logits is false");
  return Status::ok();
}

}  // namespace ms::gpu
