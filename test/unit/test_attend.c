/*
 * test_attend.c - the F16 KV cache's attention kernels: opus_fwd_attend_avx2
 * gives the same bits as opus_fwd_attend_ref on synthetic caches.  Head
 * sizes 64, 96 (a vec_dot tail of 32 dimensions), 128 and 256 (Gemma 3,
 * where the AVX2 kernel computes all the call's heads' scores at once),
 * 1..3 heads per call, one-token (vec_dot) and multi-token (tinyBLAS, gemm)
 * order, block sizes 16 and 5 (blocks narrower than the 8-slot loads),
 * block tables out of order, with and without a sliding window (kv0), and
 * 1..300 positions.  Skipped on CPUs without AVX2, FMA and F16C.
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cpu/forward_int.h"
#include "quant/qtype.h"
#include "unit.h"

#define MAX_KV 300
#define MAX_HD 256

static uint32_t rng = 12345;

static float
frand(void)
{
	rng = rng * 1664525u + 1013904223u;
	return (float) (rng >> 8) / (float) (1u << 24) - 0.5f;
}

static uint32_t
urand(uint32_t n)
{
	rng = rng * 1664525u + 1013904223u;
	return (rng >> 8) % n;
}

int
main(void)
{
	static const int hds[] = {64, 96, 128, 256};
	static const int bss[] = {16, 5};

	__builtin_cpu_init();
	if (!__builtin_cpu_supports("avx2") || !__builtin_cpu_supports("fma") ||
		!__builtin_cpu_supports("f16c"))
	{
		printf("skipped: no AVX2/FMA/F16C\n");
		return 0;
	}
	for (size_t ih = 0; ih < sizeof(hds) / sizeof(hds[0]); ih++)
		for (size_t ib = 0; ib < sizeof(bss) / sizeof(bss[0]); ib++)
		{
			int			hd = hds[ih],
						bs = bss[ib];
			int			n_blk = (MAX_KV + bs - 1) / bs;
			size_t		head_bytes = (size_t) bs * hd * 2;
			size_t		block_bytes = 2 * head_bytes;
			uint8_t    *mem = malloc(block_bytes * n_blk);
			uint16_t   *m16 = (uint16_t *) mem;
			int32_t    *blocks = malloc(sizeof(int32_t) * n_blk);
			float	   *q = malloc(sizeof(float) * 3 * MAX_HD);
			float	   *o1 = malloc(sizeof(float) * 3 * MAX_HD);
			float	   *o2 = malloc(sizeof(float) * 3 * MAX_HD);
			float	   *s1 = malloc(sizeof(float) * 3 * (MAX_KV + 16));
			float	   *s2 = malloc(sizeof(float) * 3 * (MAX_KV + 16));
			int			same = 0,
						cases = 0;

			for (size_t i = 0; i < block_bytes * n_blk / 2; i++)
				m16[i] = opus_fp32_to_fp16(2.0f * frand());
			for (int i = 0; i < n_blk; i++)
				blocks[i] = (int32_t) ((i * 7 + 3) % n_blk);
			for (int it = 0; it < 60; it++)
			{
				int			n_kv = 1 + (int) urand(MAX_KV);
				int			n_h = 1 + it % 3;
				bool		gemm = (it / 3) % 2 == 1;
				struct opus_attn_args a = {
					.q = q, .n_h = n_h, .hd = hd, .n_kv = n_kv,
					.kv0 = it % 4 == 3 ? (int) urand((uint32_t) n_kv) : 0,
					.scale = 1.0f / sqrtf((float) hd), .bs = bs, .kv_mem = mem,
					.block_bytes = block_bytes, .blocks = blocks, .k_off = 0,
					.v_off = head_bytes, .gemm = gemm,
				};

				for (int i = 0; i < n_h * hd; i++)
					q[i] = 4.0f * frand();
				a.out = o1;
				a.scores = s1;
				opus_fwd_attend_ref(&a);
				a.out = o2;
				a.scores = s2;
				opus_fwd_attend_avx2(&a);
				cases++;
				if (memcmp(o1, o2, sizeof(float) * n_h * hd) == 0)
					same++;
				else
					fprintf(stderr, "hd %d bs %d n_kv %d kv0 %d heads %d gemm %d: outputs differ\n",
							hd, bs, n_kv, a.kv0, n_h, gemm);
			}
			CHECK(same == cases, "hd %d bs %d: AVX2 attention equals the plain one in %d of %d cases",
				  hd, bs, same, cases);
			free(mem);
			free(blocks);
			free(q);
			free(o1);
			free(o2);
			free(s1);
			free(s2);
		}
	return UNIT_DONE();
}
