/* cuda_fp16.h (test/gpu/emu): all in the emulation's cuda_runtime.h */
#include "cuda_runtime.h"
