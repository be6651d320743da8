/*
 * common.cuh - what every kernel file includes: the CUDA headers, the shared
 * dequantizer (opus_dequant.h), the launcher declarations, and the switch
 * that turns a run-time weight type into a kernel template instance.
 */
#ifndef OPUS_KERNELS_COMMON_CUH
#define OPUS_KERNELS_COMMON_CUH

#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <math.h>
#include <stdint.h>

#include "opus_dequant.h"
#include "opus_kernels.h"

/* Blocks of `per` threads covering n items. */
static inline unsigned int
opus_k_grid(int64_t n, int per)
{
	return (unsigned int) ((n + per - 1) / per);
}

/* The largest grid.y / grid.z (kernels loop when there are more rows). */
#define OPUS_K_GRID_YZ_MAX 65535

/*
 * Call f.template operator()<T>() for the weight type T named by `type`;
 * returns cudaErrorInvalidValue for a type the dequantizer lacks.
 */
template <typename F>
static cudaError_t
opus_k_dispatch_type(int type, F f)
{
	switch (type)
	{
		case OPUS_DQ_F32:
			f.template operator() <OPUS_DQ_F32> ();
			break;
		case OPUS_DQ_F16:
			f.template operator() <OPUS_DQ_F16> ();
			break;
		case OPUS_DQ_BF16:
			f.template operator() <OPUS_DQ_BF16> ();
			break;
		case OPUS_DQ_Q4_0:
			f.template operator() <OPUS_DQ_Q4_0> ();
			break;
		case OPUS_DQ_Q4_1:
			f.template operator() <OPUS_DQ_Q4_1> ();
			break;
		case OPUS_DQ_Q5_0:
			f.template operator() <OPUS_DQ_Q5_0> ();
			break;
		case OPUS_DQ_Q5_1:
			f.template operator() <OPUS_DQ_Q5_1> ();
			break;
		case OPUS_DQ_Q8_0:
			f.template operator() <OPUS_DQ_Q8_0> ();
			break;
		case OPUS_DQ_Q4_K:
			f.template operator() <OPUS_DQ_Q4_K> ();
			break;
		case OPUS_DQ_Q5_K:
			f.template operator() <OPUS_DQ_Q5_K> ();
			break;
		case OPUS_DQ_Q6_K:
			f.template operator() <OPUS_DQ_Q6_K> ();
			break;
		default:
			return cudaErrorInvalidValue;
	}
	return cudaGetLastError();
}

#endif							/* OPUS_KERNELS_COMMON_CUH */
