/* emu_globals.cc (test/gpu/emu) - the emulated thread and block indices */
#include "cuda_runtime.h"
thread_local emu_idx threadIdx, blockIdx;
emu_idx blockDim, gridDim;
std::barrier<> *emu_block_barrier;
std::barrier<> *emu_warp_barrier[32];
float emu_shfl_buf[32][32];
