// CUDA / cuBLAS error checks that return ms::Status (never exit or abort: a
// device fault must fail the in-flight requests, not kill the server).
#pragma once

#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <string>

#include "core/status.h"

namespace ms::gpu {

inline Status cuda_status(cudaError_t e, const char* what, const char* file, int line) {
  if (e == cudaSuccess) return Status::ok();
  return internal_error(std::string("CUDA error ") + cudaGetErrorName(e) + " (" + cudaGetErrorString(e) + ") in " +
                        what + " at " + file + ":" + std::to_string(line));
}

inline Status cublas_status(cublasStatus_t e, const char* what, const char* file, int line) {
  if (e == CUBLAS_STATUS_SUCCESS) return Status::ok();
  return internal_error(std::string("cuBLAS error ") + cublasGetStatusName(e) + " in " + what + " at " + file + ":" +
                        std::to_string(line));
}

}  // namespace ms::gpu

// Returns a Status from the enclosing function when a CUDA call fails.
#define MS_CUDA_RETURN(expr) MS_RETURN_IF_ERROR(::ms::gpu::cuda_status((expr), #expr, __FILE__, __LINE__))
// After a kernel launch: checks the launch configuration error (not the
// asynchronous execution, which the next synchronising call reports).
#define MS_CUDA_LAUNCH_CHECK(name) MS_RETURN_IF_ERROR(::ms::gpu::cuda_status(cudaGetLastError(), name, __FILE__, __LINE__))
#define MS_CUBLAS_RETURN(expr) MS_RETURN_IF_ERROR(::ms::gpu::cublas_status((expr), #expr, __FILE__, __LINE__))
