// Version of the kernel sources.  gpusort/cuda/build.py puts it, together with
// a digest of every file in kernels/, into the source it hands to NVRTC, so
// CuPy's compile cache can never serve a module built from older headers;
// benchmarks record it next to their numbers.  Bump it when the kernels'
// behaviour or tuning changes.
#pragma once

#define GPUSORT_KERNELS_VERSION "2.7"
