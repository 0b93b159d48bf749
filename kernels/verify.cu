// The translation unit of gpusort/verification.py's kernel: only what it
// needs, so that a first gpusort.verify compiles in a fraction of a second.
#include "version.cuh"
#include "kernel_verify.cuh"
