/*
 * quant_blocks.h - the in-memory (= on-disk, GGUF/ggml) block layouts of the
 * quantized tensor types the engine has kernels for.
 *
 * Every struct is bit-exact with ggml's block_* layout (little endian, no
 * padding); the sizes are pinned below so a layout mistake fails to compile.
 * f16 fields hold IEEE half bits (convert with opus_fp16_to_fp32).
 *
 * Element order inside a block (what the kernels rely on):
 *  - Q4_0/Q4_1: element j (j < 16) is the low nibble of qs[j], element j+16
 *    the high nibble of qs[j].  Q5_0/Q5_1 add bit j of the little-endian
 *    32-bit qh as the fifth bit of element j.
 *  - Q8_0/Q8_1: qs[j] is element j; Q8_1 also stores s = d * sum(qs).
 *  - Q4_K/Q5_K: 8 sub-blocks of 32 with 6-bit scales and mins packed into
 *    12 bytes; each 64-element chunk c uses 32 bytes of qs: element
 *    64c+l is the low nibble of qs[32c+l], element 64c+32+l the high one.
 *    Q5_K's fifth bits are bit 2c (low) and 2c+1 (high) of qh[l].
 *  - Q6_K: 16 sub-blocks of 16 with int8 scales; see quant_ref.c.
 *  - Q8_K: f32 d, 256 int8, and the sums of each 16 quants (bsums).
 */
#ifndef OPUS_QUANT_BLOCKS_H
#define OPUS_QUANT_BLOCKS_H

#include <stdint.h>

#define OPUS_QK32 32			/* elements per block of the 32-block types */
#define OPUS_QK_K 256			/* elements per K-quant super-block */
#define OPUS_K_SCALE_SIZE 12	/* packed 6-bit scales + mins of Q4_K/Q5_K */

typedef struct
{
	uint16_t	d;
	uint8_t		qs[OPUS_QK32 / 2];
} opus_block_q4_0;

typedef struct
{
	uint16_t	d;
	uint16_t	m;
	uint8_t		qs[OPUS_QK32 / 2];
} opus_block_q4_1;

typedef struct
{
	uint16_t	d;
	uint8_t		qh[4];
	uint8_t		qs[OPUS_QK32 / 2];
} opus_block_q5_0;

typedef struct
{
	uint16_t	d;
	uint16_t	m;
	uint8_t		qh[4];
	uint8_t		qs[OPUS_QK32 / 2];
} opus_block_q5_1;

typedef struct
{
	uint16_t	d;
	int8_t		qs[OPUS_QK32];
} opus_block_q8_0;

typedef struct
{
	uint16_t	d;
	uint16_t	s;				/* d * sum(qs) */
	int8_t		qs[OPUS_QK32];
} opus_block_q8_1;

typedef struct
{
	uint16_t	d;				/* super-block scale of the scales */
	uint16_t	dmin;			/* super-block scale of the mins */
	uint8_t		scales[OPUS_K_SCALE_SIZE];
	uint8_t		qs[OPUS_QK_K / 2];
} opus_block_q4_K;

typedef struct
{
	uint16_t	d;
	uint16_t	dmin;
	uint8_t		scales[OPUS_K_SCALE_SIZE];
	uint8_t		qh[OPUS_QK_K / 8];
	uint8_t		qs[OPUS_QK_K / 2];
} opus_block_q5_K;

typedef struct
{
	uint8_t		ql[OPUS_QK_K / 2];	/* low 4 bits */
	uint8_t		qh[OPUS_QK_K / 4];	/* high 2 bits */
	int8_t		scales[OPUS_QK_K / 16];
	uint16_t	d;
} opus_block_q6_K;

typedef struct
{
	float		d;
	int8_t		qs[OPUS_QK_K];
	int16_t		bsums[OPUS_QK_K / 16];
} opus_block_q8_K;

_Static_assert(sizeof(opus_block_q4_0) == 18, "Q4_0 block size");
_Static_assert(sizeof(opus_block_q4_1) == 20, "Q4_1 block size");
_Static_assert(sizeof(opus_block_q5_0) == 22, "Q5_0 block size");
_Static_assert(sizeof(opus_block_q5_1) == 24, "Q5_1 block size");
_Static_assert(sizeof(opus_block_q8_0) == 34, "Q8_0 block size");
_Static_assert(sizeof(opus_block_q8_1) == 36, "Q8_1 block size");
_Static_assert(sizeof(opus_block_q4_K) == 144, "Q4_K block size");
_Static_assert(sizeof(opus_block_q5_K) == 176, "Q5_K block size");
_Static_assert(sizeof(opus_block_q6_K) == 210, "Q6_K block size");
_Static_assert(sizeof(opus_block_q8_K) == 292, "Q8_K block size");

/*
 * Unpack the 6-bit scale and min of sub-block j (0..7) of a Q4_K/Q5_K
 * super-block: the first four live in the low 6 bits of bytes 0..3 (scales)
 * and 4..7 (mins); the last four keep their low 4 bits in bytes 8..11 and
 * their top 2 bits in the spare high bits of bytes 0..7.
 */
static inline void
opus_k_scale_min(int j, const uint8_t *q, uint8_t *sc, uint8_t *m)
{
	if (j < 4)
	{
		*sc = q[j] & 63;
		*m = q[j + 4] & 63;
	}
	else
	{
		*sc = (uint8_t) ((q[j + 4] & 0x0F) | ((q[j - 4] >> 6) << 4));
		*m = (uint8_t) ((q[j + 4] >> 4) | ((q[j] >> 6) << 4));
	}
}

#endif							/* OPUS_QUANT_BLOCKS_H */
