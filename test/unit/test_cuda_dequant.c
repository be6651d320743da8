/*
 * test_cuda_dequant.c - the CUDA kernels' dequantization code
 * (kernels/opus_dequant.h), compiled here as plain C, checked bit for bit
 * against the engine's reference dequantizers (quant_ref.c, to_float_ref).
 *
 * The header is the same source the device kernels compile, so this is the
 * CPU-side check of the GPU backend's weight decoding for every type it
 * supports: F32, F16, BF16, Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q4_K, Q5_K, Q6_K.
 * Rows come from three sources: the reference quantizer applied to random
 * floats (realistic blocks), random bytes with finite random scales, and
 * fully random bytes (NaN / inf / subnormal scales included); the results
 * must match bit for bit, NaN payloads too.  Also: the half-float decoder
 * on all 65536 inputs, and the type ids and block geometry against the
 * engine's type table.
 */
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "quant/qtype.h"
#include "unit.h"

#include "../../kernels/opus_dequant.h"

static uint64_t rng_state = 0x9e3779b97f4a7c15ULL;

static uint32_t
rng(void)
{
	rng_state ^= rng_state << 13;
	rng_state ^= rng_state >> 7;
	rng_state ^= rng_state << 17;
	return (uint32_t) (rng_state >> 16);
}

static float
frand(float lo, float hi)
{
	return lo + (hi - lo) * (float) (rng() & 0xffffff) / (float) 0x1000000;
}

/* Offsets of the f16 scale fields in a block, -1 terminated. */
static const int *
scale_offsets(int type)
{
	static const int q4_0[] = {0, -1};
	static const int q4_1[] = {0, 2, -1};
	static const int q6_k[] = {208, -1};
	static const int none[] = {-1};

	switch (type)
	{
		case OPUS_DQ_Q4_0:
		case OPUS_DQ_Q5_0:
		case OPUS_DQ_Q8_0:
			return q4_0;
		case OPUS_DQ_Q4_1:
		case OPUS_DQ_Q5_1:
		case OPUS_DQ_Q4_K:
		case OPUS_DQ_Q5_K:
			return q4_1;
		case OPUS_DQ_Q6_K:
			return q6_k;
		default:
			return none;
	}
}

/*
 * Fill a row: mode 0 quantizes random floats with the reference quantizer,
 * 1 random bytes with finite scales, 2 random bytes.  For the float types
 * mode 1 writes finite values and mode 2 any bits.
 */
static void
make_row(int type, const struct opus_qtype_info *qi, uint8_t *row, size_t bytes,
		 int64_t n, float *tmp, int mode)
{
	if (mode == 0)
	{
		for (int64_t i = 0; i < n; i++)
			tmp[i] = frand(-3.0f, 3.0f) * (i % 7 == 0 ? 4.0f : 1.0f);
		qi->from_float_ref(tmp, row, n);
		return;
	}
	for (size_t i = 0; i < bytes; i++)
		row[i] = (uint8_t) rng();
	if (mode == 2)
		return;
	if (type == OPUS_DQ_F32)
	{
		for (int64_t i = 0; i < n; i++)
		{
			float		f = frand(-100.0f, 100.0f);

			memcpy(row + 4 * i, &f, 4);
		}
		return;
	}
	if (type == OPUS_DQ_F16)
	{
		for (int64_t i = 0; i < n; i++)
		{
			uint16_t	h = opus_fp32_to_fp16(frand(-100.0f, 100.0f));

			memcpy(row + 2 * i, &h, 2);
		}
		return;
	}
	if (type == OPUS_DQ_BF16)
	{
		for (int64_t i = 0; i < n; i++)
		{
			uint16_t	h = opus_fp32_to_bf16(frand(-100.0f, 100.0f));

			memcpy(row + 2 * i, &h, 2);
		}
		return;
	}
	for (size_t b = 0; b < bytes / (size_t) qi->type_size; b++)
	{
		const int  *off = scale_offsets(type);

		for (int k = 0; off[k] >= 0; k++)
		{
			uint16_t	h = opus_fp32_to_fp16(frand(-0.5f, 0.5f));

			memcpy(row + b * qi->type_size + off[k], &h, 2);
		}
	}
}

int
main(void)
{
	static const int types[] = {
		OPUS_DQ_F32, OPUS_DQ_F16, OPUS_DQ_BF16, OPUS_DQ_Q4_0, OPUS_DQ_Q4_1,
		OPUS_DQ_Q5_0, OPUS_DQ_Q5_1, OPUS_DQ_Q8_0, OPUS_DQ_Q4_K, OPUS_DQ_Q5_K,
		OPUS_DQ_Q6_K,
	};
	static const int64_t lens[] = {256, 512, 2816};
	int			bad_h = 0;

	opus_qtype_init_cpu(true);

	/* the ids are the engine's */
	CHECK(OPUS_DQ_F32 == OPUS_TYPE_F32 && OPUS_DQ_F16 == OPUS_TYPE_F16 &&
		  OPUS_DQ_BF16 == OPUS_TYPE_BF16 && OPUS_DQ_Q4_0 == OPUS_TYPE_Q4_0 &&
		  OPUS_DQ_Q4_1 == OPUS_TYPE_Q4_1 && OPUS_DQ_Q5_0 == OPUS_TYPE_Q5_0 &&
		  OPUS_DQ_Q5_1 == OPUS_TYPE_Q5_1 && OPUS_DQ_Q8_0 == OPUS_TYPE_Q8_0 &&
		  OPUS_DQ_Q4_K == OPUS_TYPE_Q4_K && OPUS_DQ_Q5_K == OPUS_TYPE_Q5_K &&
		  OPUS_DQ_Q6_K == OPUS_TYPE_Q6_K, "OPUS_DQ_* ids differ from enum opus_qtype");

	/* every half */
	for (uint32_t h = 0; h < 65536; h++)
	{
		float		a = opus_fp16_to_fp32((uint16_t) h);
		float		b = opus_dq_h2f((uint16_t) h);

		if (memcmp(&a, &b, sizeof(a)) != 0)
			bad_h++;
	}
	CHECK(bad_h == 0, "opus_dq_h2f differs from opus_fp16_to_fp32 on %d of 65536 halves", bad_h);

	for (size_t ti = 0; ti < sizeof(types) / sizeof(types[0]); ti++)
	{
		int			type = types[ti];
		const struct opus_qtype_info *qi = opus_qtype_info((uint32_t) type);

		CHECK(qi && qi->supported, "type %d not supported by the engine", type);
		if (!qi || !qi->supported)
			continue;
		CHECK(opus_dq_block_size(type) == qi->block_size &&
			  opus_dq_type_size(type) == qi->type_size,
			  "%s: block geometry %d/%d, engine %d/%d", qi->name,
			  opus_dq_block_size(type), opus_dq_type_size(type),
			  qi->block_size, qi->type_size);
		for (size_t li = 0; li < sizeof(lens) / sizeof(lens[0]); li++)
		{
			int64_t		n = lens[li];
			size_t		bytes;
			uint8_t    *row;
			float	   *ref,
					   *got,
					   *tmp;

			if (n % qi->block_size != 0 || !opus_qtype_row_size((enum opus_qtype) type, n, &bytes))
				continue;
			row = malloc(bytes);
			ref = malloc(sizeof(float) * n);
			got = malloc(sizeof(float) * n);
			tmp = malloc(sizeof(float) * n);
			if (!row || !ref || !got || !tmp)
			{
				CHECK(0, "out of memory");
				return UNIT_DONE();
			}
			for (int mode = 0; mode < 3; mode++)
			{
				for (int rep = 0; rep < 4; rep++)
				{
					int64_t		first_bad = -1;
					int			ok_chunks = 1;

					make_row(type, qi, row, bytes, n, tmp, mode);
					qi->to_float_ref(row, ref, n);
					memset(got, 0xA5, sizeof(float) * n);
					for (int64_t c = 0; c < n / OPUS_DQ_CHUNK; c++)
						ok_chunks &= opus_dq_chunk(type, row, c, got + c * OPUS_DQ_CHUNK);
					for (int64_t i = 0; i < n && first_bad < 0; i++)
						if (memcmp(&ref[i], &got[i], sizeof(float)) != 0)
							first_bad = i;
					CHECK(ok_chunks && first_bad < 0,
						  "%s n=%lld mode %d rep %d: element %lld is %.9g, reference %.9g",
						  qi->name, (long long) n, mode, rep, (long long) first_bad,
						  first_bad >= 0 ? got[first_bad] : 0.0,
						  first_bad >= 0 ? ref[first_bad] : 0.0);
				}
			}
			free(row);
			free(ref);
			free(got);
			free(tmp);
		}
	}

	/* an unknown type is refused */
	{
		float		y[32];
		uint8_t		row[64] = {0};

		CHECK(!opus_dq_chunk(OPUS_TYPE_Q2_K, row, 0, y) && opus_dq_block_size(OPUS_TYPE_Q2_K) == 0,
			  "Q2_K should not be handled");
	}
	return UNIT_DONE();
}
