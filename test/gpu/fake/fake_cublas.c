/*
 * fake_cublas.c - the five cuBLAS functions the CUDA backend uses, on the
 * CPU (test/gpu/fake/fake_cuda.c says why).  Only what the backend calls:
 * GemmEx with op(A) = A^T, op(B) = B, F16 inputs, F32 output, F32 compute.
 * Built as a shared library; the backend loads it through OPUS_CUBLAS_LIB.
 */
#include <stdlib.h>
#include <string.h>

#include <cublas_v2.h>

#include "opus_dequant.h"

cublasStatus_t
cublasCreate_v2(cublasHandle_t *h)
{
	*h = (cublasHandle_t) malloc(16);
	return *h ? CUBLAS_STATUS_SUCCESS : CUBLAS_STATUS_ALLOC_FAILED;
}

cublasStatus_t
cublasDestroy_v2(cublasHandle_t h)
{
	free(h);
	return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t
cublasSetStream_v2(cublasHandle_t h, cudaStream_t s)
{
	return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t
cublasSetWorkspace_v2(cublasHandle_t h, void *ws, size_t n)
{
	return CUBLAS_STATUS_SUCCESS;
}

const char *
cublasGetStatusString(cublasStatus_t s)
{
	return s == CUBLAS_STATUS_SUCCESS ? "CUBLAS_STATUS_SUCCESS" : "fake cublas error";
}

cublasStatus_t
cublasGemmEx(cublasHandle_t handle, cublasOperation_t transa, cublasOperation_t transb,
			 int m, int n, int k, const void *alpha, const void *A, cudaDataType Atype,
			 int lda, const void *B, cudaDataType Btype, int ldb, const void *beta, void *C,
			 cudaDataType Ctype, int ldc, cublasComputeType_t computeType, cublasGemmAlgo_t algo)
{
	const uint16_t *a = A;
	const uint16_t *b = B;
	float	   *c = C;
	float		al = *(const float *) alpha,
				be = *(const float *) beta;

	if (transa != CUBLAS_OP_T || transb != CUBLAS_OP_N || Atype != CUDA_R_16F ||
		Btype != CUDA_R_16F || Ctype != CUDA_R_32F || computeType != CUBLAS_COMPUTE_32F ||
		lda < k || ldb < k || ldc < m)
		return CUBLAS_STATUS_NOT_SUPPORTED;
	for (int j = 0; j < n; j++)
		for (int i = 0; i < m; i++)
		{
			float		s = 0;

			for (int kk = 0; kk < k; kk++)
				s += opus_dq_h2f(a[kk + (size_t) i * lda]) * opus_dq_h2f(b[kk + (size_t) j * ldb]);
			c[i + (size_t) j * ldc] = al * s + (be != 0 ? be * c[i + (size_t) j * ldc] : 0);
		}
	return CUBLAS_STATUS_SUCCESS;
}
