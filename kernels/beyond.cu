// The translation unit of top-k's fused pass (kernel_beyond.cuh) alone, so
// that a first top-k compiles only what it needs.
#include "version.cuh"
#include "kernel_beyond.cuh"
